"""Camera images (`rgb`): uint8 HWC RGB per camera, stacked into `batch.images`
(B, n_cameras, 3, H, W), resized linearly to the loader's size. The codecs are the base
classes' PNG and JPEG (carla_wds.codecbase, which registers them with the other base formats).
"""
from __future__ import annotations

from .base import CodecUse, Modality

RGB = Modality("rgb", "uint8", (), "", resize="linear", collate="cameras", batch="images",
               codecs=(CodecUse("png", "uint8", (), ""), CodecUse("jpg", "uint8", (), "")),
               doc="cameras (B, n_cameras, 3, H, W) uint8")
__all__ = ["RGB"]
