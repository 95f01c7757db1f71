"""Depth: per-camera depth images, decoded to float32 (H,W) metres, resized linearly.

| codec            | stored as                                          | decoded to               |
|------------------|----------------------------------------------------|--------------------------|
| `depth_carla24`  | 8-bit RGB PNG, CARLA's 24-bit normalised depth     | float32 (H,W) m, 0..1000 |
| QuantizedDepth   | 8-bit gray PNG, metres in 256 steps to full_scale  | float32 (H,W) m,         |
|                  | (each dataset registers its own by name)           | 0..full_scale            |

Sources: transfuser@22b3ccd team_code_autopilot/data_agent.py save_sensors and
team_code_transfuser/data.py get_depth (24-bit); the 8-bit ones are each dataset's, cited in
carla_wds/datasets/.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import cv2
import numpy as np

from ..codecbase import Codec, Data, SchemaError
from .base import CodecUse, Modality
from .pngs import imdecode, imdecode_rgb, imencode, is_bytes, named_problem

_DEPTH24_SCALE = 1000.0 / (2 ** 24 - 1)     # CARLA: normalised 24-bit depth times 1000 m


def depth_metres(value: Any) -> np.ndarray:
    """A depth array to encode as float64 (H,W) metres, all finite; SchemaError otherwise."""
    metres = np.asarray(value, np.float64)
    if metres.ndim != 2 or not np.isfinite(metres).all():
        raise SchemaError(f"depth array has shape {metres.shape} or non-finite values; "
                          "expected finite float (H,W) metres")
    return metres


class DepthCarla24Codec(Codec):
    """CARLA's 24-bit depth as an RGB PNG. TransFuser 2022's agent swaps CARLA's BGR to RGB
    once before cv2.imwrite, so the file's red channel holds the high byte and cv2.imdecode's
    BGR array is CARLA's own (R, G, B) order: metres = (c0 + 256 c1 + 65536 c2) / (2^24 - 1)
    * 1000, which is what its data.py computes after its own BGR2RGB with weights
    [65536, 256, 1]."""
    name: ClassVar[str] = "depth_carla24"
    interpolation: ClassVar[int] = cv2.INTER_LINEAR

    def encode(self, value: Any) -> bytes:
        if is_bytes(value):
            return bytes(value)
        metres = depth_metres(value)
        code = np.rint(np.clip(metres / _DEPTH24_SCALE, 0, 2 ** 24 - 1)).astype(np.uint32)
        bgr = np.stack([code & 255, (code >> 8) & 255, code >> 16], -1).astype(np.uint8)
        return imencode(bgr, "depth")

    def decode(self, data: Data) -> np.ndarray:
        # the file's (R, G, B) is cv2's (c2, c1, c0): the code's high, middle and low byte,
        # put together in integers, then float32 (exact below 2^24, as the float32 sum was)
        high, mid, low = cv2.split(imdecode_rgb(data, "depth"))
        code = high.astype(np.int32) << 16
        code |= mid.astype(np.int32) << 8
        code |= low
        metres = code.astype(np.float32)
        metres *= np.float32(_DEPTH24_SCALE)
        return metres

    def check(self, data: Data) -> str | None:
        return named_problem(data, 2, "3-channel 24-bit CARLA depth", "depth")


@dataclass(frozen=True)
class QuantizedDepthCodec(Codec):
    """Depth as an 8-bit gray PNG: value v is v * full_scale / 255 metres. `rounding` is how
    the writer quantised metres: "half_up" is (clip(d / full_scale, 0, 1) * 255 + 0.5) cast
    to uint8; "even" is clip(rint(d * 255 / full_scale), 0, 255) (OpenCV writing float metres
    as uint8 rounds half to even and saturates). A dataset's codec is an instance with its
    own `name` (recorded in manifests) and `expected` (its check() message)."""
    name: str = ""
    full_scale: float = 255.0
    rounding: str = "even"
    expected: str = "1-channel 8-bit depth"
    interpolation: ClassVar[int] = cv2.INTER_LINEAR

    def encode(self, value: Any) -> bytes:
        if is_bytes(value):
            return bytes(value)
        metres = depth_metres(value)
        if self.rounding == "half_up":
            v = (np.clip(metres / self.full_scale, 0, 1) * 255.0 + 0.5).astype(np.uint8)
        else:
            step = self.full_scale / 255.0
            v = np.clip(np.rint(metres / step), 0, 255).astype(np.uint8)
        return imencode(v, "depth")

    def decode(self, data: Data) -> np.ndarray:
        v = imdecode(data, "depth", 1)
        return v.astype(np.float32) * np.float32(self.full_scale / 255.0)

    def check(self, data: Data) -> str | None:
        return named_problem(data, 0, self.expected, "depth")


DEPTH = Modality("depth", "float32", (), "m", resize="linear", batch="depth",
                 per_camera="depth", codecs=(CodecUse("depth_carla24", "float32", (), "m"),),
                 doc="per-camera depth in metres, (B, n, H, W) at the camera size")
KIND_CODECS = (DepthCarla24Codec(),)

__all__ = ["DEPTH", "DepthCarla24Codec", "QuantizedDepthCodec", "depth_metres"]
