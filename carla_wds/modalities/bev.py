"""Bird's-eye views: planes of 0/1 masks or one plane of class ids, served as (C,H,W) uint8
and never resized.

| codec         | stored as                                             | decoded to               |
|---------------|-------------------------------------------------------|--------------------------|
| BitPlanes     | 8-bit RGB PNG, up to 15 planes bit-packed, 5 bits in  | uint8 (15,H,W) 0/1       |
|               | each of R, G, B (datasets register theirs by name)    | planes                   |
| `bev_classes` | 8-bit gray PNG of BEV class ids                       | uint8 (1,H,W)            |

Sources: transfuser@22b3ccd team_code_autopilot/utils/map_utils.py encode_npy_to_pil (the bit
packing), carla_garage@1448bed team_code/data_agent.py (bev_semantics class ids).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import cv2
import numpy as np

from ..codecbase import Codec, Data, SchemaError
from .base import CodecUse, Modality
from .pngs import imdecode, imdecode_rgb, imencode, is_bytes, named_problem
from .semantics import SemanticsCodec

BIT_PLANES = 15                             # 5 bits in each of R, G, B


def pack_bit_planes(planes: np.ndarray) -> np.ndarray:
    """encode_npy_to_pil: plane i of 0-4 into bit 7-i of R, 5-9 of G, 10-14 of B; (3,H,W)."""
    bev = np.ceil(np.asarray(planes)).astype(np.uint8)   # the project's own np.ceil
    img = np.zeros((3,) + bev.shape[1:], np.uint8)
    for i in range(min(bev.shape[0], BIT_PLANES)):
        img[i // 5] |= (bev[i] << (7 - i % 5)).astype(np.uint8)
    return img


_SHIFTS = np.arange(7, 2, -1, dtype=np.uint8)[:, None, None]   # bit 7-i for plane i of a byte


def unpack_bit_planes(packed: np.ndarray, file_order: bool = False) -> np.ndarray:
    """pack_bit_planes undone: (H, W, 3) bytes -> uint8 (15, H, W) 0/1, plane 5c + i = bit 7-i
    of channel c (of channel 2 - c with file_order: the PNG's R, G, B, as pyspng gives them,
    are the packing's channels reversed). Written straight into the final layout (one
    contiguous channel from cv2.split shifted into its 5 planes, then one mask over all 15):
    a shift-and-mask over a (5, H, W, 3) array and a transposing copy cost ~11x more on a
    500x500 BEV."""
    packed = np.ascontiguousarray(packed)    # cv2.split needs a plain layout
    if packed.dtype != np.uint8 or packed.ndim != 3 or packed.shape[2] != 3:
        raise SchemaError(f"bit-packed BEV is {packed.dtype} {packed.shape}; expected uint8 "
                          "(H,W,3) bytes")
    planes = np.empty((BIT_PLANES,) + packed.shape[:2], np.uint8)
    channels = cv2.split(packed)
    for c, channel in enumerate(channels[::-1] if file_order else channels):
        np.right_shift(channel[None], _SHIFTS, out=planes[5 * c:5 * c + 5])
    np.bitwise_and(planes, 1, out=planes)
    return planes


@dataclass(frozen=True)
class BitPlanesCodec(Codec):
    """Planes packed by pack_bit_planes, written with cv2.imwrite(moveaxis(img, 0, 2)), so
    cv2's BGR array is (R, G, B) of the packing. Decode gives all 15 planes in packing order.
    A dataset's codec is an instance with its own `name` and `expected` (check() message)."""
    name: str = ""
    expected: str = "3-channel bit-packed BEV"
    interpolation: ClassVar[int] = cv2.INTER_NEAREST

    def encode(self, value: Any) -> bytes:
        if is_bytes(value):
            return bytes(value)
        arr = np.asarray(value)
        if arr.ndim != 3 or not 1 <= arr.shape[0] <= BIT_PLANES:
            raise SchemaError(f"BEV array has shape {arr.shape}; expected (C<=15,H,W) planes")
        if not np.isin(np.ceil(arr), (0, 1)).all():
            raise SchemaError("BEV planes hold values outside [0, 1]; expected 0/1 masks")
        return imencode(np.moveaxis(pack_bit_planes(arr), 0, 2), "BEV")

    def decode(self, data: Data) -> np.ndarray:
        # the file's (R, G, B): the packing's channels 2, 1, 0 (pyspng decodes it faster)
        return unpack_bit_planes(imdecode_rgb(data, "BEV"), file_order=True)

    def check(self, data: Data) -> str | None:
        return named_problem(data, 2, self.expected, "BEV")


class BevClassesCodec(SemanticsCodec):
    """BEV class ids (carla_garage bev_semantics/NNNN.png: 0-10), decoded as one plane
    (1,H,W)."""
    name: ClassVar[str] = "bev_classes"

    def decode(self, data: Data) -> np.ndarray:
        return imdecode(data, "BEV classes", 1)[None]

    def check(self, data: Data) -> str | None:
        return named_problem(data, 0, "1-channel 8-bit BEV class ids", "BEV classes")


BEV = Modality("bev", "uint8", (), "", batch="bev", channel_first=True,
               codecs=(CodecUse("bev_classes", "uint8", (), "class id"),),
               doc="bird's-eye view planes (B, C, H, W), as stored")
KIND_CODECS = (BevClassesCodec(),)

__all__ = ["BEV", "BIT_PLANES", "BevClassesCodec", "BitPlanesCodec", "pack_bit_planes",
           "unpack_bit_planes"]
