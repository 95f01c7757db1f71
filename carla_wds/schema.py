"""The sample schema: the single source of truth for members, codecs, dtypes and shapes.

A sample is the camera images of `SampleSpec.cameras` plus the members of `LABELS`; each member
has one codec from the registry in codecs.py (its name is recorded in the manifest). The packer
encodes through `encode_sample`, the loader decodes through `decode_labels` and the codecs,
`carla-wds verify --deep` validates through `validate_sample` and `inspect` reads members with
`decode_member`, so none of them can drift from the others. A new label modality is one codec
(codecs.py) and one `LabelMember` entry here.
"""
from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, replace
from enum import IntEnum
from typing import Any

import numpy as np

from . import limits
from .codecs import (
    CODECS,
    PICKLE_SUFFIXES,
    Codec,
    ImageCodec,
    ImageHeaderError,
    LimitError,
    SchemaError,
    codec_for,
    codec_named,
)
from .extras import Extra
from .imagesize import check_size, image_size

# Version 2 adds the manifest's "spec" (extra members, label frames, load transforms); this
# carla-wds reads both, a version-1 manifest being a spec with no extras.
SCHEMA_VERSION = 2
READABLE_VERSIONS = (1, 2)
# the first four: TCP and TransFuser; front and the last five: Bench2Drive's nuScenes-like rig
CAMERAS = ("front", "rear", "left", "right", "front_left", "front_right", "back", "back_left",
           "back_right")
IMAGE_FORMATS = ("png", "jpg", "raw")   # raw: decoded at pack time (modalities/image.py)
_KEY_OK = re.compile(r"^[A-Za-z0-9_\-~+=,@]+$")
# No camera image of a CARLA dataset comes near this (Bench2Drive: 1600x900 = 1.4 MP); an
# 8192x8192 RGB image is 200 MB decoded. The default of the limit image_pixels (limits.py),
# which is what headers are checked against before decoding.
MAX_PIXELS = limits.DEFAULT.image_pixels


class RoadOption(IntEnum):
    """CARLA's RoadOption (agents.navigation.local_planner), with a short label for plots.

    The one-hot command index is value - 1, as in TCP; VOID (and anything below 0) counts as
    LANEFOLLOW."""
    label: str

    def __new__(cls, value: int, label: str) -> RoadOption:
        obj = int.__new__(cls, value)
        obj._value_, obj.label = value, label
        return obj

    VOID = -1, "void"
    LEFT = 1, "left"
    RIGHT = 2, "right"
    STRAIGHT = 3, "straight"
    LANEFOLLOW = 4, "follow lane"
    CHANGELANELEFT = 5, "change left"
    CHANGELANERIGHT = 6, "change right"


COMMANDS: tuple[RoadOption, ...] = tuple(o for o in RoadOption if o > 0)   # one-hot order
N_COMMANDS = len(COMMANDS)
COMMAND_NAMES: tuple[str, ...] = tuple(o.label for o in COMMANDS)
ROAD_OPTIONS: dict[int, str] = {o.value: o.name for o in RoadOption}


@dataclass(frozen=True)
class LabelMember:
    """One label member of every sample. `shape`: a float32 array of that shape ("pred_len"
    stands for the spec's); `number`: a finite JSON number; neither: any value of the codec.
    `codec`: the codec's name, when not the one named like the member's suffix."""
    member: str
    shape: tuple[int | str, ...] | None = None
    number: bool = False
    codec: str | None = None

    @functools.cached_property
    def field(self) -> str:
        return self.member.rsplit(".", 1)[0]

    def encodable(self, value: Any) -> Any:
        """The value as stored: arrays as float32, numbers as float."""
        if self.shape is not None:
            return np.asarray(value, dtype=np.float32)
        return float(value) if self.number else value

    def checked(self, value: Any, spec: SampleSpec, where: str) -> Any:
        """The decoded value, or SchemaError naming the sample, the member and the fix."""
        if self.shape is not None:
            shape = spec._shapes[self.member]
            if value.shape != shape or value.dtype != np.float32:
                raise SchemaError(f"{where}: {self.member} has shape {value.shape} dtype "
                                  f"{value.dtype}; expected {shape} float32. Re-pack with "
                                  f"pred_len={spec.pred_len}")
        if self.number:
            if not isinstance(value, (int, float)) or not _finite(value):
                raise SchemaError(f"{where}: {self.member} holds {value!r}; expected a finite "
                                  "number (m/s)")
            return float(value)
        return value


