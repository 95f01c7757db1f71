"""Reading s3:// (and any other fsspec URL) objects: bounded, hashed, with timeouts and retries.

The same shape as remote.py's HTTP reads, so the loader, the download cache and the sha256
checks treat an object store like an HTTP server: an ObjectReader is a CheckedStream, cut at
the manifest's declared bytes and hashed as it is read. fsspec and its backend (s3fs) are the
optional extra `carla-wds[s3]`, imported only when such a URL is met. Credentials and the
endpoint come from the backend's own sources (for S3: the AWS environment and config files,
AWS_ENDPOINT_URL included) or from `storage_options`; nothing is set here but timeouts.
ObjectLister lists a prefix folder by folder under the same timeouts and retries (the packer
finds Bench2Drive's clip archives on a store with it).
"""
from __future__ import annotations

import errno
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

from .remote import (CheckedStream, RemoteError, RemoteOptions, describe_failure,
                     pause_or_fail)

BLOCK = 8 << 20   # bytes per ranged GET: large enough that requests are few, small to retry
_NOT_OBJSTORE = ("http://", "https://", "file://")
_S3 = ("s3", "s3a")
# what to install for a protocol's fsspec backend (the s3 extra brings s3fs only)
_BACKENDS = {"s3": "'carla-wds[s3]'", "s3a": "'carla-wds[s3]'", "gs": "gcsfs", "gcs": "gcsfs",
             "az": "adlfs", "abfs": "adlfs", "abfss": "adlfs"}


def install_hint(protocol: str) -> str:
    """The pip install that reads `protocol`:// URLs."""
    if protocol in _BACKENDS:
        return f"pip install {_BACKENDS[protocol]}"
    return f"pip install the fsspec package that reads {protocol}:// (fsspec lists them)"
FIX_MISSING = "check the bucket and prefix (the URL), and that the object was uploaded"
FIX_DENIED = ("check the credentials and the endpoint: the AWS environment (AWS_ACCESS_KEY_ID, "
              "AWS_SECRET_ACCESS_KEY, AWS_PROFILE, AWS_ENDPOINT_URL) or ~/.aws/config, or pass "
              "storage_options={'key': ..., 'secret': ..., 'endpoint_url': ...}")
# botocore's credential errors are not OSErrors; matched by name so botocore is not imported
_CREDENTIAL_ERRORS = {"NoCredentialsError", "PartialCredentialsError", "NoRegionError",
                      "InvalidAccessKeyId", "SignatureDoesNotMatch"}


def is_objstore(url: str) -> bool:
    """A URL read through fsspec: any scheme but http(s) and file (pipe: has no '://')."""
    return "://" in url and not url.startswith(_NOT_OBJSTORE)


def join(where: str, name: str) -> str:
    """A shard name (already held to manifest.NAME_RULE: no '..', no scheme) under the
    manifest's prefix."""
    return f"{where.rsplit('/', 1)[0]}/{name}"


def filesystem(url: str, opts: RemoteOptions) -> tuple[Any, str]:
    """The fsspec filesystem and path of `url`, with the read timeouts of `opts` for S3."""
    protocol = url.split("://", 1)[0]
    try:
        import fsspec
    except ImportError:
        raise RemoteError(f"{url}: reading {protocol}:// needs fsspec. Fix: "
                          f"{install_hint(protocol)}") from None
    kw = dict(opts.storage_options or {})
    if protocol in _S3:
        # botocore and s3fs retry on their own (up to 5 x 5 attempts): one attempt each, so
        # that RemoteOptions.retries is the bound that holds
        cfg = dict(kw.get("config_kwargs") or {})
        cfg.setdefault("connect_timeout", opts.connect_timeout)
        cfg.setdefault("read_timeout", opts.read_timeout)
        cfg.setdefault("retries", {"total_max_attempts": 1})
        kw["config_kwargs"] = cfg
    try:
        fs, path = fsspec.core.url_to_fs(url, **kw)
    except (ImportError, ValueError) as exc:
        raise RemoteError(f"{url}: no fsspec backend for {protocol}:// ({exc}). Fix: "
                          f"{install_hint(protocol)}") from None
    if protocol in _S3:
        fs.retries = 1
    return fs, path


