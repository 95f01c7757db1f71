"""The parts of a layout YAML beyond cameras and core fields: sensors, measurement fields,
extra per-frame sources, derived labels and the route filter. Each part is a frozen dataclass
read from plain YAML data; a bad value is a one-line ValueError naming the key, what was
expected and the valid choices.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ....datasets import box_parsers
from ....modalities import codec_kinds

# Per sensor, how a raw file becomes members: its bytes as they are (checked by the codec),
# a pickled (frame, points) tuple (TransFuser 2022 LiDAR, only with --allow-pickle-input),
# or a box list in JSON (typed array + the raw JSON beside it), or a LAZ cloud decoded once at
# pack time into float32 xyz points (a loader decodes npy 40-140x faster than LAZ, for 2.4x
# the bytes: docs/benchmarks.md, issue 14's LAZ-vs-npy measurement).
# the box readers are the parsers the datasets register (carla_wds.datasets.box_parsers),
# read when a layout is parsed, so a parser registered after import is usable too
_FILE_READERS = ("bytes", "pickled_tuple", "laz_points")


def readers() -> tuple[str, ...]:
    """The `read:` values a sensor may name."""
    return (*_FILE_READERS[:2], *box_parsers(), *_FILE_READERS[2:])

# Kinds a sensor folder cannot hold: the JSON sources and the record are built by the packer.
_NOT_SENSORS = ("json", "measurements")
SENSOR_EXTS = ("png", "jpg", "npy", "laz", "json", "json.gz")   # the built-in layouts' ones
# a sensor's file extension: any short name, so a registered modality's own files can be read
_EXT = re.compile(r"^[a-z0-9]{1,8}(\.gz)?$")
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
    # semantics: the project's table from saved class id to training class (its
    # config.converter), recorded in the manifest; the loader serves the converted classes
    classes: tuple[int, ...] = ()

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
    formula: str = ""    # a named label formula (formulas.py) computed from the raw value
    twin_of: str = ""    # the field this one stands in for with the augmented twin camera


@dataclass(frozen=True)
class Source:
    """Per-frame dictionaries besides the measurements (TCP's supervision/NNNN.npy)."""
    name: str
    folder: str
    ext: str = "npy"


@dataclass(frozen=True)
class SampleRule:
    """Which frames of a route the project's own loader serves, beyond "has a full future":
    `head` frames at a route's start (frame numbers below it; garage's skip_first) and `tail`
    more frames before the last pred_len (its loop ends that much earlier). `loader` names the
    loop this follows (repository, commit, file, line), for the manifest."""
    head: int = 0
    tail: int = 0
    loader: str = ""

    def doc(self, all_frames: bool) -> dict[str, Any]:
        """The manifest's sample_rule: the rule applied (none with --all-frames)."""
        return {"all_frames": all_frames, "head": 0 if all_frames else self.head,
                "tail": 0 if all_frames else self.tail, "loader": self.loader}


@dataclass(frozen=True)
class RouteFilter:
    """Keep a route only if `file` holds `key` >= `min` (garage: results.json.gz), or, with
    `keep_also`, if that named route rule (formulas.ROUTE_RULES: a project's own exception,
    written in its room) keeps the route the score drops."""
    file: str
    key: str
    min: float
    keep_also: str = ""

    def reason(self, results: Any) -> str:
        """Why the route whose `file` holds `results` is left out, or "" to keep it;
        ValueError naming the value when the file lacks what the filter reads."""
        from .formulas import ROUTE_RULES
        try:
            score = lookup(results, self.key)
        except KeyError as exc:
            raise ValueError(f"no {exc.args[0]}; expected a JSON object with {self.key}"
                             ) from None
        if isinstance(score, bool) or not isinstance(score, (int, float)) or score != score:
            raise ValueError(f"{self.key} is {str(score)[:40]!r}; expected a number")
        if score >= self.min or self.keep_also and ROUTE_RULES[self.keep_also](results):
            return ""
        unless = f", and rule {self.keep_also} does not keep it" if self.keep_also else ""
        return f"{self.file}: {self.key} is {score:g} < {self.min:g}{unless}"


def fail(where: str, key: str, value: Any, expected: str) -> LayoutError:
    shown = repr(value) if len(repr(value)) < 80 else repr(value)[:77] + "..."
    return LayoutError(f"{where}: {key} is {shown}; expected {expected}. Fix: copy a built-in "
                       "layout from carla_wds/pack/datasets/routes/layouts/ and edit it")


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


def _ext(value: Any, where: str, key: str) -> str:
    if not isinstance(value, str) or not _EXT.match(value):
        raise fail(where, key, value, f"a file extension such as one of {list(SENSOR_EXTS)}")
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


def sensor_codecs() -> tuple[str, ...]:
    """The codecs a YAML sensor may name: every registered modality's, read when a layout is
    parsed, so a modality registered after import is usable from YAML too."""
    return tuple(c for c, row in codec_kinds().items() if row[0] not in _NOT_SENSORS)


def parse_sensors(data: Any, where: str) -> tuple[Sensor, ...]:
    allowed = ("folder", "ext", "codec", "prefix", "twin", "read", "classes")
    out = []
    for name, d in _named(data, where, "sensors").items():
        at = f"sensors.{name}"
        d = _only(d, allowed, where, at)
        s = Sensor(_name(name, where, "sensors"), _str(d.get("folder"), where, f"{at}.folder"),
                   _ext(d.get("ext"), where, f"{at}.ext"),
                   _choice(d.get("codec"), sensor_codecs(), where, f"{at}.codec"),
                   str(d.get("prefix", "")),
                   _str(d["twin"], where, f"{at}.twin") if d.get("twin") else None,
                   _choice(d.get("read", "bytes"), readers(), where, f"{at}.read"),
                   _classes(d.get("classes"), d.get("codec"), where, f"{at}.classes"))
        out.append(s)
    return tuple(out)


def _classes(value: Any, codec: Any, where: str, key: str) -> tuple[int, ...]:
    """A semantics sensor's class table: entry i is the class of saved id i."""
    if value is None:
        return ()
    if codec != "semantics" or not isinstance(value, list) or not 0 < len(value) <= 256 or \
            not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 255
                    for v in value):
        raise fail(where, key, value, "on a semantics sensor, a list of 1 to 256 classes "
                   "0..255, entry i the class of saved id i (the project's converter)")
    return tuple(value)


