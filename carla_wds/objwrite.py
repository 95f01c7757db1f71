"""Writing s3:// (and other fsspec) objects for `pack` and `merge`: each object is checked
after it lands, and a write that fails or lands wrong is retried a bounded number of times.

How a landed object is checked: its size (a HEAD) and the sha256 of its bytes read back
through objstore.ObjectReader, against the size and sha256 of what was meant to land. A
store's own checksum (PutObject's ChecksumSHA256) was tried first and is not relied on: moto,
the S3 server the tests run, accepts a PUT whose ChecksumSHA256 is wrong and returns none on
HEAD (moto 5.2.6, s3fs 2026.9.0), so a check built on it could not be tested here, and other
S3-compatible stores differ in what they honour. Reading back costs one GET of each object,
and it catches what any store, proxy or gateway did to the bytes.

Timeouts, retries and credentials are objstore's: the AWS environment and config
(AWS_ENDPOINT_URL included) or `RemoteOptions.storage_options`; botocore's own retries off.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any, Callable

from .objstore import BLOCK, ObjectReader, filesystem, is_objstore, permanent, with_retries
from .remote import RemoteError, RemoteOptions, describe_failure

log = logging.getLogger(__name__)
FIX_BUCKET = ("check the URL: the bucket must exist (create it, e.g. `aws s3 mb s3://BUCKET`) "
              "and so must an object copied from")
FIX_RETRY = ("check the endpoint and the network (a proxy or gateway that alters bodies?); "
             "for a flaky store raise the retries.")


def _permanent(exc: BaseException) -> tuple[str, str] | None:
    """(cause, fix) of a failure a retry cannot mend, as for reads (objstore.permanent), but
    a missing bucket is the likelier cause when writing."""
    if isinstance(exc, FileNotFoundError):
        return f"no such bucket or object ({describe_failure(exc)})", FIX_BUCKET
    return permanent(exc)


class Mismatch(Exception):
    """An object that landed other than it was sent: worth writing again."""


class _Attempts:
    """The attempts of one write or listing: what with_retries and pause_or_fail count and
    name in their messages."""

    def __init__(self, opts: RemoteOptions, what: str, url: str) -> None:
        self.opts, self.what, self.url, self._failures = opts, what, url, 0

    def _fail(self, cause: str, fix: str) -> RemoteError:
        return RemoteError(f"{self.what} {self.url}: {cause}. Fix: {fix}")


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def json_bytes(doc: Any) -> bytes:
    """A manifest's bytes exactly as fileio.atomic_write_json writes them locally, so a pack
    or merge to a store gives the bytes of the same pack or merge to a folder."""
    return (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()


class StoreWriter:
    """The objects under one prefix (`url`, e.g. s3://bucket/runs/a) of an object store."""

    def __init__(self, url: str, remote: RemoteOptions | None = None,
                 what: str = "output") -> None:
        if not is_objstore(url):
            raise ValueError(f"{url} is not an object store URL (s3://...)")
        self.url, self.what = url.rstrip("/"), what
        self.opts = remote or RemoteOptions()
        self.fs, self.root = filesystem(self.url, self.opts)
        self.root = self.root.rstrip("/")

    def url_of(self, name: str) -> str:
        return f"{self.url}/{name}"

    def _path(self, name: str) -> str:
        return f"{self.root}/{name}"

    def _retrying(self, doing: str, url: str, call: Callable[[], Any]) -> Any:
        """call(): (result, None) when done, (None, problem) to try again; exceptions are
        sorted into permanent (raised at once) and transient (tried again), as for reads
        (objstore.with_retries), with `retries` counted afresh for each call."""
        def attempt() -> Any:
            result, problem = call()
            if problem is not None:
                raise Mismatch(problem)
            return result
        return with_retries(_Attempts(self.opts, doing, url), attempt, _permanent, FIX_RETRY)

    def listing(self) -> dict[str, int]:
        """Name (relative to the prefix) -> size of every object under the prefix."""
        def call():
            self.fs.invalidate_cache(self.root)
            return self.fs.find(self.root, detail=True), None
        found = self._retrying(f"listing the {self.what}", self.url, call)
        n = len(self.root) + 1
        return {k[n:]: int(v["size"]) for k, v in found.items()
                if v.get("type", "file") != "directory" and k.startswith(self.root + "/")}

    def remove(self, names: list[str]) -> None:
        """Delete objects (absent ones are no error)."""
        if names:
            self._retrying(f"deleting from the {self.what}", self.url,
                           lambda: (self.fs.rm([self._path(n) for n in names]), None))

    def abort_unfinished(self) -> int:
        """Abort the multipart uploads left unfinished under the prefix (by a pack killed in
        a large shard's upload): a store keeps their parts, unlisted and billed, until they
        are aborted. S3 only (other fsspec stores have no such uploads); how many there were."""
        if not hasattr(self.fs, "call_s3"):
            return 0
        bucket, key, _ = self.fs.split_path(self.root)

        def call():
            found = self.fs.call_s3("list_multipart_uploads", Bucket=bucket, Prefix=key + "/")
            uploads = found.get("Uploads") or []
            for up in uploads:
                self.fs.call_s3("abort_multipart_upload", Bucket=bucket, Key=up["Key"],
                                UploadId=up["UploadId"])
            return len(uploads), None
        n = self._retrying(f"aborting unfinished uploads of the {self.what}", self.url, call)
        if n:
            log.info("%s: aborted %d unfinished multipart upload(s)", self.url, n)
        return n

    def put_file(self, local: str | Path, name: str, size: int, sha256: str) -> None:
        """Upload a local file whose size and sha256 the caller knows; checked after."""
        self._landed(name, size, sha256, lambda: self.fs.put_file(str(local), self._path(name)))

    def put_bytes(self, name: str, data: bytes) -> None:
        """A small object (a manifest): one PUT, which a reader sees whole or not at all."""
        self._landed(name, len(data), sha256_bytes(data),
                     lambda: self.fs.pipe_file(self._path(name), data))

    def copy_from(self, src_url: str, name: str, size: int, sha256: str) -> None:
        """A server-side copy of an object of the same store (no bytes pass through here)."""
        _, src = filesystem(src_url, self.opts)
        self._landed(name, size, sha256, lambda: self.fs.copy(src, self._path(name)))

    def _landed(self, name: str, size: int, sha256: str, write: Callable[[], Any]) -> None:
        def call():
            write()
            self.fs.invalidate_cache(self._path(name))
            return None, self.mismatch(name, size, sha256)
        try:
            self._retrying(f"writing the {self.what} object", self.url_of(name), call)
        except RemoteError:
            # an object that never matched must not keep the name: a reader would trust it
            try:
                self.remove([name])
            except RemoteError as exc:
                log.warning("could not delete the unchecked object %s: %s", self.url_of(name),
                            exc)
            raise

    def get_bytes(self, name: str, size: int) -> bytes:
        """A small object whose size a listing gave (a pack's journal), in one ranged GET that
        never reads past `size`, tried again like a write when it comes back short."""
        def call():
            data = self.fs.cat_file(self._path(name), start=0, end=size)
            return data, (None if len(data) == size else
                          f"{len(data)} bytes came back, the listing said {size}")
        return self._retrying(f"reading the {self.what} object", self.url_of(name), call)

    def mismatch(self, name: str, size: int, sha256: str) -> str | None:
        """Why the object `name` is not `size` bytes hashing to `sha256`; None if it is. Read
        back in ranged GETs of BLOCK bytes, never past `size`."""
        path = self._path(name)
        held = int(self.fs.size(path))
        if held != size:
            return f"the store holds {held} bytes, {size} were sent"
        digest = hashlib.sha256()
        for start in range(0, size, BLOCK):
            digest.update(self.fs.cat_file(path, start=start, end=min(size, start + BLOCK)))
        if digest.hexdigest() != sha256:
            return (f"read back, its bytes hash to sha256 {digest.hexdigest()}, not to the "
                    f"{sha256} of the bytes sent")
        return None


def fetch_checked(url: str, dst: Path, size: int, sha256: str,
                  remote: RemoteOptions | None = None) -> None:
    """Download an object to `dst` atomically (a temporary name, then rename), refused unless
    it has `size` bytes hashing to `sha256`."""
    tmp = dst.with_name(f".{dst.name}.tmp")
    reader = ObjectReader(url, size, remote, "part shard")
    try:
        with open(tmp, "wb") as f:
            while chunk := reader.read(8 << 20):
                f.write(chunk)
            reader.finish(sha256, size)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, dst)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        reader.close()
