"""Reading shards: opening local, http(s):// and pipe: URLs (optionally cached and checked),
and the first pipeline stage, which cuts planned segments out of them."""
from __future__ import annotations

import hashlib
import io
import logging
import mmap
import os
import re
from typing import Any, Iterable, Iterator

import numpy as np
import webdataset as wds
from webdataset.tariterators import group_by_keys, tar_file_iterator

log = logging.getLogger(__name__)
Raw = dict[str, Any]


class ShardError(RuntimeError):
    """A shard that cannot be read as the manifest describes; names the shard and sample."""


def error_marker(msg: str) -> Raw:
    """Stands for one sample that could not be used (on_error="skip"); becomes valid=False."""
    return {"__error__": msg}


def _cache_name(url: str) -> str:
    # webdataset's default keeps only the basename: two servers' shard-000000.tar would collide.
    return f"{hashlib.sha1(url.encode()).hexdigest()[:12]}-{os.path.basename(url)}"


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

    def __init__(self, path: str) -> None:
        self.path, self._file = path, open(path, "rb")
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


_PAGE = mmap.PAGESIZE


def release_pages(raw: Raw) -> None:
    """Unmap the pages of a decoded sample's memory-mapped members (MappedShard).

    A window stays mapped while any sample read from it waits in the shuffle buffer, and the
    pages decoding touched would count in the worker's RSS until then (about four times the
    buffer's bytes). MADV_DONTNEED drops them from this process only: the page cache and the
    file keep the data, and a view used again faults it back in unchanged.
    """
    if not hasattr(mmap, "MADV_DONTNEED"):   # Windows: no madvise
        return
    for value in raw.values():
        if isinstance(value, memoryview) and isinstance(value.obj, mmap.mmap):
            window = value.obj
            offset = (np.frombuffer(value, np.uint8).ctypes.data
                      - np.frombuffer(window, np.uint8).ctypes.data)
            start = -(-offset // _PAGE) * _PAGE
            end = (offset + value.nbytes) // _PAGE * _PAGE
            if end > start:
                window.madvise(mmap.MADV_DONTNEED, start, end - start)


def _is_local(url: str) -> bool:
    return "://" not in url and not url.startswith("pipe:") and url != "-"


def _check_sha256(found: str, expected: str, url: str, cached: str | None) -> None:
    if found != expected:
        if cached:
            os.remove(cached)   # so the next attempt downloads it again
        raise ShardError(f"shard {url}: sha256 {found} differs from the manifest's {expected}; "
                         "the file is corrupt or was changed. Fix: re-download or re-pack it")


def open_shard(url: str, cache_dir: str | None,
               sha256: str | None) -> io.BufferedIOBase | MappedShard:
    """A readable stream for a shard: local path, http(s)://, or pipe:, optionally cached.
    Local files (and cached copies) are memory-mapped; with sha256, the very file that is
    mapped is hashed first."""
    path = url if _is_local(url) else None
    cached = None
    if cache_dir is not None and path is None and "://" in url:
        from webdataset.cache import FileCache
        os.makedirs(cache_dir, exist_ok=True)
        path = FileCache(cache_dir, url_to_name=_cache_name).get_file(url)
        # only a copy in the cache may be deleted on a mismatch: for file:// URLs the cache
        # hands back the user's own file
        inside = os.path.commonpath([os.path.abspath(path), os.path.abspath(cache_dir)])
        cached = path if inside == os.path.abspath(cache_dir) else None
    if path is not None:
        shard = MappedShard(path)
        if sha256 is not None:
            try:
                _check_sha256(shard.sha256(), sha256, url, cached)
            except ShardError:
                shard.close()
                raise
        return shard
    stream = wds.gopen(url, "rb")
    if sha256 is None:
        return stream
    data = stream.read()
    stream.close()
    _check_sha256(hashlib.sha256(data).hexdigest(), sha256, url, None)
    return io.BytesIO(data)


_BLOCK = 512
_META = re.compile(r"__[^/]*__($|/)")   # webdataset's skip_meta


def _read_exact(stream: io.BufferedIOBase, n: int) -> bytes:
    """n bytes, looping over short reads (pipes, HTTP); fewer only at the end of the stream."""
    data = stream.read(n)
    if len(data) == n or not data:
        return data
    parts = [data]
    while n - sum(map(len, parts)) > 0 and (more := stream.read(n - sum(map(len, parts)))):
        parts.append(more)
    return b"".join(parts)


def _tar_number(field: bytes) -> int:
    if field[:1] in (b"\x80", b"\xff"):   # GNU base-256, for sizes of 8 GiB and more
        return int.from_bytes(field[1:], "big", signed=field[:1] == b"\xff")
    return int(field.rstrip(b"\0 ").lstrip(b" ") or b"0", 8)


def tar_members(stream: io.BufferedIOBase, where: str) -> Iterator[dict[str, Any]]:
    """{"fname", "data"} of each regular member of an uncompressed tar stream, in order
    (data: bytes, or a memoryview for the large members of a MappedShard).

    Reads ustar, GNU long names and PAX `path` records (what carla-wds, webdataset's TarWriter
    and GNU tar write), with one read per header and per member: tarfile's stream mode copies
    its 10 KB buffer for every slice, a fifth of the loader's time (docs/benchmarks.md).
    """
    long_name = None
    while (header := _read_exact(stream, _BLOCK)) and header.count(0) < _BLOCK:
        if len(header) < _BLOCK:
            raise ShardError(f"{where}: a tar header is cut short (truncated shard)")
        stored = _tar_number(header[148:156])
        if stored != sum(header[:148]) + 256 + sum(header[156:]):
            raise ShardError(f"{where}: a tar header fails its checksum; the shard is corrupt")
        size, kind = _tar_number(header[124:136]), header[156:157]
        data = _read_exact(stream, size)
        if len(data) < size or len(_read_exact(stream, -size % _BLOCK)) < -size % _BLOCK:
            raise ShardError(f"{where}: a tar member is cut short (truncated shard)")
        if kind == b"x":    # PAX: "<len> key=value\n" records; only path matters here
            for record in bytes(data).decode("utf-8").splitlines():
                if " path=" in record:
                    long_name = record.split(" path=", 1)[1]
            continue
        if kind == b"L":
            long_name = bytes(data).rstrip(b"\0").decode("utf-8")
            continue
        name = long_name
        long_name = None
        if kind not in (b"0", b"\0", b"7"):   # directories, links, global headers
            continue
        if name is None:
            name = header[:100].split(b"\0", 1)[0].decode("utf-8")
            prefix = header[345:500].split(b"\0", 1)[0] if header[257:262] == b"ustar" else b""
            if prefix:
                name = prefix.decode("utf-8") + "/" + name
        if not _META.match(name):
            yield {"fname": name, "data": data}


def iterate_tar(stream: io.BufferedIOBase, where: str) -> Iterator[dict[str, Any]]:
    """tar_members for plain tars (carla-wds shards); webdataset's reader for anything else,
    such as a compressed tar."""
    first = b""
    if hasattr(stream, "peek"):
        first = stream.peek(_BLOCK)[:_BLOCK]
    elif getattr(stream, "seekable", lambda: False)():
        first = stream.read(_BLOCK)
        stream.seek(-len(first), io.SEEK_CUR)
    if len(first) == _BLOCK and first[257:262] == b"ustar":
        return tar_members(stream, where)
    return tar_file_iterator(stream)


# stage: segments [(shard, start, stop)] -> raw samples (dicts of member bytes), or error markers
def read_segments(segments: Iterable[tuple[int, int, int]], urls: list[str],
                  on_error: str = "raise", cache_dir: str | None = None,
                  checksums: list[str] | None = None) -> Iterator[Raw]:
    for shard, start, stop in segments:
        url, last_key, seen, given = urls[shard], None, 0, 0
        try:
            stream = open_shard(url, cache_dir, checksums[shard] if checksums else None)
            try:
                members = ({**m, "__url__": url} for m in iterate_tar(stream, url))
                for sample in group_by_keys(members):
                    if seen >= stop:
                        break
                    seen += 1
                    last_key = sample["__key__"]
                    if seen > start:
                        sample["__shard__"] = url
                        given += 1
                        yield sample
                if seen < stop:
                    raise ShardError(f"ended after {seen} samples, the manifest promises at "
                                     f"least {stop}")
            finally:
                stream.close()
        except Exception as exc:  # noqa: BLE001 - tarfile and gopen raise many types
            msg = (f"shard {url}: cannot read past sample {last_key!r} ({exc}). Fix: verify the "
                   "shards with `carla-wds verify` and re-pack or re-download this shard")
            if on_error == "raise":
                raise ShardError(msg) from None
            log.warning("skipping the rest of a shard: %s", msg)
            for _ in range(stop - start - given):   # one marker per lost sample: exact stats
                yield error_marker(msg)


