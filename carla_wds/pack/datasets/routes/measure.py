"""One frame's measurements: the core fields every layout maps (x, y, theta, ...), the 4x4
ego matrix where waypoints come from it, and the layout's named measurement fields, read from
the measurement file or another per-frame source (TCP's supervision dicts).

Each reader returns (values, "") or (None, reason): a bad frame is skipped or stops the pack
with the reason, never read half.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from ....extras import MeasField
from ....schema import N_COMMANDS
from ....suggest import did_you_mean
from .formulas import formula_value
from ...labels import F32_MAX
from .layout_parts import Field, lookup
from .layouts import Layout
from ...sources import read_json, read_npy

CORE_FINITE = ("x", "y", "speed", "target_x", "target_y")
MISSING_KEY = "missing measurement field"


def record_fields(layout: Layout, pred_len: int) -> tuple[MeasField, ...]:
    """The measurements record of this layout: its fields in YAML order, future ones with a
    leading pred_len axis, padded ones followed by their <name>_len count."""
    out = []
    for f in layout.measurement_fields:
        shape = (pred_len, *f.shape) if f.future else f.shape
        out.append(MeasField(f.name, f.dtype, shape, f.units, f.frame, f.twin_of))
        if f.pad:   # a twin's count stands in for its field's count too
            out.append(MeasField(f"{f.name}_len", "int32", (), "rows",
                                 twin_of=f"{f.twin_of}_len" if f.twin_of else ""))
    return tuple(out)


def read_measurement(path: Path, layout: Layout) -> tuple[dict[str, Any] | None, str]:
    """Core fields (floats), `ego_matrix` (4x4 float64) and `m:<name>` measurement fields."""
    try:
        data = read_json(path)
    except (ValueError, OSError) as exc:   # its text already says what was expected
        return None, str(exc)
    if not isinstance(data, dict):
        return None, f"expected a JSON object, found {type(data).__name__}"
    values, reason = _core(data, layout)
    if values is None:
        return None, reason
    if "ego_matrix" in layout.fields:
        m, reason = _matrix(data, layout.fields["ego_matrix"])
        if m is None:
            return None, reason
        values["ego_matrix"] = m
    reason = add_fields(values, data, layout, "measurements")
    return (None, reason) if reason else (values, "")


def read_source(path: Path, layout: Layout, source: str, values: dict[str, Any],
                allow_pickle: bool) -> str:
    """Add a per-frame source's fields (e.g. supervision) to `values`; "" or the reason."""
    try:
        data = read_npy(path, allow_pickle, "a dict of values per frame") \
            if path.suffix == ".npy" else read_json(path)
    except (ValueError, OSError) as exc:
        return str(exc)
    if not isinstance(data, dict):
        return f"holds a {type(data).__name__}; expected a dict of named values"
    return add_fields(values, data, layout, source)


def add_fields(values: dict[str, Any], data: dict, layout: Layout, source: str) -> str:
    for f in layout.measurement_fields:
        if f.source != source:
            continue
        try:
            raw = lookup(data, f.key)
        except KeyError as exc:
            return missing_key(exc, f"measurement_fields.{f.name}.key: {f.key}", data)
        if source == "measurements" and f.key == layout.fields.get("theta"):
            raw = compass(raw)
        if f.formula:   # a dataset's label rule the layout names (formulas.py)
            value, reason = formula_value(f.formula, f.shape, f.dtype, raw, data, f.pad)
            if value is not None and f.pad:
                value, reason = field_value(f, value)
        else:
            value, reason = field_value(f, raw)
        if value is None:
            return f"field {f.key!r}: {reason}"
        values[f"m:{f.name}"] = value
    return ""


def compass(raw: Any) -> Any:
    """A field that reads the layout's theta (tcp_roach's future_theta) is the compass too, so
    it follows the core theta's rule: NaN or null (no compass reading) is 0, as TCP's data.py
    sets it (TCP@73cc1dd TCP/data.py __getitem__). That frame's own theta is the same value,
    which the planner counts as nan_theta, so each such frame is counted once. An infinite
    value stays and is refused as corrupt, like an infinite core theta."""
    if raw is None or isinstance(raw, float) and math.isnan(raw):
        return 0.0
    return raw


def field_value(f: Field, raw: Any) -> tuple[np.ndarray | None, str]:
    """A raw JSON or numpy value -> the field's array (a padded field also gives its count)."""
    if raw is None:
        return None, "is null; expected a value"
    try:
        arr = np.asarray(raw)
        if arr.dtype.hasobject or arr.dtype.kind not in "biuf":
            raise ValueError(arr.dtype)
        if f.dtype == "bool" and not np.isin(arr, (0, 1)).all():
            raise ValueError("not 0/1")
        if not _fits(arr, np.dtype(f.dtype)):
            raise ValueError("out of range")
        arr = arr.astype(f.dtype)
    except (ValueError, TypeError):
        what = "whole numbers" if np.dtype(f.dtype).kind in "iu" else "numbers"
        return None, f"is {str(raw)[:60]}; expected {f.dtype} {what} of shape {list(f.shape)}"
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        return None, "holds NaN or infinite values; expected finite numbers"
    if f.pad:
        if arr.ndim != len(f.shape) or arr.shape[1:] != f.shape[1:] or len(arr) > f.shape[0]:
            return None, f"has shape {list(arr.shape)}; expected at most {list(f.shape)}"
        out = np.zeros(f.shape, f.dtype)
        out[:len(arr)] = arr
        return np.concatenate([out.reshape(-1), [len(arr)]]), ""   # split in `record_values`
    if arr.shape != f.shape:
        return None, f"has shape {list(arr.shape)}; expected {list(f.shape)}"
    return arr, ""


