"""What a cached shard must still be when it is used again, and the cache disk's own errors.

A shard enters the cache only from a download whose size and whole sha256 matched the
manifest (shardcache.py). At that moment a *fill record* is written into the file's extended
attribute `user.carla_wds.fill`: its size and the sha256 of a sample of its bytes (the first
and last 64 KiB and 14 blocks of 64 KiB evenly between; the whole file when it is 1 MiB or
less). Every later use re-reads that sample (1 MiB at most) and compares, so:

- a change of size, a shard of up to 1 MiB changed anywhere, and a larger one changed in a
  sampled block, are found at open: the copy is dropped, fetched again, logged and counted
  (`stats["dropped"]`), never served;
- a change of a larger shard outside the sample is found only with `verify=True`, which
  hashes the whole copy against the manifest's sha256 at each open (and then drops and
  re-fetches it in the same way).

The shard's mtime is not part of the record: the cache uses it as its recency clock and sets
it at every use. Where the filesystem keeps no user xattrs (or a copy was cached without a
record), a use hashes the whole copy against the manifest's sha256 instead, then records it;
without a sha256 in the manifest such a copy is checked by its size only.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
import shutil

log = logging.getLogger(__name__)
XATTR = "user.carla_wds.fill"
BLOCK, BLOCKS = 64 << 10, 16
stats = {"dropped": 0}   # cached copies of this process found changed, dropped, re-fetched
_no_xattr: set[str] = set()   # cache folders whose filesystem refused a record (warned once)
_DISK_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


def sample_digest(fd: int, size: int) -> str:
    """sha256 of the sampled blocks of the open file `fd` of `size` bytes, read with pread."""
    digest = hashlib.sha256(b"%d" % size)
    if size <= BLOCK * BLOCKS:
        offsets = range(0, size, BLOCK)
    else:
        last = size - BLOCK
        offsets = sorted({last * i // (BLOCKS - 1) for i in range(BLOCKS)})
    for off in offsets:
        digest.update(os.pread(fd, BLOCK, off))
    return digest.hexdigest()


def whole_digest(fd: int) -> str:
    digest, off = hashlib.sha256(), 0
    while chunk := os.pread(fd, 1 << 20, off):
        digest.update(chunk)
        off += len(chunk)
    return digest.hexdigest()


def record(fd: int, size: int, folder: str) -> None:
    """Write the fill record of a checked shard (open for writing, before it is published)."""
    try:
        os.setxattr(fd, XATTR, f"v1 {size} {sample_digest(fd, size)}".encode())
    except OSError as exc:   # ENOTSUP (tmpfs before Linux 6.6, NFS), EPERM, a full xattr block
        if folder not in _no_xattr:
            _no_xattr.add(folder)
            log.warning("cache %s: cannot record a cached shard's check (%s); each reuse "
                        "hashes the whole shard instead (slower, as safe)", folder, exc)


def holds(fd: int, size: int, sha256: str | None, full: bool) -> bool:
    """Whether the cached copy open as `fd` still is the shard that was checked when it was
    cached: the whole sha256 with `full`, else its fill record (module docstring)."""
    if full and sha256 is not None:
        return whole_digest(fd) == sha256
    try:
        kept = os.getxattr(fd, XATTR).decode("ascii", "replace").split()
    except OSError:   # no record: an older cache, or a filesystem without xattrs
        if sha256 is None:
            return True   # nothing to compare with: its size matched, as before
        if whole_digest(fd) != sha256:
            return False
        with contextlib.suppress(OSError):
            os.setxattr(fd, XATTR, f"v1 {size} {sample_digest(fd, size)}".encode())
        return True
    return kept == ["v1", str(size), sample_digest(fd, size)]


class DiskFullError(OSError):
    """A cache or spool folder that ran out of room (or quota, or file-size limit): the
    machine's problem, never the shard's, so no on_error="skip" counts it as a bad shard."""


def disk_full(exc: BaseException, folder: str, fix: str) -> DiskFullError | None:
    """A one-line DiskFullError naming `folder`, its free bytes and `fix`, when `exc` is
    ENOSPC, EDQUOT or EFBIG (RLIMIT_FSIZE: a limit on this disk's use too); else None."""
    if not isinstance(exc, OSError) or exc.errno not in _DISK_FULL:
        return None
    try:
        free = f"{shutil.disk_usage(folder).free:,} bytes free"
    except OSError:
        free = "free space unknown"
    err = DiskFullError(f"{folder}: no room to write a shard ({os.strerror(exc.errno)}; "
                        f"{free}). Fix: {fix}")
    err.errno = exc.errno
    return err