def permanent(exc: BaseException) -> tuple[str, str] | None:
    """(cause, fix) for a failure that a retry cannot mend; None for a transient one."""
    if isinstance(exc, FileNotFoundError):
        return "no such object (or bucket)", FIX_MISSING
    if isinstance(exc, PermissionError) or type(exc).__name__ in _CREDENTIAL_ERRORS:
        return f"access refused ({describe_failure(exc)})", FIX_DENIED
    if isinstance(exc, (IsADirectoryError, NotADirectoryError, ValueError, TypeError)):
        return describe_failure(exc), "check the URL and storage_options"
    return None


FIX_TRANSIENT = ("check the endpoint and the network; for a slow store raise the read "
                 "timeout or the retries (RemoteOptions)")


def with_retries(owner: Any, call: Callable[[], Any],
                 classify: Callable[[BaseException], tuple[str, str] | None] = permanent,
                 fix: str = FIX_TRANSIENT) -> Any:
    """call(), retried after a transient failure with the doubling backoff of owner.opts; a
    permanent failure (`classify`), or the last transient one, raises owner._fail(cause,
    fix). `owner` (a reader, a lister, a write) counts its failures in `_failures`, so
    `retries` bounds them for the whole object or listing, not for a streak."""
    while True:
        attempt = owner._failures
        try:
            return call()
        except Exception as exc:   # backends raise their own types: sorted by classify()
            failure = classify(exc)
            if failure:
                raise owner._fail(*failure) from None
            owner._failures += 1
            pause_or_fail(owner, exc, attempt, fix)


class ObjectLister:
    """Listings of the folders under a prefix (`url`), one level per call, each with the
    timeouts of `filesystem` and the bounded retries of `with_retries`. Never from fsspec's
    listing cache: a prefix is listed as it is now, so objects uploaded since are seen."""

    def __init__(self, url: str, opts: RemoteOptions | None = None, what: str = "prefix"
                 ) -> None:
        self.url, self.opts, self.what = url, opts or RemoteOptions(), what
        self.scheme = url.split("://", 1)[0]
        self._failures = 0
        self.fs, self.path = filesystem(url, self.opts)
        self.path = self.path.rstrip("/")

    def _fail(self, cause: str, fix: str) -> RemoteError:
        return RemoteError(f"{self.what} {self.url}: {cause}. Fix: {fix}")

    def url_of(self, path: str) -> str:
        """The URL of a listed path, in the scheme the user gave (s3a:// stays s3a://)."""
        return f"{self.scheme}://{path}"

    def folder(self, path: str) -> tuple[list[str], dict[str, int]]:
        """(sub-folder paths, {object path: size}) directly under `path`, sorted; a path
        holding nothing is FileNotFoundError's 'no such object', a permanent failure."""
        def ls() -> list[dict[str, Any]]:
            self.fs.invalidate_cache(path)
            return self.fs.ls(path, detail=True)
        dirs, files = [], {}
        for info in with_retries(self, ls):
            name = info["name"].rstrip("/")
            if info["type"] == "directory":
                if name != path:
                    dirs.append(name)
            else:
                files[name] = int(info.get("size") or 0)
        self.fs.invalidate_cache(path)   # later reads ask the store, not this listing
        return sorted(dirs), dict(sorted(files.items()))


