"""The parts of a layout YAML beyond cameras and core fields: sensors, measurement fields,
extra per-frame sources, derived labels and the route filter. Each part is a frozen dataclass
read from plain YAML data; a bad value is a one-line ValueError naming the key, what was
expected and the valid choices.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

# Per sensor, how a raw file becomes members: its bytes as they are (checked by the codec),
# a pickled (frame, points) tuple (TransFuser 2022 LiDAR, only with --allow-pickle-input),
# or a box list in JSON (typed array + the raw JSON beside it), or a LAZ cloud decoded once at
# pack time into float32 xyz points (a loader decodes npy 40-140x faster than LAZ, for 2.4x
# the bytes: docs/benchmarks.md, issue 14's LAZ-vs-npy measurement).
READERS = ("bytes", "pickled_tuple", "boxes_tf2022", "boxes_garage", "laz_points")
SENSOR_CODECS = ("png", "jpg", "depth_carla24", "depth_garage8", "semantics", "bev_tf2022",
                 "bev_classes", "points", "laz", "boxes")
SENSOR_EXTS = ("png", "jpg", "npy", "laz", "json", "json.gz")
DTYPES = ("float32", "uint8", "int32", "bool")
WAYPOINTS_FROM = ("position", "ego_matrix")
TARGET_FROM = ("world", "ego")
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\[\d+\])*(\.[A-Za-z_][A-Za-z0-9_]*(\[\d+\])*)*$")
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class LayoutError(ValueError):
    """A layout YAML that cannot be used; the message names the file and key."""


@dataclass(frozen=True)
class Sensor:
    name: str                  # the field a loader selects, and the member's stem
    folder: str
    ext: str
    codec: str
    prefix: str = ""           # file names such as encoded_0042.png
    twin: str | None = None    # folder of the augmented twin (garage's *_augmented)
    read: str = "bytes"

    @property
    def member_ext(self) -> str:
        """The stored member's suffix: what the codec stores, never a pickle."""
        if self.read == "pickled_tuple" or self.codec == "points":
            return "npy"
        if self.read.startswith("boxes_"):
            return "npy"
        return self.ext.split(".")[0]


@dataclass(frozen=True)
class Field:
    """One named measurement: `key` inside a frame's file of `source` (nested keys as
    pos_global[0] or scores.score); `future`: the next pred_len frames' values; `pad`: a list
    of up to shape[0] rows, zero-padded, with a <name>_len count."""
    name: str
    key: str
    source: str = "measurements"
    dtype: str = "float32"
    shape: tuple[int, ...] = ()
    units: str = ""
    frame: str = ""
    future: bool = False
    pad: bool = False


@dataclass(frozen=True)
class Source:
    """Per-frame dictionaries besides the measurements (TCP's supervision/NNNN.npy)."""
    name: str
    folder: str
    ext: str = "npy"


@dataclass(frozen=True)
class RouteFilter:
    """Keep a route only if `file` holds `key` >= `min` (garage: results.json.gz)."""
    file: str
    key: str
    min: float


def fail(where: str, key: str, value: Any, expected: str) -> LayoutError:
    shown = repr(value) if len(repr(value)) < 80 else repr(value)[:77] + "..."
    return LayoutError(f"{where}: {key} is {shown}; expected {expected}. Fix: copy a built-in "
                       "layout from carla_wds/pack/layouts/ and edit it")


def _named(data: Any, where: str, key: str) -> dict[Any, Any]:
    """A YAML section of named entries (`name: {...}`); absent is empty."""
    if data is not None and not isinstance(data, dict):
        raise fail(where, key, data, "a mapping of names to entries, as in the built-in layouts")
    return data or {}


def _only(d: Any, allowed: tuple[str, ...], where: str, key: str) -> dict[str, Any]:
    if not isinstance(d, dict):
        raise fail(where, key, d, f"a mapping with keys from {list(allowed)}")
    unknown = sorted(str(k) for k in d if k not in allowed)
    if unknown:
        raise fail(where, key, unknown, f"only keys from {list(allowed)}")
    return d


def _choice(value: Any, choices: tuple, where: str, key: str) -> Any:
    if value not in choices:
        raise fail(where, key, value, f"one of {list(choices)}")
    return value


def _str(value: Any, where: str, key: str) -> str:
    if not isinstance(value, str) or not value or "/" in value or value.startswith("."):
        raise fail(where, key, value, "a plain name (no '/', not starting with '.')")
    return value


