"""The codec classes and the registry dict: one class per member kind, the only way members
are encoded and decoded. This module imports no modality: the kinds (carla_wds.modalities) and
the dataset-named codecs (carla_wds.datasets) import it and register theirs; carla_wds.codecs
imports all three bottom-up and is where readers look codecs up (the complete table).

Like Mosaic Streaming's `streaming/base/format/mds/encodings.py`: a codec has a `name`, which
the manifest records for each member, `encode(value) -> bytes`, `decode(bytes) -> value`, and
a cheap structural `check(bytes) -> problem | None` that catches truncation without decoding.
The packer, the loader, `verify --deep` and `inspect` all reach members through `CODECS`, so a
new modality is one file in carla_wds/modalities/ (its Codec subclass, registered there) plus
one row of that package's table.
"""
from __future__ import annotations

import functools
import io
import json
import math
import re
import sys
from dataclasses import dataclass, fields, replace
from typing import Any, ClassVar

import cv2
import numpy as np

from . import limits
from .imagesize import (PNG_SIG, ImageHeaderError, check_size, image_size, npy_header,
                        npy_header_end)
from .limits import LimitError

try:  # pyspng decodes PNG ~1.3x faster than cv2 here; optional ([fast] extra)
    import pyspng
except ImportError:  # pragma: no cover - depends on the environment
    pyspng = None

# Members that would go through pickle in webdataset's default decoders: never decoded here.
PICKLE_SUFFIXES = ("pth", "pt", "pyd", "pickle", "pkl")
PNG_END = b"\x00\x00\x00\x00IEND\xaeB`\x82"
Data = bytes | memoryview


class SchemaError(ValueError):
    """Data that does not match the schema; the message names the sample and member.

    `reason` and `fix` are kept apart so that callers re-word an error from its parts, never
    by parsing its text."""

    def __init__(self, reason: str, fix: str | None = None) -> None:
        super().__init__(f"{reason}. Fix: {fix}" if fix else reason)
        self.reason, self.fix = reason, fix

    def __reduce__(self):   # both parts survive the pipe from a pack worker process
        return type(self), (self.reason, self.fix)


class Codec:
    """One member kind. Subclasses set `name` (recorded in the manifest) and override
    encode/decode/check; options (JPEG quality) are dataclass fields, set by `with_options`."""
    name: ClassVar[str] = ""

    def encode(self, value: Any) -> bytes:
        raise NotImplementedError

    def decode(self, data: Data) -> Any:
        raise NotImplementedError

    def check(self, data: Data) -> str | None:
        """Why `data` is not a whole member of this kind (cheap, no full decode), or None."""
        return None

    def with_options(self, **options: Any) -> Codec:
        """This codec with the options it takes (e.g. quality); others do not apply to it."""
        names = {f.name for f in fields(self)} if hasattr(self, "__dataclass_fields__") else ()
        mine = {k: v for k, v in options.items() if k in names}
        return replace(self, **mine) if mine else self


# OpenCV >= 4.10 decodes to RGB itself (the same pixels as BGR then cvtColor: tested), 0.2 ms
# less per 1600x900 JPEG here; older ones convert after
_IMREAD_RGB = getattr(cv2, "IMREAD_COLOR_RGB", None)