def _fits(arr: np.ndarray, dtype: np.dtype) -> bool:
    """Whether an integer dtype holds every value of `arr` as it is: astype would turn 1e20
    into -2147483648, 2**40 into 0 and 2.5 into 2 without a word."""
    if dtype.kind not in "iu" or arr.size == 0:
        return True
    info = np.iinfo(dtype)
    with np.errstate(invalid="ignore"):
        whole = arr.dtype.kind != "f" or bool((np.isfinite(arr) & (arr == np.trunc(arr))).all())
    return whole and info.min <= arr.min() and arr.max() <= info.max


def record_values(values: list[dict[str, Any]], layout: Layout) -> dict[str, np.ndarray]:
    """Frame t's record from values[0] and its pred_len futures values[1:]."""
    out = {}
    for f in layout.measurement_fields:
        if f.future:
            out[f.name] = np.stack([v[f"m:{f.name}"] for v in values[1:]])
        elif f.pad:
            flat = values[0][f"m:{f.name}"]
            out[f.name] = flat[:-1].reshape(f.shape).astype(f.dtype)
            out[f"{f.name}_len"] = np.int32(flat[-1])
        else:
            out[f.name] = values[0][f"m:{f.name}"]
    return out


def _core(data: dict, layout: Layout) -> tuple[dict[str, float] | None, str]:
    values = {}
    for ours, theirs in layout.fields.items():
        if ours == "ego_matrix":
            continue
        try:
            value = lookup(data, theirs)
        except KeyError as exc:
            return None, missing_key(exc, f"fields.{ours}: {theirs}", data)
        if isinstance(value, bool) or not isinstance(value, (int, float)) and value is not None:
            return None, f"field {theirs!r} is {value!r}; expected a number"
        values[ours] = math.nan if value is None else float(value)
    return _check_core(values, layout)


def missing_key(exc: KeyError, yaml_key: str, data: dict) -> str:
    """A measurement file without the key the layout YAML names: the YAML's line and the keys
    the file has (a wrong YAML key shows in every frame; MISSING_KEY marks the reason)."""
    keys = sorted(map(str, data))
    shown = ", ".join(keys[:30]) + (f", ... ({len(keys)} keys)" if len(keys) > 30 else "")
    hint = did_you_mean(yaml_key.rpartition(": ")[2], keys)
    return (f"{MISSING_KEY} {exc.args[0]} (the layout's {yaml_key}){hint}; the file has keys "
            f"[{shown}]")


def wrong_layout_key(episode: str, bad: dict[int, str], readable: int) -> str | None:
    """The error of a key the layout YAML names that none of a route's measurement files has
    (no readable frame, every one missing the same key): the YAML is wrong, not the files, so
    the message names the YAML's line rather than suggesting --on-error skip."""
    reasons = set(bad.values())
    if readable or len(reasons) != 1 or not next(iter(reasons)).startswith(MISSING_KEY):
        return None
    reason = next(iter(reasons))
    yaml_key = reason.partition("(the layout's ")[2].partition(")")[0]
    return (f"{episode}: none of its {len(bad)} measurement files has the key the layout names: "
            f"{reason[len(MISSING_KEY) + 1:]}. Fix: correct {yaml_key.partition(':')[0]} in the "
            "layout YAML to a key the files have")


def _check_core(values: dict[str, float], layout: Layout) -> tuple[dict | None, str]:
    # NaN or null theta is CARLA's "no compass reading", which TCP maps to 0 (counted as
    # nan_theta by the planner); an infinite theta is a corrupt value like an infinite x.
    bad = [layout.fields[k] for k in CORE_FINITE if not math.isfinite(values[k])] + (
        [layout.fields["theta"]] if math.isinf(values["theta"]) else [])
    if bad:
        return None, f"non-finite value in {bad}; expected finite numbers"
    # Labels are stored as float32: a value past its range would become an infinity there.
    huge = [layout.fields[k] for k in CORE_FINITE if abs(values[k]) > F32_MAX]
    if huge:
        return None, (f"value beyond float32 range (|v| > {F32_MAX:.3g}) in {huge}; expected "
                      "coordinates in metres and speeds in m/s")
    if not math.isfinite(values["command"]) or values["command"] != int(values["command"]):
        return None, f"command {values['command']} is not an integer RoadOption"
    if not (values["command"] < 0 or 1 <= values["command"] <= N_COMMANDS):
        return None, (f"field {layout.fields['command']!r} is {int(values['command'])}; expected a "
                      f"CARLA RoadOption: -1 (VOID) or 1..{N_COMMANDS}")
    return values, ""


def _matrix(data: dict, key: str) -> tuple[np.ndarray | None, str]:
    try:
        m = np.asarray(lookup(data, key), dtype=np.float64)
    except KeyError as exc:
        return None, f"missing measurement field {exc.args[0]}; expected a 4x4 ego matrix"
    except (ValueError, TypeError):
        return None, f"field {key!r} is not a 4x4 matrix of numbers"
    if m.shape != (4, 4) or not np.isfinite(m).all():
        return None, f"field {key!r} has shape {list(m.shape)} or non-finite values; " \
                     "expected a finite 4x4 matrix"
    return m, ""
