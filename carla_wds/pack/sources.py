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
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from .errors import PackError

# No CARLA measurement or box file comes near these; they bound what one bad file can cost.
MAX_RAW_BYTES = 64 << 20
MAX_JSON_BYTES = 256 << 20   # after gunzip: a gzip bomb stops here
PICKLE_FLAG = "--allow-pickle-input"


class PickleRefused(PackError):
    """A pickled raw input met without --allow-pickle-input: never a skip, always a stop."""


def read_bytes(path: Path, limit: int = MAX_RAW_BYTES) -> bytes:
    """A file's bytes, refused (ValueError) if it is larger than `limit`."""
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"file is over {limit} bytes; expected a per-frame file")
    return data


def gunzip(data: bytes, limit: int = MAX_JSON_BYTES) -> bytes:
    """Decompress at most `limit` bytes; a truncated or corrupt stream is a ValueError."""
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as f:
            out = f.read(limit + 1)
    except (EOFError, OSError, zlib.error) as exc:
        raise ValueError(f"truncated or corrupt gzip ({exc}); expected a complete .gz "
                         "file") from None
    if len(out) > limit:
        raise ValueError(f"decompresses to over {limit} bytes; expected a per-frame JSON")
    return out


def decode_json(data: bytes, gz: bool) -> Any:
    """JSON (optionally gzipped) bytes -> value; ValueError naming what is wrong."""
    raw = gunzip(data) if gz else data
    try:
        return json.loads(raw.decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"malformed JSON ({exc}); expected a JSON document") from None


def read_json(path: Path) -> Any:
    """A .json or .json.gz file -> value (ValueError for a bad one)."""
    return decode_json(read_bytes(path), path.name.endswith(".gz"))


def npy_is_pickle(data: bytes) -> bool:
    """Whether an .npy file's header declares an object array (its data is a pickle)."""
    f = io.BytesIO(data[:65536 + 12])
    try:
        version = np.lib.format.read_magic(f)
        read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                else np.lib.format.read_array_header_2_0)
        _, _, dtype = read(f)
    except ValueError as exc:
        raise ValueError(f"not an .npy file ({exc}); expected np.save's format") from None
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
