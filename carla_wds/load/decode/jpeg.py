"""JPEG decode at a reduced DCT scale: when the output is at most 1/2, 1/4 or 1/8 of the source
on both axes, libjpeg's scaled IDCT (cv2.IMREAD_REDUCED_COLOR_2/4/8) decodes straight to that
scale, skipping most of the inverse DCT and colour conversion work, and a resize covers the
rest. Bench2Drive's 1600x900 cameras loaded at 400x224 decode at 1/4 (docs/benchmarks.md has
the cost against a full decode + resize). `exact_resize=True` on the loader turns it off, for
pixels identical to a full decode + resize.
"""
from __future__ import annotations

import cv2
import numpy as np

from ...codecs import SchemaError

_REDUCED = ((8, cv2.IMREAD_REDUCED_COLOR_8), (4, cv2.IMREAD_REDUCED_COLOR_4),
            (2, cv2.IMREAD_REDUCED_COLOR_2))


def reduction(source_hw: tuple[int, int], out_hw: tuple[int, int]) -> int:
    """The largest factor in 8, 4, 2 with out <= source / factor on both axes, else 1. The
    factor must divide both sides: libjpeg gives ceil(side / factor) pixels, so otherwise the
    last one would cover padding and the image would no longer be an exact 1/factor scale of
    the source (a camera's intrinsics, scaled for the output size, would be off by up to a
    pixel). 1600x900 -> 224x400 is 4; 900 is not a multiple of 8."""
    for factor, _ in _REDUCED:
        if (out_hw[0] * factor <= source_hw[0] and out_hw[1] * factor <= source_hw[1]
                and source_hw[0] % factor == 0 and source_hw[1] % factor == 0):
            return factor
    return 1


def decode_reduced(data: bytes | memoryview, source_hw: tuple[int, int],
                   out_hw: tuple[int, int]) -> np.ndarray | None:
    """uint8 HWC RGB of a JPEG decoded at the largest DCT scale that still covers out_hw
    (libjpeg gives ceil(source / factor) pixels); None when no reduction applies."""
    factor = reduction(source_hw, out_hw)
    if factor == 1:
        return None
    flag = dict(_REDUCED)[factor]
    img = cv2.imdecode(np.frombuffer(data, np.uint8), flag)
    if img is None:
        raise SchemaError("image bytes do not decode")
    return cv2.cvtColor(img, cv2.COLOR_BGR2RGB)


__all__ = ["decode_reduced", "reduction"]
