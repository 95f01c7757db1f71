"""A node-local cache of remote shards (http(s)://, s3:// and other fsspec URLs): filled only
from checked downloads, bounded by `cache_limit_bytes`, and shared by every worker and rank of
a node.

Everything is coordinated with flock(2) locks, which the kernel drops when a process dies, so
a killed process never leaves a lock held:

- the entry lock, `<entry>.lock`, exclusive while one process fills an entry: exactly one
  downloads a shard, the others wait on it and then read the copy it made. The file exists
  only while held (the holder unlinks it before it lets go; a waiter that wakes on an unlinked
  file tries again), so lock files do not pile up;
- a lease, a shared lock on the cached shard itself, held by a reader from open to close:
  eviction passes over a shard in use. A filler takes it before the rename that publishes the
  shard, so no eviction can come between;
- the cache lock, an exclusive lock on the cache folder, serialises the bookkeeping: sweep the
  leftovers of killed fillers, evict least recently used shards not in use until the new one
  fits, then create its temporary file, whose declared size (in its name) counts from then on;
  and the renames that publish shards. So the shards and the temporary files together never
  exceed the limit, and `usage()` sees them at one instant.

A temporary file is `<entry>.<declared bytes>.<random>.temp`, written only while its filler
holds the entry lock: a temporary file whose entry lock is free is a dead filler's, and the
sweep removes it. Recency is the shard's mtime, set to the clock at each use. A shard larger
than the limit is an error (raise the limit); a shard that fits, but not beside the shards in
use, is read uncached, with a warning. The locks are flock(2) on one node's filesystem: share
a cache between the processes of one node, not over NFS. Every process sharing a cache should
give it the same limit.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import re
import secrets
import time
from dataclasses import dataclass, field
from typing import BinaryIO, Iterator

from . import cachecheck, limits
from .cachecheck import DiskFullError
from .cachelocks import Lease, _evict, _lease, _lock_entry, _remove, _same_file, _unlock_entry
from .objstore import ObjectReader
from .remote import CheckedStream, HTTPReader, RemoteOptions, is_http
from .tario import ShardError

log = logging.getLogger(__name__)
TEMP, LOCK = ".temp", ".lock"
_ENTRY = re.compile(r"[0-9a-f]{12}-.+")
CHUNK = 8 << 20   # bytes a download reads before it writes them to its temporary file
_warned: set[str] = set()   # cache folders whose "full" warning this process gave already
FIX_FULL = ("free space there, lower cache_limit_bytes below its free space, or move "
            "cache_dir to a disk with room")


def cache_name(url: str, sha256: str | None = None) -> str:
    """The entry of a shard: keyed by its URL (webdataset's default keeps only the basename,
    so two servers' shard-000000.tar would collide) and the manifest's sha256 of it, since a
    hit checks only the size: a shard re-packed under the same URL, with the same size and
    other bytes, is a new entry, never the stale copy."""
    key = url if sha256 is None else f"{url}\n{sha256}"
    return f"{hashlib.sha1(key.encode()).hexdigest()[:12]}-{os.path.basename(url)}"


def check_limit(limit: int | None) -> int | None:
    """`cache_limit_bytes` as given, or a ValueError that lists the valid values."""
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
        raise ValueError(f"cache_limit_bytes {limit!r}: expected a whole number of bytes > 0 "
                         "(e.g. 50 * 2**30 for 50 GiB), or None for an unbounded cache")
    return limit


def check_declared(url: str, size: int) -> None:
    """A remote shard may declare at most `remote_shard_bytes` (limits.py): a manifest is data
    from elsewhere, and its `bytes` bound every read, temporary file and cached copy."""
    bound = limits.active().remote_shard_bytes
    if size > bound:
        raise ShardError(str(limits.LimitError(f"shard {url}: the size its manifest declares",
                                               size, "remote_shard_bytes", bound)))


def remote_reader(url: str, size: int, remote: RemoteOptions | None) -> CheckedStream:
    """The bounded, hashed stream of a remote shard: HTTP, or an object store through fsspec;
    refused before any request when it declares more than `remote_shard_bytes`."""
    check_declared(url, size)
    if is_http(url):
        return HTTPReader(url, size, remote)
    return ObjectReader(url, size, remote)


def _write(url: str, tmp: str, size: int, sha256: str | None,
           remote: RemoteOptions | None) -> None:
    """The shard at url into the file tmp, checked against the manifest's size and sha256;
    tmp is removed if it does not match or the download fails. A full disk (or quota, or
    file-size limit) is a DiskFullError naming the folder, never the shard's fault."""
    reader = None
    try:
        with open(tmp, "w+b") as f:   # read too: the fill record samples what was written
            reader = remote_reader(url, size, remote)
            while chunk := reader.read(CHUNK):   # at most `size` bytes: the reader's cut
                f.write(chunk)
            reader.finish(sha256)
            # durable before the rename publishes it: a power loss must not leave a shard of
            # the right size and wrong bytes behind
            f.flush()
            os.fsync(f.fileno())
            cachecheck.record(f.fileno(), size, os.path.dirname(tmp))
    except BaseException as exc:
        _remove(tmp)
        full = cachecheck.disk_full(exc, os.path.dirname(tmp) or ".", FIX_FULL)
        if full is not None:
            raise full from None
        raise
    finally:
        if reader is not None:
            reader.close()


def download(url: str, dest: str, size: int, sha256: str | None,
             remote: RemoteOptions | None) -> None:
    """url -> dest, which appears (by rename) only once its size and sha256 match the
    manifest; a failed download leaves no temporary file behind."""
    tmp = f"{dest}.{size}.{secrets.token_hex(4)}{TEMP}"
    _write(url, tmp, size, sha256, remote)
    os.replace(tmp, dest)


@dataclass
class Cached:
    """A cached shard held in use: read `file`; close() gives the lease back."""
    path: str
    file: BinaryIO
    lease: Lease
    fresh: bool   # downloaded (and so hashed) just now, by this process

    def close(self) -> None:
        self.file.close()
        self.lease.close()


@dataclass
class _Listing:
    shards: list[tuple[int, str, int]] = field(default_factory=list)   # (mtime_ns, path, bytes)
    temps: list[tuple[str, str, int]] = field(default_factory=list)    # (path, entry, declared)
    locks: list[str] = field(default_factory=list)


class ShardCache:
    """Cached copies of remote shards in `cache_dir`, at most `limit_bytes` (None: no bound)."""

    def __init__(self, cache_dir: str, limit_bytes: int | None = None) -> None:
        self.dir, self.limit = cache_dir, check_limit(limit_bytes)

    def path_of(self, url: str, sha256: str | None = None) -> str:
        return os.path.join(self.dir, cache_name(url, sha256))

    def open(self, url: str, size: int, sha256: str | None, remote: RemoteOptions | None,
             full: bool = False) -> Cached | None:
        """The cached copy of `url`, held in use until closed; filled first if missing (by
        one process: the others wait, then read its copy). A copy found is used only if it
        still passes its check (cachecheck.py; the whole sha256 with `full`): else it is
        dropped and filled again. None: the shard fits the limit, but not beside the shards
        now in use, or the cache's disk is full (warned); read it uncached."""
        check_declared(url, size)
        if self.limit is not None and size > self.limit:
            raise ShardError(f"shard {url}: {size} bytes, more than the cache's limit of "
                             f"{self.limit} bytes (cache_limit_bytes, cache {self.dir}). Fix: "
                             f"raise cache_limit_bytes to at least a few times {size}, or "
                             "re-pack with smaller shards (carla-wds pack --max-bytes)")
        os.makedirs(self.dir, exist_ok=True)
        dest = self.path_of(url, sha256)
        check = (size, sha256, full)
        found = self._hit(dest, check, drop=False)
        if found is not None:
            return found
        lock_path = dest + LOCK
        lock = _lock_entry(lock_path)
        try:   # under the entry lock no filler replaces dest: a failed copy may be dropped
            return self._hit(dest, check, drop=True) or self._fill(url, dest, size, sha256,
                                                                   remote)
        finally:
            _unlock_entry(lock, lock_path)

    def _hit(self, dest: str, check: tuple[int, str | None, bool], drop: bool
             ) -> Cached | None:
        size, sha256, full = check
        try:
            lease = _lease(dest)
        except FileNotFoundError:
            return None
        try:
            file = open(dest, "rb")
        except FileNotFoundError:
            lease.close()
            return None
        held = Cached(dest, file, lease, False)
        if os.fstat(file.fileno()).st_size != size or not _same_file(lease.fd, dest) or \
                not _same_file(file.fileno(), dest):
            held.close()   # another size (an older manifest), or replaced: fill it anew
            return None
        if not cachecheck.holds(file.fileno(), size, sha256, full):
            held.close()
            if drop:
                cachecheck.stats["dropped"] += 1
                log.warning("cache %s: the cached copy %s is not the shard that was checked "
                            "when it was cached (changed in place); dropped, fetching it "
                            "again", self.dir, dest)
                _remove(dest)
            return None
        self._touch(dest)
        return held

    @staticmethod
    def _touch(path: str) -> None:
        now = time.time_ns()   # the clock itself, finer than the filesystem's coarse stamp
        try:
            os.utime(path, ns=(now, now))
        except PermissionError:   # another user's shard: its recency is theirs to keep
            log.debug("%s: cannot set its mtime", path)

    def _fill(self, url: str, dest: str, size: int, sha256: str | None,
              remote: RemoteOptions | None) -> Cached | None:
        """Under the entry lock: reserve room, download, publish, hold."""
        tmp = self._reserve(os.path.basename(dest), size)
        if tmp is None:
            return None
        try:
            _write(url, tmp, size, sha256, remote)
        except DiskFullError as exc:   # the machine's disk, not the shard: read it uncached
            log.warning("cache %s; reading shard %s uncached", exc, url)
            return None
        lease = None
        try:
            lease = _lease(tmp)   # in use from before it is published: no eviction between
            with self._cache_lock():   # so that a look under the lock sees it once, not twice
                os.replace(tmp, dest)
        except BaseException:
            if lease is not None:
                lease.close()
            _remove(tmp)
            raise
        log.debug("cached %s (%d bytes) as %s", url, size, dest)
        self._touch(dest)
        return Cached(dest, open(dest, "rb"), lease, True)

    def _reserve(self, entry: str, size: int) -> str | None:
        """A new, empty temporary file for `entry` that counts `size` bytes, once the cache's
        leftovers are swept and, under a limit, enough shards not in use are evicted; None
        when the shards in use leave no room."""
        tmp = os.path.join(self.dir, f"{entry}.{size}.{secrets.token_hex(4)}{TEMP}")
        with self._cache_lock():
            listing = self._sweep(self._list(), entry)
            if self.limit is not None and not self._make_room(listing, size):
                return None
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        return tmp

    def usage(self) -> dict[str, int]:
        """name -> bytes of every file in the cache folder at one instant: under the cache
        lock, when no shard is published or evicted."""
        if not os.path.isdir(self.dir):
            return {}
        found = {}
        with self._cache_lock(), os.scandir(self.dir) as entries:
            for e in entries:
                with contextlib.suppress(FileNotFoundError):   # a lock file let go meanwhile
                    found[e.name] = e.stat(follow_symlinks=False).st_size
        return found

    @contextlib.contextmanager
    def _cache_lock(self) -> Iterator[None]:
        fd = os.open(self.dir, os.O_RDONLY)   # the folder itself: no lock file to leave behind
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _list(self) -> _Listing:
        listing = _Listing()
        with os.scandir(self.dir) as entries:
            for e in entries:
                if not e.is_file(follow_symlinks=False):
                    continue
                if e.name.endswith(TEMP):
                    entry, declared, _, _ = (e.name.rsplit(".", 3) + ["", "", ""])[:4]
                    nbytes = int(declared) if declared.isdigit() else e.stat().st_size
                    listing.temps.append((e.path, entry, nbytes))
                elif e.name.endswith(LOCK):
                    listing.locks.append(e.path)
                elif _ENTRY.fullmatch(e.name):   # anything else in the folder is not ours
                    st = e.stat(follow_symlinks=False)
                    listing.shards.append((st.st_mtime_ns, e.path, st.st_size))
        return listing

    def _sweep(self, listing: _Listing, mine: str) -> _Listing:
        """Remove the temporary and lock files of fillers that died (their entry lock is
        free); the others stay, and their temporary files count at their declared size."""
        live = []
        for entry in sorted({e for _, e, _ in listing.temps} | {
                os.path.basename(p)[:-len(LOCK)] for p in listing.locks}):
            lock_path = os.path.join(self.dir, entry + LOCK)
            # `mine`: this process holds its lock and has no temporary file yet
            fd = -1 if entry == mine else _lock_entry(lock_path, wait=False)
            temps = [t for t in listing.temps if t[1] == entry]
            if fd is None:   # being filled: its temporary files count
                live += temps
                continue
            for path, _, _ in temps:
                log.info("removing %s, left by a filler that died", path)
                _remove(path)
            if fd != -1:
                _unlock_entry(fd, lock_path)
        listing.temps = live
        return listing

    def _make_room(self, listing: _Listing, size: int) -> bool:
        """Evict least recently used shards not in use until `size` more bytes fit."""
        used = sum(n for _, _, n in listing.shards) + sum(n for _, _, n in listing.temps)
        for _, path, nbytes in sorted(listing.shards):
            if used + size <= self.limit:
                break
            if _evict(path):
                log.debug("evicted %s (%d bytes) from the cache", path, nbytes)
                used -= nbytes
        if used + size <= self.limit:
            return True
        if self.dir not in _warned:
            _warned.add(self.dir)
            log.warning("cache %s: %d of its %d bytes (cache_limit_bytes) are shards in use "
                        "or being downloaded; reading a shard of %d bytes uncached (warned "
                        "once per process). Fix: raise cache_limit_bytes "
                        "to hold a shard per reading worker and rank, and one more", self.dir,
                        used, self.limit, size)
        return False
