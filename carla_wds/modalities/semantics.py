"""Semantics and instance segmentation: per-camera class ids, never blended (resized
nearest-neighbour only).

| codec       | stored as                                                  | decoded to            |
|-------------|------------------------------------------------------------|-----------------------|
| `semantics` | 8-bit gray PNG of CARLA class ids                          | uint8 (H,W)           |
| `instance`  | 8-bit BGRA PNG of CARLA's instance camera: R = class tag,  | uint8 (H,W,3): tag,   |
|             | G and B = the instance id                                  | G, B                  |

Sources: CARLA 0.9.15's semantic and instance cameras as the recorders save them
(Bench2Drive@0.0.4 tools/data_collect.py save writes the instance camera's BGRA buffer).
"""
from __future__ import annotations

from typing import Any, ClassVar

import cv2
import numpy as np

from ..codecbase import Codec, Data, SchemaError
from .base import CodecUse, Modality
from .pngs import gray_u8, imdecode, imencode, is_bytes, named_problem


class SemanticsCodec(Codec):
    """Camera semantics: CARLA class ids as an 8-bit gray PNG."""
    name: ClassVar[str] = "semantics"
    interpolation: ClassVar[int] = cv2.INTER_NEAREST   # class ids must never be blended

    def encode(self, value: Any) -> bytes:
        return bytes(value) if is_bytes(value) else imencode(gray_u8(value, "semantics"),
                                                             "semantics")

    def decode(self, data: Data) -> np.ndarray:
        return imdecode(data, "semantics", 1)

    def check(self, data: Data) -> str | None:
        return named_problem(data, 0, "1-channel 8-bit class ids", "semantics")


class InstanceCodec(Codec):
    """A CARLA instance-segmentation PNG as the camera's BGRA buffer is written: decoded to
    (H,W,3) uint8 of (class tag, G, B); alpha is always 255 and dropped. Resized
    nearest-neighbour only, like class ids."""
    name: ClassVar[str] = "instance"
    interpolation: ClassVar[int] = cv2.INTER_NEAREST

    def encode(self, value: Any) -> bytes:
        if is_bytes(value):
            return bytes(value)
        arr = np.asarray(value)
        if arr.ndim != 3 or arr.shape[2] != 4 or arr.dtype != np.uint8:
            raise SchemaError(f"instance array is {arr.dtype} {arr.shape}; expected uint8 "
                              "(H,W,4) BGRA")
        return imencode(arr, "instance")

    def decode(self, data: Data) -> np.ndarray:
        bgra = imdecode(data, "instance", 4)
        return np.ascontiguousarray(bgra[..., [2, 1, 0]])

    def check(self, data: Data) -> str | None:
        return named_problem(data, 6, "4-channel BGRA instance segmentation", "instance")


SEMANTICS = Modality("semantics", "uint8", (), "class id", resize="nearest", batch="semantics",
                     per_camera="semantic",
                     codecs=(CodecUse("semantics", "uint8", (), "class id"),),
                     doc="per-camera class ids, (B, n, H, W) at the camera size")
INSTANCE = Modality("instance", "uint8", (), "R tag, G/B instance id", resize="nearest",
                    per_camera="instance",
                    codecs=(CodecUse("instance", "uint8", (), "R tag, G/B instance id"),),
                    doc="per-camera (tag, G, B), (B, n, H, W, 3) at the camera size")
SEMANTICS_CODECS = (SemanticsCodec(),)
INSTANCE_CODECS = (InstanceCodec(),)

__all__ = ["INSTANCE", "InstanceCodec", "SEMANTICS", "SemanticsCodec"]
