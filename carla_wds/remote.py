"""Reading http(s):// objects with timeouts, bounded retries and a byte limit.

webdataset's `gopen` runs `curl` for URLs: no read timeout (a server that goes silent after
the headers hangs a worker for ever), 60 s of retries on an HTTP 500, and no limit on the body.
Here every read has a connect and a read timeout, transient failures are retried a bounded
number of times with exponential backoff (resuming with a Range request where the bytes so far
are kept), and no more than the manifest declares is ever read into memory or onto disk.
"""
from __future__ import annotations

import functools
import hashlib
import http.client
import logging
import socket
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field, replace
from typing import Any, Callable

log = logging.getLogger(__name__)
_TRANSIENT_STATUS = {408, 425, 429, 500, 502, 503, 504}


@dataclass(frozen=True)
class RemoteOptions:
    """How remote reads behave; `CARLAWebData(remote=RemoteOptions(...))` sets them."""
    connect_timeout: float = 10.0   # seconds to open a connection
    read_timeout: float = 30.0      # seconds any single read may wait for bytes
    retries: int = 3                # further attempts after a transient failure
    backoff: float = 0.5            # seconds before the first retry, doubled for each next one
    # fsspec's options for s3:// and other object-store URLs (objstore.py): endpoint_url, key,
    # secret, ...; left out of repr and hash, since it may hold credentials and dicts
    storage_options: dict[str, Any] | None = field(default=None, repr=False, hash=False)

    def __post_init__(self) -> None:
        if min(self.connect_timeout, self.read_timeout) <= 0 or self.retries < 0 or \
                self.backoff < 0:
            raise ValueError(f"{self}: timeouts must be > 0, retries and backoff >= 0")


def with_storage(remote: RemoteOptions | None, storage_options: dict[str, Any] | None
                 ) -> RemoteOptions | None:
    """`remote` carrying `storage_options` too, so that they travel with it to the workers."""
    if storage_options is None:
        return remote
    return replace(remote or RemoteOptions(), storage_options=dict(storage_options))


class RemoteError(OSError):
    """A remote read that failed for good; names the URL, the bytes that arrived and the fix."""


class _Timed:
    """Opens with the connect timeout, then switches the socket to the read timeout."""

    def connect(self) -> None:
        super().connect()   # type: ignore[misc]  # uses self.timeout = connect_timeout
        self.sock.settimeout(self.read_timeout)


class _TimedHTTP(_Timed, http.client.HTTPConnection):
    def __init__(self, *args, read_timeout: float, **kw) -> None:
        super().__init__(*args, **kw)
        self.read_timeout = read_timeout


class _TimedHTTPS(_Timed, http.client.HTTPSConnection):
    def __init__(self, *args, read_timeout: float, **kw) -> None:
        super().__init__(*args, **kw)
        self.read_timeout = read_timeout


@functools.lru_cache(maxsize=8)
def _opener(read_timeout: float) -> urllib.request.OpenerDirector:
    class HTTP(urllib.request.HTTPHandler):
        def http_open(self, req):
            return self.do_open(functools.partial(_TimedHTTP, read_timeout=read_timeout), req)

    class HTTPS(urllib.request.HTTPSHandler):
        def https_open(self, req):
            return self.do_open(functools.partial(_TimedHTTPS, read_timeout=read_timeout), req,
                                context=self._context)
    return urllib.request.build_opener(HTTP, HTTPS)   # proxies from the environment stay


def is_http(url: str) -> bool:
    return url.startswith(("http://", "https://"))


class CheckedStream:
    """A stream cut at `limit` bytes and hashed as it is read: the one shape of every remote or
    piped shard. Subclasses give `_more(n)` (up to n further bytes, b"" at the end) and
    `_fail(cause, fix)` (the error naming their source)."""

    def __init__(self, limit: int) -> None:
        self.limit, self.pos, self._digest, self._ahead = limit, 0, hashlib.sha256(), b""

    def _more(self, n: int) -> bytes:
        raise NotImplementedError

    def _fail(self, cause: str, fix: str) -> Exception:
        raise NotImplementedError

    def read(self, n: int = -1) -> bytes:
        """Up to n bytes (all that is left within the limit for n < 0); b"" at the end."""
        n = self.limit - self.pos if n < 0 else min(n, self.limit - self.pos)
        if self._ahead:
            data, self._ahead = self._ahead[:n], self._ahead[n:]
            return data
        parts, got = [], 0
        while got < n:
            chunk = self._more(n - got)
            if not chunk:   # the end, before the limit: a cap reached early, or a short body
                self.limit = self.pos
                break
            parts.append(chunk)
            got += len(chunk)
            self.pos += len(chunk)
            self._digest.update(chunk)
        return b"".join(parts)

    def peek(self, n: int = 1) -> bytes:
        if not self._ahead:
            self._ahead = self.read(n)
        return self._ahead[:n]

    def finish(self, sha256: str | None, size: int | None = None) -> None:
        """Read what is left (the tar's end padding), then check the size and the sha256."""
        self._ahead = b""
        while self.read(1 << 20):
            pass
        if size is not None and self.pos != size:
            raise self._fail(f"{self.pos} bytes, the manifest declares {size}",
                             "re-download or re-pack the shard")
        if sha256 is not None and self._digest.hexdigest() != sha256:
            raise self._fail(f"sha256 {self._digest.hexdigest()} differs from the manifest's "
                             f"{sha256}", "re-upload or re-pack the shard")


