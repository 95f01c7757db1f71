"""Atomic file writes: every file carla-wds writes appears whole or not at all."""
from __future__ import annotations

import hashlib
import json
import os
import queue
import tempfile
import threading
from pathlib import Path
from typing import Any, BinaryIO


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


class HashingWriter:
    """A write-only file wrapper that counts what passes through it and hashes it in a thread.

    hashlib releases the GIL on large buffers, so sha256 runs beside the reads and writes of
    the packing thread instead of after them.
    """

    def __init__(self, f: BinaryIO) -> None:
        self.f = f
        self.size = 0
        self._sha = hashlib.sha256()
        self._queue: queue.Queue = queue.Queue(maxsize=256)
        self._thread = threading.Thread(target=self._hash, daemon=True)
        self._thread.start()

    def _hash(self) -> None:
        while (data := self._queue.get()) is not None:
            self._sha.update(data)

    def write(self, data: bytes) -> int:
        data = bytes(data)   # immutable, so the hashing thread sees exactly what was written
        self._queue.put(data)
        self.size += len(data)
        return self.f.write(data)

    def hexdigest(self) -> str:
        self.close()
        self._thread.join()
        return self._sha.hexdigest()

    def close(self) -> None:
        """Let the hashing thread finish (it ends at the first None)."""
        self._queue.put(None)

    def flush(self) -> None:
        self.f.flush()

    def tell(self) -> int:
        return self.size
