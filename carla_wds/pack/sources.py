"""Reading raw per-frame files that are not images: JSON and gzip JSON (bounded), and numpy
files, which may be pickles (TCP's supervision dicts, TransFuser 2022's LiDAR tuples).

A pickle is code as much as data, so one is read only when the user passes
--allow-pickle-input for a local source they trust; its values are then stored as typed npy
members, and no shard ever holds a pickle.
"""
from __future__ import annotations

import gzip
import io
import json
import os
import zlib
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Iterator, Protocol

import numpy as np

from .. import limits
from ..codecs import check_npy_bytes, json_loads, npy_header
from .errors import PackError

# The default bounds (limits.py: raw_file_bytes, json_bytes); the active limits apply.
MAX_RAW_BYTES = limits.DEFAULT.raw_file_bytes
MAX_JSON_BYTES = limits.DEFAULT.json_bytes   # after gunzip: a gzip bomb stops here
PICKLE_FLAG = "--allow-pickle-input"


class PickleRefused(PackError):
    """A pickled raw input met without --allow-pickle-input: never a skip, always a stop."""


class Files(Protocol):
    """Files that are no files on disk (an archive's members, a task's bytes), seen by the
    readers below at the paths they would have once extracted (archives.MemberTree)."""

    def owns(self, path: str) -> bool: ...
    def read(self, path: str) -> bytes: ...          # FileNotFoundError if there is none
    def listdir(self, path: str) -> list[str]: ...   # FileNotFoundError if no such folder
    def kind(self, path: str) -> str | None: ...     # "file", "dir" or None


# The members read in place of files while an archived route is planned or encoded: one
# context at a time (files_from), so the same planner and encoder serve folders and archives.
_FILES: ContextVar[Files | None] = ContextVar("carla_wds_member_files", default=None)


@contextmanager
def files_from(files: Files) -> Iterator[Files]:
    """Within the block, paths `files` owns are read from it, never from the disk (a member
    missing from it is missing, even if a stale extracted copy exists)."""
    token = _FILES.set(files)
    try:
        yield files
    finally:
        _FILES.reset(token)


def _owner(path: Path | str) -> tuple[Files | None, str]:
    files, p = _FILES.get(), os.fspath(path)
    return (files, p) if files is not None and files.owns(p) else (None, p)


def listdir(folder: Path | str) -> list[str]:
    """os.listdir, or the names in a member folder (files_from)."""
    files, p = _owner(folder)
    return files.listdir(p) if files else os.listdir(p)


def is_dir(path: Path | str) -> bool:
    files, p = _owner(path)
    return files.kind(p) == "dir" if files else os.path.isdir(p)


def is_file(path: Path | str) -> bool:
    files, p = _owner(path)
    return files.kind(p) == "file" if files else os.path.isfile(p)


def read_file(path: Path | str) -> bytes:
    """A file's whole bytes, unbounded (an image: its decoder's checks bound it), or a
    member's."""
    files, p = _owner(path)
    if files:
        return files.read(p)
    with open(p, "rb") as f:
        return f.read()


def read_bytes(path: Path, limit: int | None = None) -> bytes:
    """A file's bytes (or a member's: files_from), refused if larger than `limit`: by
    default raw_file_bytes (a LimitError naming it), else a ValueError."""
    bound = limits.active().raw_file_bytes if limit is None else limit
    files, p = _owner(path)
    if files:
        data = files.read(p)
        size = len(data)
    else:
        with open(p, "rb") as f:
            data = f.read(bound + 1)
            size = max(len(data), os.fstat(f.fileno()).st_size)
    if len(data) > bound:
        if limit is None:
            raise limits.LimitError("a per-frame file's size (bytes)", size, "raw_file_bytes",
                                    bound)
        raise ValueError(f"file is over {bound} bytes; expected a per-frame file")
    return data


def gunzip(data: bytes, limit: int | None = None) -> bytes:
    """Decompress at most `limit` bytes (json_bytes); a truncated or corrupt stream is a
    ValueError."""
    limit = limits.active().json_bytes if limit is None else limit
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as f:
            out = f.read(limit + 1)
    except (EOFError, OSError, zlib.error) as exc:
        raise ValueError(f"truncated or corrupt gzip ({exc}); expected a complete .gz "
                         "file") from None
    if len(out) > limit:
        raise ValueError(f"decompresses to over {limit} bytes; expected a per-frame JSON")
    return out


def decode_json(data: bytes, gz: bool, name: str | None = None) -> Any:
    """JSON (optionally gzipped) bytes -> value; ValueError naming what is wrong (LimitError
    for a document nested deeper than json_depth or of more values than json_values, refused
    before the parser builds anything; `name`, the file, starts its message)."""
    raw = gunzip(data) if gz else data
    try:
        return json_loads(raw, name)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"malformed JSON ({exc}); expected a JSON document") from None


def read_json(path: Path) -> Any:
    """A .json or .json.gz file -> value (ValueError for a bad one)."""
    return decode_json(read_bytes(path), path.name.endswith(".gz"), str(path))


def npy_is_pickle(data: bytes) -> bool:
    """Whether an .npy file's header declares an object array (its data is a pickle); a
    header declaring more than array_bytes is refused (LimitError) before np.load allocates."""
    try:
        shape, _, dtype, _ = npy_header(data)
    except ValueError as exc:
        raise ValueError(f"not an .npy file ({exc}); expected np.save's format") from None
    check_npy_bytes(shape, dtype)
    return bool(dtype.hasobject)


def read_npy(path: Path, allow_pickle: bool, what: str) -> Any:
    """An .npy file -> its array, or for a pickled one (only with allow_pickle) the object it
    holds: a dict for TCP's supervision, a (frame, points) tuple for TransFuser 2022 LiDAR.

    Raises PickleRefused naming the file and the flag, ValueError for a bad file."""
    data = read_bytes(path)
    if not npy_is_pickle(data):
        return np.load(io.BytesIO(data), allow_pickle=False)
    if not allow_pickle:
        raise PickleRefused(
            f"{path}: a pickled .npy ({what}); carla-wds does not unpickle raw input unless "
            f"you say the source is trusted. Fix: if this is your own local copy of the "
            f"dataset, pass {PICKLE_FLAG}; the values are stored as typed npy members and "
            "no shard ever holds a pickle")
    try:
        arr = np.load(io.BytesIO(data), allow_pickle=True)
        return arr.item() if arr.shape == () else arr
    except Exception as exc:  # noqa: BLE001 - unpickling raises anything on a bad file
        raise ValueError(f"pickled .npy does not load ({type(exc).__name__}: {exc}); "
                         f"expected {what}") from None
