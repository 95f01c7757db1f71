"""Opening shards: local files memory-mapped, http(s):// streams bounded and hashed, cached
copies made only from checked downloads, and the caller's own pipe: commands.

Both the loader and `verify`/`inspect` read shards through here, so the name rule's output,
the byte bounds and the checks are one code path. It imports neither torch nor webdataset,
so the packing wing stays torch-free.
"""
from __future__ import annotations

import hashlib
import io
import logging
import mmap
import os
import subprocess
import tempfile
from dataclasses import dataclass
from typing import Any, Iterator

from .cachecheck import disk_full
from .objstore import is_objstore
from .remote import CheckedStream, RemoteOptions, is_http
from .shardcache import Lease, ShardCache, remote_reader
from .shardcache import download  # noqa: F401  (where it was before shardcache.py)
from .tario import ShardError, group_samples, iterate_tar

log = logging.getLogger(__name__)
Raw = dict[str, Any]


class MappedShard:
    """A local shard read through read-only memory maps of 64 MB windows: large members come
    out as memoryviews of the page cache, small reads (headers, labels) as bytes.

    A shuffle buffer of encoded samples then holds no copy of the images. Copies were fresh
    memory for every sample, and on this project's VMs first-touched memory can cost 16 us a
    page (a PNG shuffle buffer of 256 samples: up to 0.7 s per worker and epoch,
    docs/benchmarks.md). A window is unmapped when the last view into it is gone, and
    `release_pages` unmaps a decoded sample's pages before that. Like any mmap reader, a shard
    truncated in place while it is being read kills the process (SIGBUS); carla-wds and
    webdataset's cache replace files by rename, which is safe.
    """
    WINDOW = 64 << 20
    SMALL = 4096   # reads up to this size are copied: cheaper than a view, and parsed as bytes

    def __init__(self, path: str, file: io.BufferedReader | None = None,
                 lease: Lease | None = None) -> None:
        # lease: a cached shard's in-use lock (shardcache.py), given back at close
        self.path, self._file, self._lease = path, file or open(path, "rb"), lease
        self.size = os.fstat(self._file.fileno()).st_size
        self.pos, self._view, self._start, self._can_map = 0, memoryview(b""), 0, True

    def _slice(self, n: int) -> memoryview:
        off, end = self.pos, min(self.pos + n, self.size)
        if off < self._start or end > self._start + len(self._view):
            start = off - off % mmap.ALLOCATIONGRANULARITY
            length = min(max(self.WINDOW, end - start), self.size - start)
            window = mmap.mmap(self._file.fileno(), length, access=mmap.ACCESS_READ,
                               offset=start)
            self._view, self._start = memoryview(window), start
        return self._view[off - self._start:end - self._start]

    def read(self, n: int = -1) -> bytes | memoryview:
        n = self.size - self.pos if n < 0 else min(n, self.size - self.pos)
        if n <= 0:
            return b""
        if n <= self.SMALL or not self._can_map:
            # pread, not the mapping: a fault would map the page cache's whole folio (up to
            # 2 MB here) into this process, neighbouring images included
            data = self._pread(n)
        else:
            try:
                data = self._slice(n)
            except OSError as exc:   # a filesystem that cannot map, or no descriptors left
                log.warning("%s: cannot memory-map it (%s); reading it with copies", self.path,
                            exc)
                self._can_map = False
                data = self._pread(n)
        self.pos += n
        return data

    def _pread(self, n: int) -> bytes:
        # a regular file reads short only where it ends (shrunk since it was opened), which
        # tar_members reports as a truncated shard
        return os.pread(self._file.fileno(), n, self.pos)

    def sha256(self) -> str:
        """The hash of the open file itself (not of whatever the path names by now), read in
        1 MB copies so that none of it stays mapped."""
        digest, off = hashlib.sha256(), 0
        while chunk := os.pread(self._file.fileno(), 1 << 20, off):
            digest.update(chunk)
            off += len(chunk)
        return digest.hexdigest()

    def peek(self, n: int = 1) -> bytes:
        return os.pread(self._file.fileno(), max(0, min(n, self.size - self.pos)), self.pos)

    def close(self) -> None:
        self._view = memoryview(b"")   # the window itself goes with the last view into it
        self._file.close()
        if self._lease is not None:
            self._lease.close()


def _local_path(url: str) -> str | None:
    if url.startswith("file://"):
        return url[len("file://"):]
    return url if "://" not in url and not url.startswith("pipe:") and url != "-" else None


class _Bounded(CheckedStream):
    """A caller's stream (a pipe: command) read to at most `limit` bytes, hashed."""

    def __init__(self, stream: io.BufferedIOBase, limit: int, url: str) -> None:
        super().__init__(limit)
        self.stream, self.url, self.declared = stream, url, limit

    def _more(self, n: int) -> bytes:
        return self.stream.read(n)

    def _fail(self, cause: str, fix: str) -> ShardError:
        return ShardError(f"shard {self.url}: {cause}. Fix: {fix}")

    def finish(self, sha256: str | None, size: int | None = None) -> None:
        super().finish(sha256, self.declared)

    def close(self) -> None:
        self.stream.close()


def is_remote(url: str) -> bool:
    """A shard read over the network (http(s):// or an object store), which a cache can hold."""
    return is_http(url) or is_objstore(url)


