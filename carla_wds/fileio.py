"""Atomic file writes: every file carla-wds writes appears whole or not at all."""
from __future__ import annotations

import ctypes
import hashlib
import json
import os
import queue
import tempfile
import threading
from pathlib import Path
from typing import Any


def fsync_dir(path: str | Path) -> None:
    try:
        fd = os.open(str(path), os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write to a temporary file in the same folder, fsync, then rename over `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, 0o666 & ~_umask())   # mkstemp's 0600 would hide manifests from other users
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
    return path


def atomic_write_json(path: str | Path, obj: Any) -> Path:
    return atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode())


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def _sync_file_range():
    """Linux's sync_file_range(2), which Python's os module lacks; None elsewhere."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    return fn


_SYNC_FILE_RANGE = _sync_file_range()
_SYNC_FILE_RANGE_WRITE = 2


def start_writeback(fd: int, offset: int, length: int) -> None:
    """Ask the kernel to start writing a range to disk now, without waiting (RocksDB's
    bytes_per_sync): the fsync at the end of a shard then waits for the tail only."""
    if _SYNC_FILE_RANGE is not None:
        _SYNC_FILE_RANGE(fd, offset, length, _SYNC_FILE_RANGE_WRITE)


def writev_all(fd: int, parts: list[bytes]) -> None:
    """os.writev, repeated until every byte is written (a write may be partial)."""
    views = [memoryview(p) for p in parts if len(p)]
    while views:
        done = os.writev(fd, views[:1024])   # IOV_MAX
        while views and done >= len(views[0]):
            done -= len(views.pop(0))
        if done:
            views[0] = views[0][done:]


class HashingWriter:
    """Writes a file from lists of parts while a thread hashes them, and counts the bytes.

    hashlib releases the GIL on large buffers, so sha256 runs beside the reads and writes of
    the packing thread instead of after them. A sample's parts go out in one `writev` and one
    queue item: a put per member made the hand-off cost more than the hashing. Every
    `writeback_bytes` (if set) the kernel is asked to start writing to disk.
    """

    def __init__(self, fd: int, writeback_bytes: int | None = 32 << 20) -> None:
        self.fd = fd
        self.size = self._written_back = 0
        self.writeback_bytes = writeback_bytes
        self._sha = hashlib.sha256()
        self._queue: queue.Queue = queue.Queue(maxsize=64)
        self._thread = threading.Thread(target=self._hash, daemon=True)
        self._thread.start()

    def _hash(self) -> None:
        while (parts := self._queue.get()) is not None:
            for part in parts:
                self._sha.update(part)

    def write_parts(self, parts: list[bytes]) -> None:
        # bytes are immutable, so the hashing thread sees exactly what was written
        parts = [p if type(p) is bytes else bytes(p) for p in parts]
        self._queue.put(parts)
        writev_all(self.fd, parts)
        self.size += sum(map(len, parts))
        if self.writeback_bytes and self.size - self._written_back >= self.writeback_bytes:
            start_writeback(self.fd, self._written_back, self.size - self._written_back)
            self._written_back = self.size

    def hexdigest(self) -> str:
        self.close()
        self._thread.join()
        return self._sha.hexdigest()

    def close(self) -> None:
        """Let the hashing thread finish (it ends at the first None)."""
        self._queue.put(None)

