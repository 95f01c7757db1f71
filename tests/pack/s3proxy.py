"""A real HTTP proxy on 127.0.0.1 in front of the test S3 server (tests/s3server.py), for the
upload tests: clients reach it as their endpoint_url, it forwards every request as it came,
and it records them. For a PUT of a key ending in `rule.suffix` it can instead:
- "corrupt": flip one byte in the middle of the body before forwarding (`times` times), as a
  faulty proxy or gateway would, so that the object lands with other bytes;
- "hold": keep the request (unanswered) until `release()`: the client is then inside the
  upload, deterministically, and a test can kill it there. With `land=True` the request is
  forwarded first, so the object is stored but the client never hears back.
"""
from __future__ import annotations

import http.client
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection"}


@dataclass
class Rule:
    suffix: str
    action: str             # "corrupt" or "hold"
    times: int = 1          # corrupt: how many PUTs are corrupted
    land: bool = False      # hold: forward the PUT before holding its answer


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body_bytes: int


@dataclass
class Proxy:
    upstream: str
    rule: Rule | None = None
    seen: list[Seen] = field(default_factory=list)
    held: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)

    def start(self) -> str:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def _any(self) -> None:
                proxy._handle(self)
            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _any

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self._server.server_port}"

    def stop(self) -> None:
        self.released.set()
        self._server.shutdown()
        self._server.server_close()

    def release(self) -> None:
        self.released.set()

    def puts(self) -> list[Seen]:
        return [s for s in self.seen if s.method == "PUT"]

    def _matches(self, handler) -> bool:
        r = self.rule
        return (r is not None and handler.command == "PUT"
                and urlsplit(handler.path).path.endswith(r.suffix)
                and "x-amz-copy-source" not in {k.lower() for k in handler.headers})

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        body = h.rfile.read(int(h.headers.get("Content-Length") or 0))
        self.seen.append(Seen(h.command, h.path, dict(h.headers), len(body)))
        hit = self._matches(h)
        if hit and self.rule.action == "corrupt" and self.rule.times > 0:
            self.rule.times -= 1
            flipped = bytearray(body)
            flipped[len(body) // 2] ^= 0xFF
            body = bytes(flipped)
        if hit and self.rule.action == "hold" and not self.rule.land:
            self._hold(h)
            return
        status, reason, headers, data = self._forward(h, body)
        if hit and self.rule.action == "hold":
            self._hold(h)
            return
        h.send_response(status, reason)
        for k, v in headers:
            if k.lower() not in _HOP and k.lower() != "content-length":
                h.send_header(k, v)
        length = dict((k.lower(), v) for k, v in headers).get("content-length", str(len(data)))
        h.send_header("Content-Length", length if h.command == "HEAD" else str(len(data)))
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(data)

    def _hold(self, h: BaseHTTPRequestHandler) -> None:
        """Never answer: the client waits until it is killed; then drop the connection."""
        self.held.set()
        self.released.wait(timeout=300)
        h.close_connection = True

    def _forward(self, h: BaseHTTPRequestHandler, body: bytes):
        up = urlsplit(self.upstream)
        conn = http.client.HTTPConnection(up.hostname, up.port, timeout=60)
        try:
            headers = {k: v for k, v in h.headers.items() if k.lower() not in _HOP}
            conn.request(h.command, h.path, body=body if body or h.command in ("PUT", "POST")
                         else None, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            return resp.status, resp.reason, resp.getheaders(), data
        finally:
            conn.close()