@dataclass(frozen=True)
class ImageCodec(Codec):
    """Camera images: bytes pass through verbatim, arrays (uint8 HWC RGB) are encoded; decode
    gives uint8 HWC RGB, never through float (the seed's black images)."""
    ext: ClassVar[str] = ""

    def encode(self, value: Any) -> bytes:
        if isinstance(value, (bytes, bytearray, memoryview)):
            return bytes(value)   # passthrough: the source file's bytes, unchanged
        ok, buf = cv2.imencode("." + self.ext, cv2.cvtColor(np.asarray(value), cv2.COLOR_RGB2BGR),
                               self._flags())
        if not ok:
            raise SchemaError(f"cv2 could not encode a {self.ext} image")
        return buf.tobytes()

    def _flags(self) -> list[int]:
        return []

    def decode(self, data: Data) -> np.ndarray:
        bounded_image(data)
        if pyspng is not None and data[:8] == PNG_SIG:
            try:
                img = pyspng.load(bytes(data))   # it takes bytes only (shards give memoryviews)
            except Exception:  # noqa: BLE001 - pyspng raises plain Exception on bad data
                img = None
            # 8-bit RGB only; gray, RGBA and 16-bit PNGs go through cv2, which normalises them.
            if img is not None and img.ndim == 3 and img.shape[2] == 3 and img.dtype == np.uint8:
                return img
        if _IMREAD_RGB is not None:   # decoded as RGB (libjpeg's own order): no conversion
            img = cv2.imdecode(np.frombuffer(data, np.uint8), _IMREAD_RGB)
            if img is None:
                raise SchemaError("image bytes do not decode")
            return img
        img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
        if img is None:
            raise SchemaError("image bytes do not decode")
        return cv2.cvtColor(img, cv2.COLOR_BGR2RGB)

    def pixels(self, data: Data) -> np.ndarray:
        """The decoded pixels, possibly a read-only view of `data` (the raw codec's), for a
        caller that copies them at once (the loader's resize into its batch slot)."""
        return self.decode(data)

    def size(self, data: Data) -> tuple[int, int]:
        """(H, W) from the header, without decoding (raises ImageHeaderError)."""
        return image_size(data)

    def check_size(self, data: Data, expected: tuple[int, int] | None,
                   max_pixels: int) -> tuple[int, int]:
        """The header's (H, W), refused (ImageHeaderError) unless it is `expected` (when known)
        and within max_pixels: checked before any decoder allocates memory."""
        return check_size(data, expected, max_pixels)


def bounded_image(data: Data, expected: tuple[int, int] | None = None) -> tuple[int, int]:
    """(H, W) from the header, before any decoder allocates: LimitError (image_pixels) for a
    decompression bomb, SchemaError for a header that gives no size or not `expected`."""
    try:
        return check_size(data, expected, limits.active().image_pixels)
    except LimitError:
        raise
    except ImageHeaderError as exc:
        raise SchemaError(f"image refused before decoding: {exc}") from None


def image_problem(data: Data) -> str | None:
    """bounded_image's refusal as a check() problem, or None."""
    try:
        bounded_image(data)
    except ValueError as exc:   # LimitError and SchemaError alike
        return str(exc)
    return None


@dataclass(frozen=True)
class PngCodec(ImageCodec):
    name: ClassVar[str] = "png"
    ext: ClassVar[str] = "png"

    def check(self, data: Data) -> str | None:
        head, tail = bytes(data[:16]), bytes(data[-len(PNG_END):])
        if not head.startswith(PNG_SIG) or head[12:16] != b"IHDR":
            return "not a PNG (bad signature or IHDR); expected a PNG file"
        if tail != PNG_END:
            return "truncated PNG (no IEND chunk at the end); expected a complete PNG file"
        return image_problem(data)


@dataclass(frozen=True)
class JpegCodec(ImageCodec):
    name: ClassVar[str] = "jpg"
    ext: ClassVar[str] = "jpg"
    quality: int = 95

    def _flags(self) -> list[int]:
        return [cv2.IMWRITE_JPEG_QUALITY, self.quality]

    def check(self, data: Data) -> str | None:
        # some writers pad a JPEG with zeros after its end-of-image marker
        whole = bytes(data)
        if not (whole.startswith(b"\xff\xd8") and whole.rstrip(b"\x00").endswith(b"\xff\xd9")):
            return "truncated or non-JPEG data; expected a complete JPEG file"
        return image_problem(data)


