"""PNG helpers shared by the image-like kinds (depth, semantics, instance, BEV): bytes pass
through unchanged on encode (the packer never re-encodes what the expert wrote), arrays are
encoded only for synthetic writers and tests, and `check` reads headers and trailers only.
"""
from __future__ import annotations

import struct
import zlib
from typing import Any

import cv2
import numpy as np

from ..codecbase import Data, PngCodec, SchemaError, bounded_image

try:  # libspng: 8-bit RGB PNGs ~1.4-2x faster than cv2 here; optional ([fast] extra)
    import pyspng
except ImportError:  # pragma: no cover - depends on the environment
    pyspng = None

_PNG = PngCodec()
_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}   # PNG colour type -> channel count


def is_bytes(value: Any) -> bool:
    return isinstance(value, (bytes, bytearray, memoryview))


def png_problem(data: Data, colour_type: int, expected: str) -> str | None:
    """Whole PNG (signature, IHDR, IEND) of 8 bits per channel and the given colour type."""
    problem = _PNG.check(data)
    if problem is not None or len(data) < 26:
        return problem or "not a PNG (too short for an IHDR); expected a PNG file"
    depth, ctype = data[24], data[25]
    if ctype != colour_type:
        if ctype == 3:
            have = "a palette (colour type 3)"
        else:
            n = _CHANNELS.get(ctype)
            have = f"{n} channel{'s' if n != 1 else ''}" if n else f"colour type {ctype}"
        return f"PNG has {have}; expected {expected}"
    if depth != 8:
        return f"PNG has {depth}-bit samples; expected {expected} at 8 bits"
    return None


def named_problem(data: Data, colour_type: int, expected: str, what: str) -> str | None:
    """png_problem, its message starting with what the PNG holds ("depth PNG has ...")."""
    problem = png_problem(data, colour_type, expected)
    return problem and problem.replace("PNG has", f"{what} PNG has", 1)


def imdecode(data: Data, what: str, channels: int) -> np.ndarray:
    """8-bit pixels of exactly `channels` channels: a BGRA file where BGR is expected is
    refused, not read with its alpha silently dropped. The header's size is bounded first."""
    bounded_image(data)
    img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
    have = None if img is None else (1 if img.ndim == 2 else img.shape[2])
    if img is None or img.dtype != np.uint8 or have != channels:
        shape = None if img is None else f"{img.dtype} {img.shape}"
        raise SchemaError(f"{what} PNG does not decode to 8-bit pixels of {channels} "
                          f"channel{'s' if channels > 1 else ''} ({shape})",
                          fix="re-pack from the source PNG")
    return img


def imdecode_rgb(data: Data, what: str) -> np.ndarray:
    """imdecode(data, what, 3) in the file's (R, G, B) order (cv2's BGR reversed), C-contiguous.
    Through pyspng when it is installed and _spng_safe passes; whatever pyspng refuses or
    gives other than 8-bit RGB goes to cv2, so the pixels and the refusals are imdecode's (but
    for a file whose chunk CRCs are all right and whose zlib adler32 alone is wrong, made so on
    purpose: pyspng checks no adler32 and decodes it as its data says, libpng refuses it)."""
    bounded_image(data)
    img = _spng_rgb8(data) if pyspng is not None and _spng_safe(data) else None
    return img if img is not None else cv2.cvtColor(imdecode(data, what, 3), cv2.COLOR_BGR2RGB)


def _spng_rgb8(data: Data) -> np.ndarray | None:
    """pyspng's 8-bit RGB pixels, or None for an error or any other kind of pixels."""
    try:
        img = pyspng.load(bytes(data))   # it takes bytes only (shards give memoryviews)
    except Exception:  # noqa: BLE001 - pyspng raises plain Exception on bad data
        return None
    return img if img.ndim == 3 and img.shape[2] == 3 and img.dtype == np.uint8 else None


def _spng_safe(data: Data, most: int = 4096) -> bool:
    """Every chunk up to IEND (at most `most`) whole with its CRC right (pyspng checks none,
    libpng refuses a bad one in IDAT), and no tRNS before IDAT (cv2 gives such a file 4
    channels, which imdecode refuses, pyspng 3). Anything else: cv2 decides."""
    view, pos, idat = memoryview(data), 8, False
    for _ in range(most):
        if pos + 12 > len(view):
            return False
        length, kind = struct.unpack_from(">I4s", view, pos)
        end = pos + 8 + length
        if end + 4 > len(view) or zlib.crc32(view[pos + 4:end]) != \
                struct.unpack_from(">I", view, end)[0] or (kind == b"tRNS" and not idat):
            return False
        if kind == b"IEND":
            return True
        idat, pos = idat or kind == b"IDAT", end + 4
    return False


def imencode(img: np.ndarray, what: str) -> bytes:
    ok, buf = cv2.imencode(".png", np.ascontiguousarray(img))
    if not ok:
        raise SchemaError(f"cv2 could not encode a {what} PNG")
    return buf.tobytes()


def gray_u8(value: Any, what: str) -> np.ndarray:
    arr = np.asarray(value)
    if arr.ndim == 3 and arr.shape[0] == 1:   # bev_classes arrays come as (1,H,W)
        arr = arr[0]
    if arr.ndim != 2 or arr.dtype != np.uint8:
        raise SchemaError(f"{what} array is {arr.dtype} {arr.shape}; expected uint8 (H,W)")
    return arr


__all__ = ["gray_u8", "imdecode", "imdecode_rgb", "imencode", "is_bytes", "named_problem",
           "png_problem"]
