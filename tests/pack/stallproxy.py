"""A TCP proxy that stalls mid-object, in front of the test S3 server (tests/s3server.py), for
tests/pack/datasets/bench2drive/test_b2d_s3_input.py's stall tests: a store that stops
answering inside a read.
"""
from __future__ import annotations

import select
import socket
import threading


class StallingProxy:
    """A TCP proxy in front of the S3 server that forwards the server's first `after` bytes
    (over all connections: the server closes each after one answer), then, `times` times,
    cuts an answer there and holds its connection open in silence: a store that stalls
    mid-object. Past `times` stalls it forwards everything again."""

    def __init__(self, upstream: str, after: int, times: int) -> None:
        host, port = upstream.rsplit("/", 1)[-1].split(":")
        self.upstream, self.after, self.left = (host, int(port)), after, times
        self.passed = self.stalls = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.lock, self.stop = threading.Lock(), threading.Event()
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    def _accept(self) -> None:
        self.listener.settimeout(0.2)
        while not self.stop.is_set():
            try:
                conn = self.listener.accept()[0]
            except OSError:
                continue
            thread = threading.Thread(target=self._pipe, args=(conn,), daemon=True)
            self.threads.append(thread)
            thread.start()

    def _forward(self, n: int) -> int:
        """How many of n bytes from the server pass on; fewer than n is a stall."""
        with self.lock:
            ok = n
            if self.left and self.passed + n > self.after:
                self.left -= 1
                self.stalls += 1
                ok = max(0, self.after - self.passed)
            self.passed += ok
            return ok

    def _pipe(self, conn: socket.socket) -> None:
        up, stalled = socket.create_connection(self.upstream), False
        try:
            while not self.stop.is_set():
                ready = select.select([conn] if stalled else [conn, up], [], [], 0.2)[0]
                for sock in ready:
                    data = sock.recv(1 << 16)
                    if not data:
                        return   # either side closed: so does the proxy
                    if sock is conn:
                        up.sendall(data)
                        continue
                    ok = self._forward(len(data))
                    conn.sendall(data[:ok])
                    stalled = ok < len(data)   # then never another byte on this connection
        except OSError:
            return
        finally:
            conn.close()
            up.close()

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(5)
        self.listener.close()
