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
from typing import Any, Iterator

import numpy as np

from .... import limits
from ...sources import PICKLE_FLAG, PickleRefused
from .pickle_walk import STRING_CHARS, Global, Refused, Walk, array_values


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


_END = object()
_SCALARS = (type(None), bool, int, float)


def _leaf_size(x: Any) -> tuple[int, int] | None:
    """(values, nesting) of a value that is not a container; None for a list, tuple or dict;
    Refused for anything that is no value (a global, a dtype)."""
    if type(x) in _SCALARS or isinstance(x, np.generic):
        return 1, 0
    if type(x) in (str, bytes, bytearray):
        return 1 + len(x) // STRING_CHARS, 0
    if type(x) is np.ndarray:
        return array_values(x.shape), x.ndim
    if type(x) in (list, tuple, dict):
        return None
    what = x.spelled if type(x) is Global else type(x).__name__
    raise Refused(f"{what} as a value; expected plain values and numeric arrays")


def _children(x: Any) -> Iterator[Any]:
    if type(x) is dict:
        return (v for item in x.items() for v in item)
    return iter(x)


def measure(root: Any) -> None:
    """LimitError unless `root`, expanded as it will be stored (a container reached twice
    counts twice), is within pickle_values and nested within json_depth; Refused for a cycle
    or a non-value. Iterative, and each container is walked once: its size is remembered."""
    lim = limits.active()
    got = _leaf_size(root)
    if got is not None:
        lim.check("pickle_values", got[0], "the values a pickle holds, as stored")
        lim.check("json_depth", got[1], "the nesting depth of a pickle's value")
        return
    done: dict[int, tuple[int, int]] = {}   # id -> (values, nesting) of a finished container
    path: list[list[Any]] = []              # [container, its children, values, nesting]
    open_ids: set[int] = set()

    def grow(frame: list[Any], size: int, height: int, at: int) -> None:
        frame[2] += size
        frame[3] = max(frame[3], height + 1)
        lim.check("pickle_values", frame[2], "the values a pickle holds, as stored (a "
                  "repeated object counts each time, an array its elements)")
        lim.check("json_depth", at + frame[3], "the nesting depth of a pickle's value")

    def enter(node: Any) -> None:
        open_ids.add(id(node))
        path.append([node, _children(node), 0, 1])
        grow(path[-1], 1, 0, len(path) - 1)   # itself: one value, one level

    enter(root)
    while path:
        frame = path[-1]
        child = next(frame[1], _END)
        if child is _END:
            path.pop()
            open_ids.discard(id(frame[0]))
            done[id(frame[0])] = (frame[2], frame[3])
            if path:
                grow(path[-1], frame[2], frame[3], len(path) - 1)
            continue
        got = _leaf_size(child) or done.get(id(child))
        if got is not None:
            grow(frame, got[0], got[1], len(path) - 1)
        elif id(child) in open_ids:
            raise Refused("a container that holds itself (a cycle)")
        else:
            enter(child)


def number(meta: dict, key: str, none: float = math.inf) -> float:
    """meta[key] as a float; None as LEAD's loader reads it (carla_dataset.py l.333: np.inf)."""
    value = meta.get(key)
    if value is None:
        return none
    if isinstance(value, (bool, int, float, np.number, np.bool_)):
        return float(value)
    raise ValueError(f"metas key {key!r} is {type(value).__name__}; expected a number")


__all__ = ["measure", "number", "plain", "read_lead_pickle"]