class NpyCodec(Codec):
    """Arrays as np.save writes them, read with allow_pickle=False: an object array is refused,
    never unpickled. Headers are cached both ways: building one per label array was a tenth of
    the pack's time, and np.load parses every header with ast (a tenth of the loader's)."""
    name: ClassVar[str] = "npy"

    def __init__(self) -> None:
        self._headers: dict[bytes, tuple[np.dtype, tuple[int, ...], bool]] = {}

    def bound(self, shape: tuple[int, ...], dtype: np.dtype) -> None:
        """LimitError unless an array of this header is within the limits (array_bytes);
        called with the header alone, before anything is allocated."""
        check_npy_bytes(shape, dtype)

    def encode(self, value: Any) -> bytes:
        arr = np.asarray(value)
        if arr.dtype.hasobject:
            raise SchemaError(f"refusing to store an object array ({arr.dtype}) as .npy")
        if not arr.flags.c_contiguous:   # np.save writes these in Fortran order or copies them
            buf = io.BytesIO()
            np.save(buf, arr, allow_pickle=False)
            return buf.getvalue()
        return _npy_header(arr.dtype.str, arr.shape) + arr.tobytes()

    def decode(self, data: Data) -> np.ndarray:
        end = npy_header_end(data)
        known = self._headers.get(bytes(data[:end])) if end else None
        if known is None:
            shape, _, dtype, _ = npy_header(data)
            self.bound(shape, dtype)
            arr = np.load(io.BytesIO(data), allow_pickle=False)
            if end and not arr.dtype.hasobject and len(self._headers) < 256:
                self._headers[bytes(data[:end])] = (
                    arr.dtype, arr.shape, arr.flags.f_contiguous and not arr.flags.c_contiguous)
            return arr
        dtype, shape, fortran = known
        self.bound(shape, dtype)   # the limits may have changed since it was cached
        arr = np.frombuffer(data, dtype, count=int(np.prod(shape)), offset=end).copy()
        return arr.reshape(shape, order="F" if fortran else "C")

    def check(self, data: Data) -> str | None:
        """The header parses (no pickle) and the data after it is exactly what it declares."""
        try:
            shape, _, dtype, offset = npy_header(data)
            if not dtype.hasobject:
                self.bound(shape, dtype)
        except LimitError as exc:
            return str(exc)
        except ValueError as exc:
            return f"not an .npy array ({exc}); expected np.save's format"
        if dtype.hasobject:
            return f"an object array ({dtype}), which only pickle could read; refused"
        want = offset + dtype.itemsize * math.prod(shape)
        if len(data) != want:
            return (f"{len(data)} bytes, its header declares {want} ({shape} {dtype}); "
                    "expected a complete .npy file")
        return None


def check_npy_bytes(shape: tuple[int, ...], dtype: np.dtype, what: str = ".npy") -> int:
    """The bytes an array of this header holds, refused (LimitError, array_bytes) when over
    the limit: checked from the header, before np.load allocates them."""
    nbytes = math.prod(shape) * dtype.itemsize
    lim = limits.active()
    if nbytes > lim.array_bytes:   # the message only then: a structured dtype's str is slow
        lim.check("array_bytes", nbytes,
                  f"the size (bytes) an {what} header declares ({shape} {dtype})")
    return nbytes


@functools.lru_cache(maxsize=256)
def _npy_header(dtype: str, shape: tuple[int, ...]) -> bytes:
    buf = io.BytesIO()
    empty = np.zeros(shape, np.dtype(dtype))
    np.save(buf, empty, allow_pickle=False)
    return buf.getvalue()[:buf.tell() - empty.nbytes]


class JsonCodec(Codec):
    """UTF-8 JSON with sorted keys and no spaces, so equal values give equal bytes."""
    name: ClassVar[str] = "json"

    def encode(self, value: Any) -> bytes:
        return json.dumps(value, sort_keys=True, separators=(",", ":")).encode("utf-8")

    def decode(self, data: Data) -> Any:
        return json_loads(bytes(data))

    def check(self, data: Data) -> str | None:
        """Parses whole (a document cut inside a bare number, "3.5" to "3", still parses)."""
        try:
            self.decode(data)
        except LimitError as exc:
            return str(exc)
        except ValueError as exc:   # json and utf-8 errors alike
            return f"not UTF-8 JSON ({exc}); expected a complete JSON document"
        return None


# a JSON string, escapes included (unrolled: linear time); and every byte but []{}
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_DEPTH_CHUNK = 1 << 20


def json_depth(raw: bytes) -> int:
    """The deepest nesting of [ and { outside strings, by a linear scan (json's parser is
    recursive: too deep a document raises RecursionError, which names no file and escapes
    handlers of ValueError)."""
    return _depth(_JSON_STRING.sub(b"", raw))


