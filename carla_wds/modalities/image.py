"""Camera images (`rgb`): uint8 HWC RGB per camera, stacked into `batch.images`
(B, n_cameras, 3, H, W), resized linearly to the loader's size. The codecs are the base
classes' PNG and JPEG (carla_wds.codecbase, which registers them with the other base formats)
and `raw` here: the image decoded once at pack time (`pack --image-format raw`) and stored as
one uint8 (H, W, 3) .npy array, which the loader reads with no image decode at all (larger
shards for less decode CPU: docs/packing.md has the measured sizes).
"""
from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..codecbase import (Data, ImageCodec, ImageHeaderError, SchemaError, bounded_image,
                         check_npy_bytes, image_problem)
from ..imagesize import raw_image_header
from .base import CodecUse, Modality


@dataclass(frozen=True)
class RawImageCodec(ImageCodec):
    """A camera image stored decoded: np.save's format of one uint8 (H, W, 3) RGB array in C
    order, written with allow_pickle=False. Its header is the image header every size check
    reads (imagesize.raw_image_header): shape and dtype are checked against it, and its H, W
    against the manifest's recorded size and the image_pixels limit, before anything is
    read. The pixels are the ones the source codec's own decode gave at pack time (the pack
    decodes through ImageCodec.decode, as the loader does), so a raw pack serves the same
    pixels as the png/jpg pack it was made from (at a JPEG's reduced-DCT loads, the same
    pixels as `exact_resize=True`)."""
    name: ClassVar[str] = "raw"
    ext: ClassVar[str] = "raw"

    def encode(self, value: Any) -> bytes:
        if isinstance(value, (bytes, bytearray, memoryview)):   # already a raw member
            problem = self.check(value)
            if problem:
                raise SchemaError(f"raw image bytes refused: {problem}")
            return bytes(value)
        arr = np.asarray(value)
        if arr.ndim != 3 or arr.shape[2] != 3 or arr.dtype != np.uint8:
            raise SchemaError(f"a raw image must be uint8 (H, W, 3) RGB, got {arr.dtype} "
                              f"{arr.shape}")
        return _npy_bytes(np.ascontiguousarray(arr))

    def pixels(self, data: Data) -> np.ndarray:
        """A read-only (H, W, 3) view of the pixels in `data`, valid while `data` is: no
        decode and no copy. Bounded first (image_pixels, array_bytes), by the header alone."""
        h, w = bounded_image(data)
        _, _, offset = raw_image_header(data)
        check_npy_bytes((h, w, 3), np.dtype(np.uint8), "raw image")
        if len(data) != offset + h * w * 3:
            raise SchemaError(f"a raw image of {len(data)} bytes; its header declares "
                              f"{offset + h * w * 3} ({h}x{w}x3 uint8)",
                              fix="re-pack the shard")
        return np.frombuffer(data, np.uint8, count=h * w * 3, offset=offset).reshape(h, w, 3)

    def decode(self, data: Data) -> np.ndarray:
        return self.pixels(data).copy()

    def check(self, data: Data) -> str | None:
        try:
            h, w, offset = raw_image_header(data)
        except ImageHeaderError as exc:
            return f"{exc}; expected a raw image (.npy uint8 H x W x 3)"
        if len(data) != offset + h * w * 3:
            return (f"{len(data)} bytes, its header declares {offset + h * w * 3} "
                    f"({h}x{w}x3 uint8); expected a complete raw image")
        return image_problem(data)


def _npy_bytes(arr: np.ndarray) -> bytes:
    """np.save's bytes of a C-contiguous uint8 array (never a pickle)."""
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


KIND_CODECS = (RawImageCodec(),)
RGB = Modality("rgb", "uint8", (), "", resize="linear", collate="cameras", batch="images",
               codecs=(CodecUse("png", "uint8", (), ""), CodecUse("jpg", "uint8", (), ""),
                       CodecUse("raw", "uint8", (), "")),
               doc="cameras (B, n_cameras, 3, H, W) uint8")
__all__ = ["KIND_CODECS", "RGB", "RawImageCodec"]