class ObjectReader(CheckedStream):
    """A read-only stream of one object, at most `limit` bytes, hashed as it is read, fetched
    in ranged reads of BLOCK bytes. `exact`: the object must have `limit` bytes (a shard);
    otherwise `limit` is a cap (a manifest). A failed read is retried at the same offset, at
    most `retries` times for the whole object, with doubling backoff."""

    def __init__(self, url: str, limit: int, opts: RemoteOptions | None = None,
                 what: str = "shard", exact: bool = True) -> None:
        super().__init__(limit)
        self.url, self.opts, self.what, self.exact = url, opts or RemoteOptions(), what, exact
        self._failures, self._buf, self._i = 0, b"", 0
        self._next: Future | None = None   # the next block, asked for while this one is read
        self._pool: ThreadPoolExecutor | None = None
        self._fs, self._path = filesystem(url, self.opts)
        # ask for the size now: a missing object or a refused credential is reported at open
        self.size = int(with_retries(self, lambda: self._fs.size(self._path)))
        if self.size > limit or (exact and self.size != limit):
            raise self._fail(f"the store holds {self.size} bytes, not the declared size" if exact
                             else f"{self.size} bytes, larger than {limit}",
                             "re-upload the object or re-pack; the manifest and the object "
                             "must agree" if exact else "check the URL")
        self._off = 0   # where the next ranged read starts

    def _fail(self, cause: str, fix: str) -> RemoteError:
        declared = f"of {self.limit} declared " if self.exact else ""
        return RemoteError(f"{self.what} {self.url}: {cause}, after {self.pos} bytes "
                           f"{declared}arrived. Fix: {fix}")

    def _fetch(self, start: int) -> bytes:
        end = min(self.size, start + BLOCK)
        data = self._fs.cat_file(self._path, start=start, end=end)
        if len(data) < end - start:   # a store answers a range whole, unless the object shrank
            raise _ShortBlock(f"a ranged read gave {len(data)} of {end - start} bytes")
        return data

    def _classify(self, exc: BaseException) -> tuple[str, str] | None:
        """permanent(), and an object that is no longer the size it had at open: a short
        block or a refused range (HTTP 416, EINVAL from s3fs) is looked into once (one HEAD)
        rather than retried as if the store were slow."""
        failure = permanent(exc)
        if failure or not (isinstance(exc, _ShortBlock) or getattr(exc, "errno", None) ==
                           errno.EINVAL or "416" in str(exc)):
            return failure
        try:
            self._fs.invalidate_cache(self._path)
            now = int(self._fs.size(self._path))
        except Exception:   # noqa: BLE001 - no answer: retried like any transient failure
            return None
        if now == self.size:
            return None
        return (f"object is {now} bytes, the manifest declares {self.limit}: replaced after "
                "packing?", "re-pack the dataset, or restore the object its manifest was "
                "written for")

    def _block(self) -> bytes:
        """The block at the current offset, and the next one asked for in the background,
        so that a store's latency overlaps the reader's decoding instead of adding to it.
        The block fetched ahead is the first attempt: its failure counts as one, and the
        retries fetch the block again here."""
        start, ahead, self._next = self._off, self._next, None
        first = [ahead.result] if ahead is not None else []
        data = with_retries(self, lambda: first.pop()() if first else self._fetch(start),
                            self._classify)
        if data and start + len(data) < self.size:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix="objstore-ahead")
            self._next = self._pool.submit(self._fetch, start + len(data))
        return data

    def _more(self, n: int) -> bytes:
        if self._i >= len(self._buf):
            if self._off >= self.size:
                return b""
            self._buf = self._block()
            self._i, self._off = 0, self._off + len(self._buf)
            if not self._buf:   # the object shrank since it was opened: finish() reports it
                self._off = self.size
                return b""
        chunk = self._buf[self._i:self._i + n]   # slices of one block: no quadratic copying
        self._i += len(chunk)
        return chunk

    def close(self) -> None:
        self._buf, self._i, self._next = b"", 0, None
        if self._pool is not None:
            # a block still on its way is left to finish in its thread (its read timeout
            # bounds it) rather than waited for: closing early must not stall the reader
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None


class _ShortBlock(Exception):
    """A ranged read that returned fewer bytes than the object held at open."""


def read_object(url: str, limit: int, opts: RemoteOptions | None = None,
                what: str = "manifest") -> bytes:
    """A whole small object (a manifest), refused beyond `limit` bytes."""
    reader = ObjectReader(url, limit, opts, what, exact=False)
    try:
        return reader.read()
    finally:
        reader.close()
