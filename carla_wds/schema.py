"""The sample schema: the single source of truth for keys, codecs, dtypes and shapes.

The packer encodes through `encode_sample`, the loader decodes through `decode_labels` and `decode_rgb`, and
`carla-wds verify --deep` validates through `validate_sample`, so the three cannot drift apart.
Like Mosaic Streaming's codec registry, every member suffix maps to one codec used both ways.
"""
from __future__ import annotations

import functools
import io
import json
import re
from dataclasses import dataclass
from typing import Any, Callable

import cv2
import numpy as np

try:  # pyspng decodes PNG ~1.3x faster than cv2 here; optional ([fast] extra)
    import pyspng
except ImportError:  # pragma: no cover - depends on the environment
    pyspng = None

SCHEMA_VERSION = 1
CAMERAS = ("front", "rear", "left", "right")
IMAGE_FORMATS = ("png", "jpg")
N_COMMANDS = 6
# CARLA RoadOption values; VOID (and anything below 0) is mapped to LANEFOLLOW as TCP does.
ROAD_OPTIONS = {-1: "VOID", 1: "LEFT", 2: "RIGHT", 3: "STRAIGHT", 4: "LANEFOLLOW",
                5: "CHANGELANELEFT", 6: "CHANGELANERIGHT"}
# Members that would go through pickle in webdataset's default decoders: never decoded here.
PICKLE_SUFFIXES = ("pth", "pt", "pyd", "pickle", "pkl")
LABEL_MEMBERS = ("speed.json", "target_point.npy", "target_command.npy",
                 "waypoints.npy", "waypoints_diff.npy", "meta.json")
_KEY_OK = re.compile(r"^[A-Za-z0-9_\-~+=,@]+$")


class SchemaError(ValueError):
    """A sample that does not match the schema; the message names the sample and member."""


@dataclass(frozen=True)
class Codec:
    encode: Callable[[Any], bytes]
    decode: Callable[[bytes], Any]


def _npy_encode(value: Any) -> bytes:
    """np.save's exact bytes; the header of each (dtype, shape) is made by np.save once, since
    building it for every label array was a tenth of the pack's time."""
    arr = np.asarray(value)
    if arr.dtype.hasobject:
        raise SchemaError(f"refusing to store an object array ({arr.dtype}) as .npy")
    if not arr.flags.c_contiguous:   # np.save writes these in Fortran order or copies them
        buf = io.BytesIO()
        np.save(buf, arr, allow_pickle=False)
        return buf.getvalue()
    return _npy_header(arr.dtype.str, arr.shape) + arr.tobytes()


@functools.lru_cache(maxsize=256)
def _npy_header(dtype: str, shape: tuple[int, ...]) -> bytes:
    buf = io.BytesIO()
    empty = np.zeros(shape, np.dtype(dtype))
    np.save(buf, empty, allow_pickle=False)
    return buf.getvalue()[:buf.tell() - empty.nbytes]


def _npy_decode(data: bytes | memoryview) -> np.ndarray:
    """np.load's array, with headers seen before answered from a cache: np.load parses every
    header with ast (a tenth of the loader's time). allow_pickle=False: an object array in a
    shard is refused, never unpickled."""
    end = _npy_header_end(data)
    known = _NPY_HEADERS.get(bytes(data[:end])) if end else None
    if known is None:
        arr = np.load(io.BytesIO(data), allow_pickle=False)
        if end and not arr.dtype.hasobject and len(_NPY_HEADERS) < 256:
            _NPY_HEADERS[bytes(data[:end])] = (arr.dtype, arr.shape, arr.flags.f_contiguous
                                               and not arr.flags.c_contiguous)
        return arr
    dtype, shape, fortran = known
    count = int(np.prod(shape))
    arr = np.frombuffer(data, dtype, count=count, offset=end).copy()
    return arr.reshape(shape, order="F" if fortran else "C")


_NPY_HEADERS: dict[bytes, tuple[np.dtype, tuple[int, ...], bool]] = {}


def _npy_header_end(data: bytes) -> int:
    """Offset of an .npy's data (after magic, version, header length, header); 0 if unclear."""
    if data[:6] != b"\x93NUMPY" or len(data) < 12:
        return 0
    if data[6] == 1:
        return 10 + int.from_bytes(data[8:10], "little")
    return 12 + int.from_bytes(data[8:12], "little")


def _json_encode(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode("utf-8")


def decode_rgb(data: bytes | memoryview) -> np.ndarray:
    """Image bytes -> uint8 HWC RGB, straight: no float round-trip (the seed's black images)."""
    if pyspng is not None and data[:8] == b"\x89PNG\r\n\x1a\n":
        try:
            img = pyspng.load(bytes(data))   # it takes bytes only (shards give memoryviews)
        except Exception:  # noqa: BLE001 - pyspng raises plain Exception on bad data
            img = None
        # 8-bit RGB only; gray, RGBA and 16-bit PNGs go through cv2, which normalises them.
        if img is not None and img.ndim == 3 and img.shape[2] == 3 and img.dtype == np.uint8:
            return img
    img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    if img is None:
        raise SchemaError("image bytes do not decode")
    return cv2.cvtColor(img, cv2.COLOR_BGR2RGB)


def image_encoder(ext: str, **params: int) -> Callable[[np.ndarray], bytes]:
    flags = [cv2.IMWRITE_JPEG_QUALITY, params.get("quality", 95)] if ext == "jpg" else []

    def encode(rgb: np.ndarray) -> bytes:
        ok, buf = cv2.imencode("." + ext, cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), flags)
        if not ok:
            raise SchemaError(f"cv2 could not encode a {ext} image")
        return buf.tobytes()
    return encode


