"""PNG helpers shared by the image-like kinds (depth, semantics, instance, BEV): bytes pass
through unchanged on encode (the packer never re-encodes what the expert wrote), arrays are
encoded only for synthetic writers and tests, and `check` reads headers and trailers only.
"""
from __future__ import annotations

from typing import Any

import cv2
import numpy as np

from ..codecbase import Data, PngCodec, SchemaError, bounded_image

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


__all__ = ["gray_u8", "imdecode", "imencode", "is_bytes", "named_problem", "png_problem"]
