"""The flock(2) primitives of the shard cache (shardcache.py's docstring says how they are
used): leases on cached shards, entry locks that exist only while held, and eviction that
passes over a shard in use. The kernel drops a flock when its process dies."""
from __future__ import annotations

import contextlib
import fcntl
import os


class Lease:
    """A shared lock on a cached shard, held from open to close: eviction passes it by."""

    def __init__(self, fd: int) -> None:
        self.fd: int | None = fd

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _lease(path: str) -> Lease:
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)   # waits only while an eviction unlinks it
    except BaseException:
        os.close(fd)
        raise
    return Lease(fd)


def _same_file(fd: int, path: str) -> bool:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (st.st_ino, st.st_dev) == (held.st_ino, held.st_dev)


def _lock_entry(path: str, wait: bool = True) -> int | None:
    """An fd holding the exclusive lock file `path`; None if another holds it and not `wait`."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        if _same_file(fd, path):
            return fd
        os.close(fd)   # its holder unlinked it while this process waited: take the new one


def _unlock_entry(fd: int, path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)   # while held: no other process holds this file, so it is ours
    os.close(fd)


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)


def _evict(path: str) -> bool:
    """Remove a cached shard unless a reader holds it; whether it is gone."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return True
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False   # in use
        if not _same_file(fd, path):
            return False   # replaced by a new fill meanwhile: left to the next sweep
        os.unlink(path)
        return True
    finally:
        os.close(fd)
