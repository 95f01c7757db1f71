"""LEAD's metas/NNNN.pkl and bboxes/NNNN.pkl: read only with --allow-pickle-input, through a
pickle opcode walker that builds the values itself (pickle_walk.py), and turned into plain
values (stored as JSON and a typed record, never as pickles).

Their writer (kesai-labs/lead@44891760 lead/common/common_utils.py write_pickle) is
`lzma.open(path, "wb").write(pickletools.optimize(pickle.dumps(data, HIGHEST_PROTOCOL)))`: an
xz stream holding a pickle of plain dicts, lists, strings, numbers, None and numpy arrays
(lead/expert/expert.py l.2969-3155 the metas dict, expert_data.py get_bounding_boxes the boxes
list). So the walker accepts exactly those opcodes and numpy's array, scalar and dtype
reconstructors (numeric dtypes only), refuses every other opcode and global (os.system,
builtins.eval, ...) by name, and never hands file-supplied state to pickle or numpy: a crafted
file cannot run code or read memory even when the user passed the flag. The xz stream is
bounded (limits array_bytes) before the walk, the values it builds and expands to by
pickle_values, their nesting by json_depth.
"""
from __future__ import annotations

import lzma
import math
from typing import Any

import numpy as np

from .... import limits
from ...sources import PICKLE_FLAG, PickleRefused
from ...pickle_measure import measure
from ...pickle_walk import Walk


def read_lead_pickle(data: bytes, where: str, allowed: bool) -> Any:
    """One LEAD .pkl (xz of a pickle) -> its value, built by the opcode walker. PickleRefused
    without --allow-pickle-input (naming the file and the flag); ValueError for a bad or
    forbidden file (LimitError, one, naming the limit over which it builds or nests)."""
    if not allowed:
        raise PickleRefused(
            f"{where}: a pickle (LEAD's metas/bboxes); carla-wds does not unpickle raw input "
            f"unless you say the source is trusted. Fix: if this is your own local copy of "
            f"LEAD's data, pass {PICKLE_FLAG}; it is then read by carla-wds' own pickle reader "
            "(plain values and numeric arrays only, nothing run) and stored as JSON and typed "
            "members, never as a pickle")
    cap = limits.active().array_bytes
    raw = _unxz(data, cap) if data[:6] == b"\xfd7zXZ\x00" else data   # plain pickles too
    try:
        value = Walk().run(raw)
        measure(value)
    except limits.LimitError:
        raise
    except (ValueError, TypeError, OverflowError) as exc:   # Refused; genops: a bad stream
        raise ValueError(f"refused ({exc}); expected LEAD's pickle of plain values and numeric "
                         "numpy arrays") from None
    return value


def _unxz(data: bytes, cap: int) -> bytes:
    """An xz stream's bytes, at most cap (array_bytes) of them; ValueError for a bomb, a
    truncated or a corrupt stream."""
    unxz = lzma.LZMADecompressor()
    try:
        raw = unxz.decompress(data, max_length=cap + 1)
    except lzma.LZMAError as exc:
        raise ValueError(f"not a readable xz stream ({exc}); expected LEAD's lzma pickle") \
            from None
    if len(raw) > cap:
        raise ValueError(f"decompresses to over {cap:,} bytes (array_bytes); expected one "
                         "frame's metas or boxes")
    if not unxz.eof:
        raise ValueError("xz stream cut short; expected a complete lzma pickle (a truncated "
                         "file: re-download the route)")
    return raw


def plain(value: Any) -> Any:
    """A metas/boxes value as JSON-ready data: arrays and numpy scalars become lists and
    Python numbers, dict keys strings (camera_calibration's are ints), tuples lists. For what
    read_lead_pickle returns: its nesting is within json_depth (so this recursion is too) and
    its expanded size within pickle_values."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject or value.nbytes > limits.active().array_bytes:
            raise ValueError(f"holds an array of {value.dtype} and {value.nbytes:,} bytes; "
                             "expected numeric arrays within array_bytes")
        return plain(value.tolist())
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (str, bool, int, type(None))):
        return value
    if isinstance(value, float):
        return value
    raise ValueError(f"holds a {type(value).__name__}; expected plain values and arrays")


def number(meta: dict, key: str, none: float = math.inf) -> float:
    """meta[key] as a float; None as LEAD's loader reads it (carla_dataset.py l.333: np.inf)."""
    value = meta.get(key)
    if value is None:
        return none
    if isinstance(value, (bool, int, float, np.number, np.bool_)):
        return float(value)
    raise ValueError(f"metas key {key!r} is {type(value).__name__}; expected a number")


__all__ = ["measure", "number", "plain", "read_lead_pickle"]