def _finite(value: int | float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:   # an integer beyond float's range
        return False


LABELS: tuple[LabelMember, ...] = (
    LabelMember("speed.json", number=True),
    LabelMember("target_point.npy", (2,)),
    LabelMember("target_command.npy", (N_COMMANDS,)),
    LabelMember("waypoints.npy", ("pred_len", 2)),
    LabelMember("waypoints_diff.npy", ("pred_len", 2)),
    LabelMember("meta.json"),
)
LABEL_MEMBERS = tuple(m.member for m in LABELS)
LABEL_UNITS = {"speed": "m/s", "target_point": "m", "waypoints": "m", "waypoints_diff": "m",
               "target_command": "one-hot RoadOption 1..6 (VOID as LANEFOLLOW)"}
_LABEL_CODECS = {m.member: m.codec for m in LABELS if m.codec}


@dataclass(frozen=True)
class SampleSpec:
    """What every sample of one dataset holds; recorded in and rebuilt from the manifest.

    `codecs`: (member, codec name) pairs the manifest recorded; a member not listed uses its
    default codec (LabelMember.codec, else the codec named like its suffix), which is what
    packs made before codec names were recorded used."""
    cameras: tuple[str, ...]
    pred_len: int
    image_format: str = "png"
    codecs: tuple[tuple[str, str], ...] = ()
    extras: tuple[Extra, ...] = ()
    frames: tuple[tuple[str, str], ...] = ()       # label -> coordinate convention
    transforms: tuple[str, ...] = ()               # load-time transforms the layout asks for

    def __post_init__(self) -> None:
        bad = [c for c in self.cameras if c not in CAMERAS]
        if bad or not self.cameras:
            raise SchemaError(f"cameras {list(self.cameras)} invalid; choose from {list(CAMERAS)}")
        if self.image_format not in IMAGE_FORMATS:
            raise SchemaError(f"image_format {self.image_format!r}; expected one of {IMAGE_FORMATS}")
        if self.pred_len < 1:
            raise SchemaError(f"pred_len must be >= 1, got {self.pred_len}")
        for member in self.image_members:   # the loader decodes cameras into image slots
            if not isinstance(self.codec(member), ImageCodec):
                raise SchemaError(f"member {member} has codec {self.codec(member).name!r}, "
                                  "which is not an image codec",
                                  fix="record an image codec for camera members")

    @property
    def image_members(self) -> tuple[str, ...]:
        return tuple(f"{c}.{self.image_format}" for c in self.cameras)

    @property
    def members(self) -> tuple[str, ...]:
        return self.image_members + LABEL_MEMBERS + tuple(e.member for e in self.extras)

    @functools.cached_property
    def _names(self) -> dict[str, str]:   # looked up per member of every sample decoded
        given = dict(self.codecs)
        given.update({e.member: e.codec for e in self.extras})
        return {m: given.get(m) or _LABEL_CODECS.get(m) or codec_for(m).name
                for m in self.members}

    def extra(self, name: str) -> Extra:
        for e in self.extras:
            if e.name == name:
                return e
        raise SchemaError(f"no field {name!r} in these shards; they hold "
                          f"{[e.name for e in self.extras]}")

    def with_extras(self, names: tuple[str, ...]) -> SampleSpec:
        """The same spec decoding only the named extra fields (twins follow their field)."""
        for n in names:
            self.extra(n)
        keep = tuple(e for e in self.extras if e.name in names or e.twin_of in names)
        return replace(self, extras=keep)

    def spec_doc(self) -> dict[str, Any]:
        """What the manifest records under "spec": the extra members, the core labels' dtype,
        shape, units and frame (documentation: a reader rebuilds them from the schema), the
        label frames and the load-time transforms."""
        frames = dict(self.frames)
        labels = [{"member": m.member, "codec": self.codec(m.member).name,
                   "dtype": "float32" if m.shape is not None or m.number else "json",
                   "shape": list(self._shapes[m.member]) if m.shape is not None else [],
                   "units": LABEL_UNITS.get(m.field, ""), "frame": frames.get(m.field, "")}
                  for m in LABELS]
        return {"extras": [e.doc() for e in self.extras], "labels": labels, "frames": frames,
                "transforms": list(self.transforms)}

    def codec_names(self) -> dict[str, str]:
        """member -> codec name, as the manifest records it."""
        return dict(self._names)

    def codec(self, member: str) -> Codec:
        """The registered codec of one member of this spec (SchemaError if unknown); looked
        up in the registry on each call, so a codec registered later is the one used."""
        name = self._names.get(member)
        codec = CODECS.get(name) if name else None   # the common case, without a call
        if codec is None:
            codec = codec_named(name) if name else codec_for(member)
        return codec

    def with_cameras(self, cameras: tuple[str, ...]) -> SampleSpec:
        """The same spec for a subset of its cameras, keeping the recorded codecs."""
        return replace(self, cameras=tuple(cameras))

    def shapes(self) -> dict[str, tuple[int, ...]]:
        return dict(self._shapes)

    @functools.cached_property
    def _shapes(self) -> dict[str, tuple[int, ...]]:
        return {m.member: tuple(self.pred_len if d == "pred_len" else d for d in m.shape)
                for m in LABELS if m.shape is not None}


def make_key(episode: str, frame: int, dot_replacement: str | None = None) -> str:
    """The sample key for frame `frame` of route folder `episode` ("Town01/route_00").

    webdataset cuts the key at the first dot of a member name, so a dot would split one sample
    into two silently; it is mapped with `dot_replacement` or refused.
    """
    name = episode.replace("/", "__")
    if "." in name:
        if dot_replacement is None:
            raise SchemaError(
                f"route {episode!r} has a dot in its name; webdataset would split its samples at "
                "the dot", fix="rename the folder, or pack with --dot-replacement _ to map dots")
        name = name.replace(".", dot_replacement)
    key = f"{name}__{frame:04d}"
    if not _KEY_OK.match(key):
        raise SchemaError(f"route {episode!r} gives key {key!r} with characters outside "
                          f"{_KEY_OK.pattern}", fix="rename the folder")
    return key


def encode_sample(spec: SampleSpec, key: str, images: dict[str, Any],
                  labels: dict[str, Any]) -> dict[str, Any]:
    """Camera images (encoded bytes, passed through, or uint8 RGB arrays) + label values -> a
    webdataset sample dict of bytes, every member through its codec."""
    sample: dict[str, Any] = {"__key__": key}
    for cam, member in zip(spec.cameras, spec.image_members):
        sample[member] = spec.codec(member).encode(images[cam])
    for label in LABELS:
        sample[label.member] = spec.codec(label.member).encode(label.encodable(labels[label.field]))
    return sample


def check_members(spec: SampleSpec, raw: dict[str, Any], where: str) -> None:
    """Refuse pickles and missing members before anything is decoded."""
    for name in raw:
        if not name.startswith("__") and name.rsplit(".", 1)[-1].lower() in PICKLE_SUFFIXES:
            raise SchemaError(f"{where}: member {name!r} is a pickle and is refused, never decoded. "
                              "Re-pack the shard with `carla-wds pack`")
    missing = [m for m in spec.members if m not in raw]
    if missing:
        raise SchemaError(f"{where}: missing member(s) {missing}; expected {list(spec.members)}. "
                          "Re-pack the shard or pass cameras= to read a subset")


def decode_member(spec: SampleSpec, raw: dict[str, Any], member: str, where: str) -> Any:
    """raw[member] through its codec, with a failure named by sample and member (np.load and
    json name neither)."""
    codec = spec.codec(member)
    try:
        return codec.decode(raw[member])
    except LimitError as exc:   # refused from its header: the message names the limit
        raise SchemaError(f"{where}: {member}: {exc}") from None
    except ValueError as exc:   # np.load, json and utf-8 errors alike
        raise SchemaError(f"{where}: {member} does not decode ({exc}). Fix: re-pack the "
                          "shard") from None


def decode_labels(spec: SampleSpec, raw: dict[str, Any], where: str) -> dict[str, Any]:
    """Decode and check the label members of one raw sample (no images): field -> value."""
    return {label.field: label.checked(decode_member(spec, raw, label.member, where), spec, where)
            for label in LABELS}


def validate_sample(spec: SampleSpec, raw: dict[str, Any], where: str,
                    sizes: tuple[tuple[int, int] | None, ...] | None = None,
                    extra_sizes: dict[str, Any] | None = None) -> None:
    """Full check of one raw sample: members whole and within the limits (each codec's check
    reads image headers, LAZ point counts and .npy shapes), labels decode to their shapes
    with finite values and a one-hot command, every camera image's header and decoded size
    equal its camera's recorded size (`sizes`, from Manifest.sizes_of; None for packs made
    before sizes were recorded), and every extra image's header its recorded size
    (`extra_sizes`: member -> [H, W], the manifest's "extra_sizes"), before it is decoded."""
    check_members(spec, raw, where)
    # recorded sizes first: a bomb is named by the size the manifest expected
    recorded = dict(zip(spec.image_members, sizes or ()))
    check_recorded_sizes(raw, {**recorded, **(extra_sizes or {})}, where)
    for member in spec.members:
        problem = spec.codec(member).check(raw[member])
        if problem:
            raise SchemaError(f"{where}: {member}: {problem}", fix="re-pack the shard")
    _check_label_values(decode_labels(spec, raw, where), where)
    for i, member in enumerate(spec.image_members):
        _check_image(spec, raw, member, sizes[i] if sizes else None, where)


def check_recorded_sizes(raw: dict[str, Any], sizes: dict[str, Any], where: str) -> None:
    """Each image member's header against the size the manifest recorded for it (member ->
    [H, W] or None), reading headers only; SchemaError naming the sample and member. A
    header that gives no size is left to the codec's check, which names what is wrong."""
    for member, hw in sizes.items():
        if hw is None or member not in raw:
            continue
        try:
            image_size(raw[member])
        except ImageHeaderError:
            continue
        try:
            check_size(raw[member], tuple(hw), limits.active().image_pixels)
        except ImageHeaderError as exc:
            raise SchemaError(f"{where}: {member}: refused before decoding: {exc}",
                              fix="re-pack the shard") from None


def _check_label_values(labels: dict[str, Any], where: str) -> None:
    onehot = labels["target_command"]
    if onehot.sum() != 1 or not np.isin(onehot, (0, 1)).all():
        raise SchemaError(f"{where}: target_command {onehot.tolist()} is not one-hot")
    for name in ("target_point", "waypoints", "waypoints_diff"):
        if not np.isfinite(labels[name]).all():
            raise SchemaError(f"{where}: {name}.npy holds non-finite values "
                              f"{labels[name].tolist()}; expected finite float32. Re-pack with "
                              "this carla-wds, which refuses such frames")
    with np.errstate(over="ignore"):   # the cast's overflow is what is checked
        speed_ok = bool(np.isfinite(np.float32(labels["speed"])))
    if not speed_ok:
        raise SchemaError(f"{where}: speed.json holds {labels['speed']!r}, beyond float32 range; "
                          "expected a finite float32 speed (m/s). Re-pack with this carla-wds")


def _check_image(spec: SampleSpec, raw: dict[str, Any], member: str,
                 size: tuple[int, int] | None, where: str) -> None:
    """Header size first (a decompression bomb is refused undecoded), then the decoded size."""
    codec, where = spec.codec(member), f"{where}: {member}"
    try:
        h, w = codec.check_size(raw[member], size, limits.active().image_pixels)
    except ImageHeaderError as exc:
        raise SchemaError(f"{where}: refused before decoding: {exc}") from None
    try:
        img = codec.decode(raw[member])
    except SchemaError as exc:
        raise SchemaError(f"{where}: {exc}") from None
    if img.shape[:2] != (h, w):
        raise SchemaError(f"{where}: decodes to {img.shape[1]}x{img.shape[0]} (WxH), its header "
                          f"says {w}x{h}", fix="re-pack the shard")


__all__ = ["CAMERAS", "CODECS", "COMMANDS", "COMMAND_NAMES", "Codec", "IMAGE_FORMATS", "LABELS",
           "LABEL_MEMBERS", "LabelMember", "MAX_PIXELS", "N_COMMANDS", "PICKLE_SUFFIXES",
           "ROAD_OPTIONS", "RoadOption", "SCHEMA_VERSION", "SampleSpec", "SchemaError",
           "check_members", "check_recorded_sizes", "codec_for", "codec_named", "decode_labels", "decode_member",
           "encode_sample", "make_key", "validate_sample"]