def _depth(bare: bytes) -> int:
    """The walk of opens and closes in chunks: one int64 a bracket at once was 1.4 GB for
    256 MiB of `{},`."""
    steps, deepest, level = bare.translate(None, _NOT_BRACKETS), 0, 0
    for at in range(0, len(steps), _DEPTH_CHUNK):
        chunk = np.frombuffer(steps, np.uint8, min(_DEPTH_CHUNK, len(steps) - at), at)
        opens = (chunk == ord("[")) | (chunk == ord("{"))
        walk = np.cumsum(np.where(opens, 1, -1), dtype=np.int64) + level
        deepest, level = max(deepest, int(walk.max())), int(walk[-1])
    return deepest


def json_values(raw: bytes) -> int:
    """An upper bound of the values (dicts, lists, strings, numbers, keys, literals) that JSON
    text parses to, in C speed: every value but the outermost follows its own `[`, `,` or `:`
    and every key its own `{` or `,`, so there are at most 1 + their count. Counted in the
    text as it is (brackets inside strings too: only more); json_loads counts outside strings
    only when this is over the limit. The same holds for the part parsed before an error, so
    a malformed document cannot build more either."""
    return 1 + sum(raw.count(c) for c in b"[{,:")


def json_loads(raw: bytes, name: str | None = None) -> Any:
    """UTF-8 JSON bytes -> value, bounded: LimitError over json_bytes, json_depth or
    json_values (checked from the text before parsing: `{},` is 3 bytes of text and a 64-byte
    dict), ValueError for malformed JSON or UTF-8. `name` (a file, a member) starts the
    LimitError's message; the one reader of JSON that a file supplies."""
    lim, of = limits.active(), f"{name}: " if name else ""
    lim.check("json_bytes", len(raw), f"{of}a JSON document's size (bytes)")
    opens = raw.count(b"[") + raw.count(b"{")
    values = json_values(raw)
    if opens > lim.json_depth or values > lim.json_values:   # else neither can be over
        bare = _JSON_STRING.sub(b"", raw)   # structure outside strings only
        lim.check("json_values", json_values(bare), f"{of}the values a JSON document would "
                  "parse to (at most 1 + its '[', '{', ',' and ':' outside strings)")
        lim.check("json_depth", _depth(bare), f"{of}the nesting depth of a JSON document")
    try:
        return json.loads(raw.decode("utf-8"))
    except RecursionError:   # json_depth raised beyond what this interpreter's stack allows
        raise LimitError(f"{of}the nesting depth of a JSON document", sys.getrecursionlimit(),
                         "json_depth", lim.json_depth) from None


class RecordCodec(NpyCodec):
    """A structured 0-d .npy (named fields of fixed dtypes and shapes: the measurements
    record). np.save keeps the field names, which NpyCodec's cached header would drop. Read
    as NpyCodec reads: each distinct header parsed once (with allow_pickle=False), then the
    cached structured dtype, names and all (np.load's ast parse of the header was 0.26 ms of
    TCP's 3 ms per sample)."""
    name: ClassVar[str] = "record"

    def encode(self, value: Any) -> bytes:
        arr = np.asarray(value)
        if arr.dtype.names is None or arr.dtype.hasobject:
            raise SchemaError(f"a record needs a structured dtype without objects, got {arr.dtype}")
        buf = io.BytesIO()
        np.save(buf, arr, allow_pickle=False)
        return buf.getvalue()


CODECS: dict[str, Codec] = {}


def register(codec: Codec) -> Codec | None:
    """Make `codec` the one named codec.name; returns the codec it replaces, if any."""
    if not codec.name or codec.name.lower() in PICKLE_SUFFIXES:
        raise SchemaError(f"codec name {codec.name!r} refused: carla-wds never stores or "
                          "decodes pickles", fix="name the codec after its own format")
    previous = CODECS.get(codec.name)
    CODECS[codec.name] = codec
    return previous


for _codec in (PngCodec(), JpegCodec(), NpyCodec(), JsonCodec(), RecordCodec()):
    register(_codec)


__all__ = ["CODECS", "Codec", "ImageCodec", "ImageHeaderError", "JpegCodec", "JsonCodec",
           "LimitError", "NpyCodec", "PICKLE_SUFFIXES", "PngCodec", "RecordCodec", "SchemaError",
           "bounded_image", "check_npy_bytes", "image_problem", "json_loads", "json_values",
           "npy_header",
           "register"]
