"""adapter="transfuser2022"'s per-sample parts, computed the short way (issue 26), against
TransFuser 2022's formulas restated here the long way (autonomousvision/transfuser@22b3ccd
team_code_transfuser/data.py): bit for bit, on random inputs and on the edge cases of the short
way (a BEV smaller than the window, ties in the class argmax, depth codes at the clip)."""
from __future__ import annotations

import numpy as np
import pytest
from skimage.transform import rotate

from carla_wds.load.adapters.transfuser2022 import bev_target, depth01, target_point_image

CODES = 2 ** 24 - 1


def _their_bev(planes: np.ndarray, degree: float) -> np.ndarray:
    """load_crop_bev_npy: planes 0:2 as float32 (H, W, 2), moved 7 rows down (zeros on top),
    skimage's rotate by degree (0 too), rows 90..250 and columns 170..330 (5 px/m, 32 m,
    centre 250), argmax over (0, plane 0, plane 0 + plane 1)."""
    hwc = np.moveaxis(planes[:2], 0, -1).astype(np.float32)
    moved = np.zeros_like(hwc)
    moved[7:] = hwc[:-7]
    window = np.moveaxis(rotate(moved, degree)[90:250, 170:330], -1, 0)
    return np.argmax(np.stack([np.zeros_like(window[0]), window[0], window[0] + window[1]]), 0)


@pytest.mark.parametrize("shape, degree", [
    ((500, 500), 0.0), ((500, 500), 9.2), ((500, 500), -17.3), ((500, 500), 20.0),
    ((200, 300), 0.0), ((200, 300), 5.0), ((96, 400), -3.0), ((96, 400), 0.0),
    ((60, 80), 0.0), ((60, 80), 4.0), ((5, 5), 0.0), ((5, 5), 11.0)])
def test_bev_target_is_their_load_crop_bev_npy(shape, degree):
    """Random 0/1 planes as the codec decodes them (15 planes, uint8): the window straight from
    the planes at degree 0, only the window's corner of skimage's rotation otherwise; sizes
    below the window (250 rows, 330 columns) cut the window where theirs does."""
    rng = np.random.default_rng(shape[0] * 1000 + shape[1] + int(degree * 10) % 997)
    planes = (rng.random((15,) + shape) < 0.4).astype(np.uint8)
    planes[:, 100:140, 200:260] = 1                      # a solid block: whole-pixel ties
    got, want = bev_target(planes, degree), _their_bev(planes, degree)
    assert got.dtype == want.dtype == np.int64 and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    if shape == (500, 500):
        assert got.shape == (160, 160) and set(np.unique(got)) == {0, 1, 2}


def test_bev_classes_break_ties_as_argmax():
    """Float planes whose sum ties with plane 0 in float32 (1 + 1e-9 == 1) or beats 0 by a
    denormal-sized margin: the first maximum wins, as np.argmax's."""
    values = np.array([0.0, 1e-9, 1e-30, 0.3, 1.0, 0.5], np.float32)
    p0, p1 = np.meshgrid(values, values)
    planes = np.zeros((2, 500, 500), np.float32)
    planes[0, 83:83 + 6, 170:170 + 6], planes[1, 83:83 + 6, 170:170 + 6] = p0, p1
    got = bev_target(planes, 0.0)
    np.testing.assert_array_equal(got, _their_bev(planes, 0.0))
    assert got[0, 4] == 1 and got[1, 4] == 1      # (p0, p1) = (1, 0) and (1, 1e-9): a tie
    assert got[2, 0] == 2 and got[0, 0] == 0


def test_depth01_is_their_get_depth_on_every_code_kind():
    """rint(metres * (2^24 - 1) / 1000) / (2^24 - 1), clipped at 0.05, times 20, float64: on
    the float32 metres the codec decodes from random codes and the codes at the clip; the
    input (float32 or float64) is left as it was."""
    rng = np.random.default_rng(3)
    codes = np.concatenate([rng.integers(0, CODES + 1, 5000), [0, 1, 838860, 838861, CODES]])
    metres = (codes.astype(np.float32) * np.float32(1000.0 / CODES)).reshape(1, -1)
    for given in (metres, metres.astype(np.float64)):
        before = given.copy()
        want = np.clip(np.rint(np.asarray(given, np.float64) * CODES / 1000.0) / CODES,
                       0.0, 0.05) * 20.0
        got = depth01(given)
        assert got.dtype == np.float64 and got is not given
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(given, before)


def test_target_point_image_is_their_draw_target_point():
    """draw_target_point restated: (x, y + 1.3) * 8 px/m, column 128 + x, row 256 + y, as int32
    clipped to [0, 256], a cv2.circle of radius 5 and thickness 3 in 255, then the uint8
    (1, 256, 256) image as float64 / 255."""
    import cv2
    for point in ([2.0, -20.0], [0.0, -200.0], [-15.9, -0.5], [40.0, 3.0], [0.26, -7.77]):
        x, y = point
        centre = np.clip(np.array([x * 8.0 + 128, 256 - (-(y + 1.3) * 8.0)]).astype(np.int32),
                         0, 256)
        image = np.zeros((256, 256), np.uint8)
        cv2.circle(image, (int(centre[0]), int(centre[1])), 5, (255, 255, 255), 3)
        want = image.reshape(1, 256, 256).astype(np.float64) / 255.0
        got = target_point_image(np.array(point))
        assert got.dtype == np.float64 and got.shape == (1, 256, 256)
        np.testing.assert_array_equal(got, want)