def _formula(d: dict, where: str, at: str) -> tuple[str, str]:
    """A field's formula (a name from formulas.FORMULAS) and twin_of, both optional."""
    from .formulas import FORMULAS
    formula, twin_of = d.get("formula", ""), d.get("twin_of", "")
    if formula and (formula not in FORMULAS or d.get("future")):
        raise fail(where, f"{at}.formula", formula, f"one of {sorted(FORMULAS)}, on a field "
                   "without future")
    if twin_of:
        _name(twin_of, where, f"{at}.twin_of")
    return formula, twin_of


def parse_fields(data: Any, sources: tuple[Source, ...], where: str) -> tuple[Field, ...]:
    allowed = ("key", "source", "dtype", "shape", "units", "frame", "future", "pad", "formula",
               "twin_of")
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
                  str(d.get("frame", "")), bool(d.get("future", False)), bool(d.get("pad", False)),
                  *_formula(d, where, at))
        if f.pad and not f.shape:
            raise fail(where, f"{at}.pad", True, "a shape whose first dimension is the most rows")
        out.append(f)
    twins = {f.twin_of for f in out} - {f.name for f in out if not f.twin_of} - {""}
    if twins:
        raise fail(where, "measurement_fields twin_of", sorted(twins), "the name of another "
                   "measurement field")
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


def parse_samples(data: Any, where: str) -> SampleRule:
    """`samples: {head: 10, tail: 1, loader: "..."}`; absent: every frame with a full future."""
    if data is None:
        return SampleRule()
    d = _only(data, ("head", "tail", "loader"), where, "samples")
    for key in ("head", "tail"):
        v = d.get(key, 0)
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise fail(where, f"samples.{key}", v, "a whole number of frames >= 0")
    if not isinstance(d.get("loader", ""), str):
        raise fail(where, "samples.loader", d.get("loader"), "the loader's file and line")
    return SampleRule(d.get("head", 0), d.get("tail", 0), d.get("loader", ""))


def parse_filter(data: Any, where: str) -> RouteFilter | None:
    if data is None:
        return None
    from .formulas import ROUTE_RULES
    d = _only(data, ("file", "key", "min", "keep_also"), where, "route_filter")
    if not isinstance(d.get("min"), (int, float)) or isinstance(d.get("min"), bool):
        raise fail(where, "route_filter.min", d.get("min"), "a number such as 100")
    key = d.get("key")
    if not isinstance(key, str) or not _KEY.match(key):
        raise fail(where, "route_filter.key", key, "a JSON key such as scores.score_composed")
    keep_also = d.get("keep_also", "")
    if keep_also and keep_also not in ROUTE_RULES:
        raise fail(where, "route_filter.keep_also", keep_also, f"one of {sorted(ROUTE_RULES)}")
    return RouteFilter(_str(d.get("file"), where, "route_filter.file"), key, float(d["min"]),
                       keep_also)


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