CODECS: dict[str, Codec] = {
    "npy": Codec(_npy_encode, _npy_decode),
    "json": Codec(_json_encode, lambda b: _json_decode(b)),
    "png": Codec(image_encoder("png"), decode_rgb),
    "jpg": Codec(image_encoder("jpg"), decode_rgb),
}


def codec_for(member: str) -> Codec:
    """The codec of a member name such as `front.png` or `waypoints.npy`."""
    ext = member.rsplit(".", 1)[-1].lower()
    if ext in PICKLE_SUFFIXES:
        raise SchemaError(f"member {member!r} is a pickle; carla-wds never decodes pickles. "
                          "Re-pack with `carla-wds pack`, which stores arrays as .npy")
    if ext not in CODECS:
        raise SchemaError(f"member {member!r} has no codec; known: {sorted(CODECS)}")
    return CODECS[ext]


@dataclass(frozen=True)
class SampleSpec:
    """What every sample of one dataset holds; recorded in and rebuilt from the manifest."""
    cameras: tuple[str, ...]
    pred_len: int
    image_format: str = "png"

    def __post_init__(self) -> None:
        bad = [c for c in self.cameras if c not in CAMERAS]
        if bad or not self.cameras:
            raise SchemaError(f"cameras {list(self.cameras)} invalid; choose from {list(CAMERAS)}")
        if self.image_format not in IMAGE_FORMATS:
            raise SchemaError(f"image_format {self.image_format!r}; expected one of {IMAGE_FORMATS}")
        if self.pred_len < 1:
            raise SchemaError(f"pred_len must be >= 1, got {self.pred_len}")

    @property
    def image_members(self) -> tuple[str, ...]:
        return tuple(f"{c}.{self.image_format}" for c in self.cameras)

    @property
    def members(self) -> tuple[str, ...]:
        return self.image_members + LABEL_MEMBERS

    def shapes(self) -> dict[str, tuple[int, ...]]:
        p = self.pred_len
        return {"target_point.npy": (2,), "target_command.npy": (N_COMMANDS,),
                "waypoints.npy": (p, 2), "waypoints_diff.npy": (p, 2)}


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
                "the dot. Fix: rename the folder, or pack with --dot-replacement _ to map dots")
        name = name.replace(".", dot_replacement)
    key = f"{name}__{frame:04d}"
    if not _KEY_OK.match(key):
        raise SchemaError(f"route {episode!r} gives key {key!r} with characters outside "
                          f"{_KEY_OK.pattern}; rename the folder")
    return key


def encode_sample(spec: SampleSpec, key: str, images: dict[str, bytes],
                  labels: dict[str, Any]) -> dict[str, Any]:
    """Encoded camera bytes + label values -> a webdataset sample dict of bytes."""
    sample: dict[str, Any] = {"__key__": key}
    for cam, member in zip(spec.cameras, spec.image_members):
        sample[member] = images[cam]
    sample["speed.json"] = _json_encode(float(labels["speed"]))
    sample["meta.json"] = _json_encode(labels["meta"])
    for name in ("target_point", "target_command", "waypoints", "waypoints_diff"):
        sample[f"{name}.npy"] = _npy_encode(np.asarray(labels[name], dtype=np.float32))
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


def decode_labels(spec: SampleSpec, raw: dict[str, Any], where: str) -> dict[str, Any]:
    """Decode and shape-check the label members of one raw sample (no images)."""
    out: dict[str, Any] = {}
    for member, shape in spec.shapes().items():
        arr = _decoded(raw, member, _npy_decode, where)
        if arr.shape != shape or arr.dtype != np.float32:
            raise SchemaError(f"{where}: {member} has shape {arr.shape} dtype {arr.dtype}; "
                              f"expected {shape} float32. Re-pack with pred_len={spec.pred_len}")
        out[member.rsplit(".", 1)[0]] = arr
    speed = _decoded(raw, "speed.json", _json_decode, where)
    if not isinstance(speed, (int, float)) or not np.isfinite(speed):
        raise SchemaError(f"{where}: speed.json holds {speed!r}; expected a finite number (m/s)")
    out["speed"] = float(speed)
    out["meta"] = _decoded(raw, "meta.json", _json_decode, where)
    return out


def _json_decode(data: bytes | memoryview) -> Any:
    return json.loads(bytes(data).decode("utf-8"))


def _decoded(raw: dict[str, Any], member: str, decode: Callable[[Any], Any], where: str) -> Any:
    """decode(raw[member]), with a failure named by sample and member (np.load and json
    name neither)."""
    try:
        return decode(raw[member])
    except ValueError as exc:   # np.load, json and utf-8 errors alike
        raise SchemaError(f"{where}: {member} does not decode ({exc}). Fix: re-pack the "
                          "shard") from None


def validate_sample(spec: SampleSpec, raw: dict[str, Any], where: str) -> None:
    """Full check of one raw sample: members, label shapes, images decode with equal sizes."""
    check_members(spec, raw, where)
    labels = decode_labels(spec, raw, where)
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
    for member in spec.image_members:
        try:
            CODECS[spec.image_format].decode(raw[member])
        except SchemaError as exc:
            raise SchemaError(f"{where}: {member}: {exc}") from None
