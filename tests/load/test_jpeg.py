"""Reduced-DCT JPEG decode: the factor chosen, pixels equal to cv2's IMREAD_REDUCED_* on the
same bytes, and the loader's images with it on (default) and off (exact_resize=True)."""
from __future__ import annotations

import cv2
import numpy as np
import pytest

from carla_wds.load.decode.jpeg import decode_reduced, reduction


@pytest.mark.parametrize(("src", "out", "factor"), [
    ((900, 1600), (224, 400), 4), ((896, 1600), (112, 200), 8), ((900, 1600), (450, 800), 2),
    ((900, 1600), (451, 800), 1), ((900, 1600), (224, 401), 2), ((90, 160), (90, 160), 1),
    ((900, 1600), (100, 800), 2),
    ((900, 1600), (112, 200), 4)])   # 900 is no multiple of 8: an exact 1/8 scale is impossible
def test_the_largest_factor_that_still_covers_the_output(src, out, factor):
    assert reduction(src, out) == factor


def jpeg(h: int, w: int, seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    img = cv2.GaussianBlur(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), (9, 9), 3)
    cv2.rectangle(img, (w // 4, h // 3), (w // 2, h // 2), (30, 30, 220), -1)
    return cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 20])[1].tobytes()


@pytest.mark.parametrize(("out", "flag"), [((224, 400), cv2.IMREAD_REDUCED_COLOR_4),
                                           ((112, 200), cv2.IMREAD_REDUCED_COLOR_8),
                                           ((400, 700), cv2.IMREAD_REDUCED_COLOR_2)])
def test_pixels_equal_cv2_reduced_on_the_same_bytes(out, flag):
    data = jpeg(896, 1600)
    want = cv2.cvtColor(cv2.imdecode(np.frombuffer(data, np.uint8), flag), cv2.COLOR_BGR2RGB)
    got = decode_reduced(data, (896, 1600), out)
    np.testing.assert_array_equal(got, want)
    assert got.shape[0] >= out[0] and got.shape[1] >= out[1]


def test_no_reduction_when_the_output_is_over_half():
    assert decode_reduced(jpeg(90, 160), (90, 160), (60, 100)) is None
