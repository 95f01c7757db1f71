"""carla_wds.calib: the intrinsics of a cropped and resized image move a projected point with
the pixels cv2 moves; Bench2Drive's K and projection conventions."""
from __future__ import annotations

import cv2
import numpy as np
import pytest

from carla_wds.calib import carla_matrix, intrinsic, project, resized_intrinsic


def blob_centroid(img: np.ndarray) -> np.ndarray:
    """(u, v) centroid in continuous pixel coordinates (pixel i spans [i, i + 1))."""
    v, u = np.mgrid[:img.shape[0], :img.shape[1]]
    w = img.astype(np.float64)
    return np.array([(w * (u + 0.5)).sum(), (w * (v + 0.5)).sum()]) / w.sum()


@pytest.mark.parametrize(("dst", "crop"), [((225, 400), None), ((120, 200), None),
                                           ((300, 300), (100, 200, 600, 1000)),
                                           ((224, 400), (0, 0, 896, 1600))])
def test_a_point_moves_with_the_pixels(dst, crop):
    k = intrinsic(1600, 900, 70.0)
    cam2ego = carla_matrix(0.8, 0.0, 1.6, 0.0)
    point = np.array([[20.0, 1.5, 0.7]])   # ego frame: ahead, right, up
    u, v, _ = project(point, k, cam2ego)[0]
    img = np.zeros((900, 1600), np.float32)
    # cv2 draws with pixel centres at integers: continuous (u, v) is (u - 0.5, v - 0.5) there
    cv2.circle(img, (int(round((u - 0.5) * 16)), int(round((v - 0.5) * 16))), 16 * 12, 1.0, -1,
               cv2.LINE_AA, 4)
    top, left, h, w = crop or (0, 0, 900, 1600)
    out = cv2.resize(img[top:top + h, left:left + w], dst[::-1], interpolation=cv2.INTER_AREA)
    want = blob_centroid(out)
    got = project(point, resized_intrinsic(k, (900, 1600), dst, crop), cam2ego)[0, :2]
    np.testing.assert_allclose(got, want, atol=0.05)


def test_bench2drive_conventions():
    k = intrinsic(1600, 900, 70.0)
    assert k[0, 2] == 800 and k[1, 2] == 450
    assert k[0, 0] == pytest.approx(800 / np.tan(np.radians(35)))
    cam2ego = carla_matrix(0.8, 0.0, 1.6, 0.0)
    ahead = project(np.array([[10.8, 0.0, 1.6], [10.8, 1.0, 1.6], [10.8, 0.0, 2.6]]), k, cam2ego)
    np.testing.assert_allclose(ahead[0], [800, 450, 10])           # on the optical axis
    assert ahead[1, 0] > 800 and ahead[2, 1] < 450                # right is +u, up is -v
    back = carla_matrix(-2.0, 0.0, 1.6, 180.0)
    assert project(np.array([[-12.0, 0.0, 1.6]]), k, back)[0, 2] == pytest.approx(10.0)
