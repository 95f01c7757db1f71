"""Codecs for Bench2Drive's per-camera PNGs (Bench2Drive@0.0.4 tools/data_collect.py save,
tools/utils.py convert_depth; CARLA 0.9.15). Bytes pass through on encode, as for every
modality; arrays are encoded only for synthetic writers and tests.

| codec        | stored as                                                  | decoded to           |
|--------------|------------------------------------------------------------|----------------------|
| `depth_b2d8` | 8-bit gray PNG: cv2.imwrite of float metres, i.e. whole    | float32 (H,W) metres |
|              | metres saturated at 255 (Thinklab-SJTU/Bench2Drive#190)    | 0..255               |
| `instance`   | 8-bit BGRA PNG of CARLA's instance camera: R = class tag,  | uint8 (H,W,3): tag,  |
|              | G and B = the instance id                                  | G, B                 |
"""
from __future__ import annotations

from typing import Any, ClassVar

import cv2
import numpy as np

from .codecs import Codec, Data, SchemaError, register
from .modalities import _imdecode, _imencode, _is_bytes, _png_problem, depth_metres


class DepthB2D8Codec(Codec):
    """A Bench2Drive depth PNG: OpenCV wrote float metres as uint8 (rounded, saturated), so
    a pixel's value is its depth in whole metres, 255 meaning 255 m or more."""
    name: ClassVar[str] = "depth_b2d8"
    interpolation: ClassVar[int] = cv2.INTER_LINEAR

    def encode(self, value: Any) -> bytes:
        if _is_bytes(value):
            return bytes(value)
        metres = depth_metres(value)
        return _imencode(np.clip(np.rint(metres), 0, 255).astype(np.uint8), "depth")

    def decode(self, data: Data) -> np.ndarray:
        return _imdecode(data, "depth", 1).astype(np.float32)

    def check(self, data: Data) -> str | None:
        problem = _png_problem(data, 0, "1-channel 8-bit depth in metres")
        return problem and problem.replace("PNG has", "depth PNG has", 1)


class InstanceCodec(Codec):
    """A CARLA instance-segmentation PNG as Bench2Drive writes it (the camera's BGRA buffer):
    decoded to (H,W,3) uint8 of (class tag, G, B); alpha is always 255 and dropped. Resized
    nearest-neighbour only, like class ids."""
    name: ClassVar[str] = "instance"
    interpolation: ClassVar[int] = cv2.INTER_NEAREST

    def encode(self, value: Any) -> bytes:
        if _is_bytes(value):
            return bytes(value)
        arr = np.asarray(value)
        if arr.ndim != 3 or arr.shape[2] != 4 or arr.dtype != np.uint8:
            raise SchemaError(f"instance array is {arr.dtype} {arr.shape}; expected uint8 "
                              "(H,W,4) BGRA")
        return _imencode(arr, "instance")

    def decode(self, data: Data) -> np.ndarray:
        bgra = _imdecode(data, "instance", 4)
        return np.ascontiguousarray(bgra[..., [2, 1, 0]])

    def check(self, data: Data) -> str | None:
        problem = _png_problem(data, 6, "4-channel BGRA instance segmentation")
        return problem and problem.replace("PNG has", "instance PNG has", 1)


for _codec in (DepthB2D8Codec(), InstanceCodec()):
    register(_codec)