def _name(value: Any, where: str, key: str) -> str:
    if not isinstance(value, str) or not _NAME.match(value):
        raise fail(where, key, value, "a lower-case name of letters, digits and _")
    return value


def _shape(value: Any, where: str, key: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(d, int) and not isinstance(d, bool)
                                              and d >= 1 for d in value):
        raise fail(where, key, value, "a list of whole numbers >= 1, e.g. [20, 2]")
    return tuple(value)


def parse_sensors(data: Any, where: str) -> tuple[Sensor, ...]:
    allowed = ("folder", "ext", "codec", "prefix", "twin", "read")
    out = []
    for name, d in _named(data, where, "sensors").items():
        at = f"sensors.{name}"
        d = _only(d, allowed, where, at)
        s = Sensor(_name(name, where, "sensors"), _str(d.get("folder"), where, f"{at}.folder"),
                   _choice(d.get("ext"), SENSOR_EXTS, where, f"{at}.ext"),
                   _choice(d.get("codec"), SENSOR_CODECS, where, f"{at}.codec"),
                   str(d.get("prefix", "")),
                   _str(d["twin"], where, f"{at}.twin") if d.get("twin") else None,
                   _choice(d.get("read", "bytes"), READERS, where, f"{at}.read"))
        out.append(s)
    return tuple(out)


def parse_fields(data: Any, sources: tuple[Source, ...], where: str) -> tuple[Field, ...]:
    allowed = ("key", "source", "dtype", "shape", "units", "frame", "future", "pad")
    names = ("measurements",) + tuple(s.name for s in sources)
    out = []
    for name, d in _named(data, where, "measurement_fields").items():
        at = f"measurement_fields.{name}"
        d = _only(d, allowed, where, at)
        key = d.get("key", name)
        if not isinstance(key, str) or not _KEY.match(key):
            raise fail(where, f"{at}.key", key, "a JSON key such as speed, pos_global[0] or "
                       "scores.score_composed")
        f = Field(_name(name, where, "measurement_fields"), key,
                  _choice(d.get("source", "measurements"), names, where, f"{at}.source"),
                  _choice(d.get("dtype", "float32"), DTYPES, where, f"{at}.dtype"),
                  _shape(d.get("shape", []), where, f"{at}.shape"), str(d.get("units", "")),
                  str(d.get("frame", "")), bool(d.get("future", False)), bool(d.get("pad", False)))
        if f.pad and not f.shape:
            raise fail(where, f"{at}.pad", True, "a shape whose first dimension is the most rows")
        out.append(f)
    return tuple(out)


def parse_sources(data: Any, where: str) -> tuple[Source, ...]:
    out = []
    for name, d in _named(data, where, "sources").items():
        d = _only(d, ("folder", "ext"), where, f"sources.{name}")
        out.append(Source(_name(name, where, "sources"),
                          _str(d.get("folder"), where, f"sources.{name}.folder"),
                          _choice(d.get("ext", "npy"), ("npy", "json", "json.gz"), where,
                                  f"sources.{name}.ext")))
    return tuple(out)


def parse_filter(data: Any, where: str) -> RouteFilter | None:
    if data is None:
        return None
    d = _only(data, ("file", "key", "min"), where, "route_filter")
    if not isinstance(d.get("min"), (int, float)) or isinstance(d.get("min"), bool):
        raise fail(where, "route_filter.min", d.get("min"), "a number such as 100")
    key = d.get("key")
    if not isinstance(key, str) or not _KEY.match(key):
        raise fail(where, "route_filter.key", key, "a JSON key such as scores.score_composed")
    return RouteFilter(_str(d.get("file"), where, "route_filter.file"), key, float(d["min"]))


def key_path(key: str) -> list[str | int]:
    """"scores.score_composed" -> ["scores", "score_composed"]; "pos_global[0]" -> [.., 0]."""
    out: list[str | int] = []
    for part in key.split("."):
        name, *idx = part.replace("]", "").split("[")
        out.append(name)
        out += [int(i) for i in idx]
    return out


def lookup(data: Any, key: str) -> Any:
    """The value at a nested key, or KeyError naming the part that is missing."""
    value, parts = data, key_path(key)
    for part in parts:
        if isinstance(part, int):
            if not isinstance(value, list) or part >= len(value):
                raise KeyError(f"{key!r} (no element [{part}])")
        elif not isinstance(value, dict) or part not in value:
            raise KeyError(repr(key) if len(parts) == 1 else f"{key!r} (no key {part!r})")
        value = value[part]
    return value