class HTTPReader(CheckedStream):
    """A read-only stream of one URL's body, at most `limit` bytes, hashed as it is read.

    `exact`: the body must have `limit` bytes (a shard, whose size the manifest declares);
    otherwise `limit` is only a cap (a manifest). A connection that fails or stalls is reopened
    at the current offset with a Range request, up to `retries` times in a row.
    """

    def __init__(self, url: str, limit: int, opts: RemoteOptions | None = None,
                 what: str = "shard", exact: bool = True) -> None:
        super().__init__(limit)
        self.url, self.opts, self.what, self.exact = url, opts or RemoteOptions(), what, exact
        self._resp: http.client.HTTPResponse | None = None
        self._failures = 0
        self._with_retries(lambda: b"")   # connect now: a 404 is reported before any read

    def _fail(self, cause: str, fix: str) -> RemoteError:
        declared = f"of {self.limit} declared " if self.exact else ""
        return RemoteError(f"{self.what} {self.url}: {cause}, after {self.pos} bytes "
                           f"{declared}arrived. Fix: {fix}")

    def _open(self) -> http.client.HTTPResponse:
        req = urllib.request.Request(self.url, headers={"Accept-Encoding": "identity"})
        if self.pos:
            req.add_header("Range", f"bytes={self.pos}-")
        try:
            resp = _opener(self.opts.read_timeout).open(req, timeout=self.opts.connect_timeout)
        except urllib.error.HTTPError as exc:
            exc.close()
            if exc.code in _TRANSIENT_STATUS:
                raise _Transient(f"HTTP {exc.code} {exc.reason}") from None
            if exc.code == 416 and self.exact:   # a Range past the end: the body shrank
                total = (exc.headers.get("Content-Range") or "").rpartition("/")[2]
                raise self._fail(f"object is {total or 'fewer'} bytes, the manifest declares "
                                 f"{self.limit}: replaced after packing?", "re-pack the "
                                 "dataset, or restore the file its manifest was written for"
                                 ) from None
            raise self._fail(f"HTTP {exc.code} {exc.reason}", "check that the URL exists and "
                             "that you may read it (credentials, path)") from None
        length = resp.headers.get("Content-Length")
        total = int(length) if length and length.isdigit() else None
        if self.pos and resp.status == 206:
            total = None if total is None else self.pos + total
        elif self.pos:   # the server ignored the Range: skip what was already read
            self._discard(resp, self.pos)
        if total is not None and (total > self.limit or (self.exact and total != self.limit)):
            resp.close()
            if self.exact:
                raise self._fail(f"the server announces {total} bytes (Content-Length), not "
                                 "the declared size", "re-upload the file or re-pack; the "
                                 "manifest and the object must agree")
            raise self._fail(f"the server announces {total} bytes, larger than {self.limit} "
                             "bytes", "check the URL")
        return resp

    @staticmethod
    def _discard(resp: http.client.HTTPResponse, n: int) -> None:
        while n > 0 and (chunk := resp.read(min(n, 1 << 20))):
            n -= len(chunk)

    def _with_retries(self, call: Callable[[], bytes]) -> bytes:
        # `retries` bounds the failures of the whole object, not of a streak: a server that
        # stalls after every megabyte must not take a timeout per megabyte
        while True:
            attempt = self._failures
            try:
                if self._resp is None:
                    self._resp = self._open()
                return call()
            except RemoteError:
                self.close()
                raise
            except (_Transient, OSError, http.client.HTTPException) as exc:
                self.close()   # the next attempt reopens at self.pos
                self._failures += 1
                pause_or_fail(self, exc, attempt, "check the server and the network; for a "
                              "slow server raise the read timeout or the retries "
                              "(RemoteOptions)")

    def _more(self, n: int) -> bytes:
        return self._with_retries(lambda: self._read_some(n))

    def _read_some(self, n: int) -> bytes:
        # read1: what has arrived, so that bytes before a stall are kept, not lost in a
        # buffered read(n) that times out
        chunk = self._resp.read1(min(n, 8 << 20))
        if not chunk and self.exact:   # the connection dropped: retried from here
            raise http.client.IncompleteRead(b"", self.limit - self.pos)
        return chunk

    def hexdigest(self) -> str:
        return self._digest.hexdigest()

    def close(self) -> None:
        if self._resp is not None:
            self._resp.close()
            self._resp = None


def pause_or_fail(reader: Any, exc: BaseException, attempt: int, fix: str) -> None:
    """After the failed attempt `attempt` (0-based) of a reader (HTTP or object store): wait
    the doubling backoff, or raise its error naming the URL once the retries are spent."""
    opts = reader.opts
    if attempt >= opts.retries:
        raise reader._fail(f"{describe_failure(exc)} (tried {attempt + 1} times)", fix) from None
    delay = opts.backoff * 2 ** attempt
    log.warning("%s %s: %s; retry %d of %d in %.1f s", reader.what, reader.url,
                describe_failure(exc), attempt + 1, opts.retries, delay)
    time.sleep(delay)


class _Transient(Exception):
    """A server answer worth retrying (5xx, 429)."""


def describe_failure(exc: BaseException) -> str:
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return "no bytes within the read timeout (the server stalled)"
    if isinstance(exc, urllib.error.URLError):
        return f"cannot connect ({exc.reason})"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def read_url(url: str, limit: int, opts: RemoteOptions | None = None,
             what: str = "manifest") -> bytes:
    """A whole small object (a manifest), refused beyond `limit` bytes."""
    reader = HTTPReader(url, limit + 1, opts, what, exact=False)
    try:
        data = reader.read()
    finally:
        reader.close()
    if len(data) > limit:
        raise RemoteError(f"{what} {url}: larger than {limit} bytes. Fix: check the URL")
    return data