def _check_sha256(found: str, expected: str, url: str) -> None:
    if found != expected:
        raise ShardError(f"shard {url}: sha256 {found} differs from the manifest's {expected}; "
                         "the file is corrupt or was changed. Fix: re-download or re-pack it")


def _spooled(url: str, size: int, sha256: str | None, remote: RemoteOptions | None
             ) -> MappedShard:
    """A remote shard checked whole before any sample is used, without holding it in memory:
    an unnamed temporary file (gone when closed) of at most the declared size. A full disk
    there is a DiskFullError naming the folder, not the shard's fault."""
    f = tempfile.TemporaryFile()
    reader = remote_reader(url, size, remote)
    try:
        while chunk := reader.read(8 << 20):
            f.write(chunk)
        reader.finish(sha256)
    except BaseException as exc:
        f.close()
        full = disk_full(exc, tempfile.gettempdir(), "set TMPDIR to a folder with room for a "
                         "shard, or read with cache_dir (a cache checks shards as it fills)")
        if full is not None:
            raise full from None
        raise
    finally:
        reader.close()
    f.seek(0)
    return MappedShard(url, f)


Stream = Any   # MappedShard, HTTPReader or _Bounded: read(n), close(), and finish() on streams


def open_shard(url: str, cache_dir: str | None, sha256: str | None, size: int | None = None,
               verify: bool = False, remote: RemoteOptions | None = None, *,
               cache_limit_bytes: int | None = None) -> Stream:
    """A readable stream of a shard at `url` of `size` declared bytes (None: not declared).

    Local files and cached copies are memory-mapped; with `verify`, the very file that is
    mapped is hashed first, a cached copy is hashed whole (dropped and fetched again if it
    fails), and a remote shard without a cache is checked whole (in a temporary file) before
    it is read; without `verify` a cached copy passes the cheaper check of cachecheck.py. A
    remote stream is cut at `size` and hashed as it is read, and `finish` checks it. A
    cached copy is made only from a checked download, in a cache of at most
    `cache_limit_bytes` (None: unbounded) shared by the node's processes (shardcache.py);
    the shard stays in use there, safe from eviction, until it is closed. A remote shard
    declared over `remote_shard_bytes` (limits.py) is refused before it is asked for.
    """
    path = _local_path(url)
    if path is None and cache_dir is not None and is_remote(url) and size is not None:
        held = ShardCache(cache_dir, cache_limit_bytes).open(url, size, sha256, remote,
                                                             full=verify)
        if held is not None:   # None: no room in the cache now; read it uncached
            # checked by the cache (with `verify`: hashed whole)
            return _checked(MappedShard(held.path, held.file, held.lease), url, size, sha256,
                            False)
    if path is not None:
        return _checked(MappedShard(path), url, size, sha256, verify)
    if is_remote(url) and size is not None:
        if verify:
            return _spooled(url, size, sha256, remote)
        return remote_reader(url, size, remote)
    if not url.startswith("pipe:"):
        raise ShardError(f"shard {url}: carla-wds reads local paths, file://, http(s)://, "
                         "s3:// (fsspec URLs) and pipe: commands. Fix: pass one of those in "
                         "shard_urls")
    stream = PipeStream(url[len("pipe:"):])
    return stream if size is None else _Bounded(stream, size, url)


def _checked(shard: MappedShard, url: str, size: int | None, sha256: str | None, verify: bool
             ) -> MappedShard:
    """The mapped shard once its size (and, with `verify`, its sha256) match the manifest;
    closed on a mismatch."""
    try:
        if size is not None and shard.size != size:
            raise ShardError(f"shard {url}: {shard.size} bytes, the manifest declares "
                             f"{size}; it is truncated or was changed. Fix: re-download "
                             "or re-pack it")
        if verify and sha256 is not None:
            _check_sha256(shard.sha256(), sha256, url)
    except ShardError:
        shard.close()
        raise
    return shard


class PipeStream(io.RawIOBase):
    """The stdout of a shell command the caller chose (a `pipe:` source or shard URL; never
    one from a file's contents, see manifest.NAME_RULE). Closing it checks the exit status."""

    def __init__(self, command: str) -> None:
        self.command = command
        self._proc = subprocess.Popen(command, shell=True, stdout=subprocess.PIPE)

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        return self._proc.stdout.readinto(buf)

    def close(self) -> None:
        if self.closed:
            return
        self._proc.stdout.close()
        status = self._proc.wait()
        super().close()
        if status not in (0, -13, 141):   # a reader that stops early gets SIGPIPE: fine
            raise ShardError(f"pipe:{self.command} exited with status {status}")


@dataclass(frozen=True)
class ShardRef:
    """Where one shard is and what the manifest promises about it."""
    url: str
    samples: int
    bytes: int | None = None
    sha256: str | None = None


def samples_of(stream: Stream, ref: ShardRef, others: list[str] | None = None
               ) -> Iterator[Raw]:
    """Every sample (dict of member bytes) of an open shard, in order; at the end, streams
    are checked against the declared size and sha256."""
    members = ({**m, "__url__": ref.url}
               for m in iterate_tar(stream, ref.url, ref.bytes, others))
    yield from group_samples(members)
    if hasattr(stream, "finish"):
        stream.finish(ref.sha256)
