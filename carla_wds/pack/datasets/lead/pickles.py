"""LEAD's metas/NNNN.pkl and bboxes/NNNN.pkl: read only with --allow-pickle-input, through a
restricted unpickler, and turned into plain values (stored as JSON and a typed record, never
as pickles).

Their writer (kesai-labs/lead@44891760 lead/common/common_utils.py write_pickle) is
`lzma.open(path, "wb").write(pickletools.optimize(pickle.dumps(data, HIGHEST_PROTOCOL)))`: an
xz stream holding a pickle of plain dicts, lists, strings, numbers, None and numpy arrays
(lead/expert/expert.py l.2969-3155 the metas dict, expert_data.py get_bounding_boxes the boxes
list). So the only globals such a pickle names are numpy's array and scalar reconstructors;
`SafeUnpickler.find_class` allows exactly those and refuses every other global (os.system,
builtins.eval, ...) before it is looked up, so a crafted file cannot run code even when the
user passed the flag. The xz stream is bounded (limits array_bytes) before unpickling.
"""
from __future__ import annotations

import io
import lzma
import math
import pickle
from typing import Any

import numpy as np

from .... import limits
from ...sources import PICKLE_FLAG, PickleRefused

# (module, name) a numpy array or scalar pickles to, numpy 1.x and 2.x spellings
ALLOWED_GLOBALS = frozenset(
    (mod, name)
    for core in ("numpy.core", "numpy._core")
    for mod, name in ((f"{core}.multiarray", "_reconstruct"), (f"{core}.multiarray", "scalar"),
                      (f"{core}.numeric", "_frombuffer"))
) | {("numpy", "ndarray"), ("numpy", "dtype")}


class _CheckedArray(np.ndarray):
    """What a pickled array is rebuilt as: numpy's own ndarray.__setstate__ trusts the state
    it is given (an object array whose list is shorter than its shape reads past it; a huge
    shape allocates at once), so the state is checked first: a numeric dtype, and data bytes
    of exactly the shape's size, within array_bytes."""

    def __setstate__(self, state: Any) -> None:
        shape, dtype, data = (state[1], state[2], state[4]) if len(state) == 5 else \
            (state[0], state[1], state[3]) if len(state) == 4 else (None, None, None)
        ok = (isinstance(dtype, np.dtype) and not dtype.hasobject
              and isinstance(data, (bytes, bytearray)) and isinstance(shape, tuple)
              and all(isinstance(n, int) and n >= 0 for n in shape)
              and math.prod(shape) * dtype.itemsize == len(data)
              and len(data) <= limits.active().array_bytes)
        if not ok:
            raise pickle.UnpicklingError(
                "an array whose state is not numeric data of its own size within array_bytes "
                "(object arrays, or a shape its bytes do not fill); refused")
        super().__setstate__(state)


def _reconstruct(real: Any) -> Any:
    """numpy's _reconstruct for the one call its pickles make, an empty ndarray that BUILD
    then fills: built as _CheckedArray, whose state is checked."""
    def build(subtype: Any, shape: Any, dtype: Any) -> Any:
        if subtype is not np.ndarray or tuple(shape) != (0,):
            raise pickle.UnpicklingError(f"the pickle builds a {getattr(subtype, '__name__', subtype)} "
                                         f"of shape {shape!r} before its data; refused")
        return real(_CheckedArray, shape, dtype)
    return build


class SafeUnpickler(pickle.Unpickler):
    """pickle.Unpickler that resolves only ALLOWED_GLOBALS; anything else is UnpicklingError
    naming the global (nothing is imported for it)."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in ALLOWED_GLOBALS:
            raise pickle.UnpicklingError(
                f"the pickle names the global {module}.{name}, which LEAD's writer never "
                "writes (only numpy arrays and scalars); refused, nothing was run")
        found = super().find_class(module, name)
        return _reconstruct(found) if name == "_reconstruct" else found

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("the pickle uses persistent ids; refused")


def read_lead_pickle(data: bytes, where: str, allowed: bool) -> Any:
    """One LEAD .pkl (xz of a pickle) -> its value via SafeUnpickler. PickleRefused without
    --allow-pickle-input (naming the file and the flag); ValueError for a bad or forbidden
    file."""
    if not allowed:
        raise PickleRefused(
            f"{where}: a pickle (LEAD's metas/bboxes); carla-wds does not unpickle raw input "
            f"unless you say the source is trusted. Fix: if this is your own local copy of "
            f"LEAD's data, pass {PICKLE_FLAG}; it is then read with a restricted unpickler "
            "(numpy arrays and plain values only) and stored as JSON and typed members, never "
            "as a pickle")
    cap = limits.active().array_bytes
    raw = _unxz(data, cap) if data[:6] == b"\xfd7zXZ\x00" else data   # plain pickles too
    try:
        return SafeUnpickler(io.BytesIO(raw)).load()
    except Exception as exc:  # noqa: BLE001 - unpickling raises anything on a bad file
        raise ValueError(f"refused ({type(exc).__name__}: {exc}); expected LEAD's pickle of "
                         "plain values and numpy arrays") from None


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
    Python numbers, dict keys strings (camera_calibration's are ints), tuples lists."""
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


__all__ = ["ALLOWED_GLOBALS", "SafeUnpickler", "number", "plain", "read_lead_pickle"]
