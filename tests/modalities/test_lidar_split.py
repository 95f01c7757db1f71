"""The above/below split of lidar_to_histogram_features at the split height, as each project
compares it, on points next to the split written here in float64.

- TransFuser 2022 (transfuser@22b3ccd team_code_transfuser/data.py): the file's points are
  float32; `align` (l.411) multiplies them by a float64 matrix, so `lidar_to_histogram_features`
  (l.446) compares float64 z with -2.3: float32(-2.3) = -2.29999995 is ABOVE.
- carla_garage (@1448bed team_code/data.py l.365, l.896-898): laspy's `.xyz` is float64 (1 mm
  grid plus the frame's minimum as offset), compared with 0.2 in float64. carla-wds holds those
  points as float32 (the LAZ codec's decode), so the test packs real LAZ bytes and checks the
  histogram of carla-wds's float32 points against garage's of laspy's float64 ones.
"""
from __future__ import annotations

import io

import laspy
import numpy as np

from carla_wds.lidar import lidar_to_histogram_features
from carla_wds.modalities import LazCodec
from tests.modalities.test_modalities import _garage_laz


def _splat(xy: np.ndarray, xbins: np.ndarray, ybins: np.ndarray) -> np.ndarray:
    hist = np.histogramdd(xy, bins=(xbins, ybins))[0]
    return np.minimum(hist, 5) / 5


def tf2022_f64(stored: np.ndarray) -> np.ndarray:
    """TF 2022's loader on a stored float32 cloud: y negated, promoted to float64 (align),
    split at z > -2.3 in float64, 8 px/m over x [-16, 16], y [-32, 0], rot90 clockwise."""
    pts = stored[:, :3].astype(np.float64) * [1.0, -1.0, 1.0]
    xbins, ybins = np.linspace(-16, 16, 257), np.linspace(-32, 0, 257)
    above = _splat(pts[pts[:, 2] > -2.3][:, :2], xbins, ybins)
    below = _splat(pts[pts[:, 2] <= -2.3][:, :2], xbins, ybins)
    return np.rot90(np.stack([above, below]).astype(np.float32), -1, axes=(1, 2))


def garage_f64(xyz: np.ndarray) -> np.ndarray:
    """garage's one (above) plane of float64 points: z < 100 kept, z > 0.2 above, 4 px/m over
    [-32, 32]^2, transposed."""
    pts = xyz[xyz[:, 2] < 100.0]
    bins = np.linspace(-32, 32, 257)
    return _splat(pts[pts[:, 2] > 0.2][:, :2], bins, bins).T[None].astype(np.float32)


def _near(value: float, n: int = 3) -> np.ndarray:
    """float32 values around float32(value): n steps below, it, n steps above."""
    v = np.float32(value)
    down = [v]
    up = [v]
    for _ in range(n):
        down.append(np.nextafter(down[-1], np.float32(-np.inf)))
        up.append(np.nextafter(up[-1], np.float32(np.inf)))
    return np.array(sorted(set(down + up)), np.float32)


def test_point_at_float32_split_is_above_as_in_transfuser2022():
    got = lidar_to_histogram_features(np.float32([[0.5, 10.3, -2.3, 0]]), "transfuser2022")
    assert got[0].sum() == np.float32(0.2) and got[1].sum() == 0   # above, as TF's float64
    np.testing.assert_array_equal(got, tf2022_f64(np.float32([[0.5, 10.3, -2.3, 0]])))


def test_transfuser2022_split_equals_float64_formula():
    z = _near(-2.3)
    rng = np.random.default_rng(5)
    xy = rng.uniform([-15, 1], [15, 31], (len(z) * 40, 2)).astype(np.float32)
    pts = np.column_stack([xy, np.tile(z, 40), np.zeros(len(xy), np.float32)])
    got = lidar_to_histogram_features(pts, "transfuser2022")
    np.testing.assert_array_equal(got, tf2022_f64(pts))
    # float64 input (a caller's own cloud) follows the same formula
    np.testing.assert_array_equal(lidar_to_histogram_features(pts.astype(np.float64),
                                                              "transfuser2022"), tf2022_f64(pts))


def test_garage_split_of_laz_points_equals_garage_on_laspy_float64():
    """A float32 sensor cloud dense around the split, saved as garage saves it: carla-wds's
    decode (float32) gives garage's histogram of laspy's float64 `.xyz`."""
    rng = np.random.default_rng(6)
    n = 20000
    xyz = np.column_stack([rng.uniform(-30, 30, n), rng.uniform(-30, 30, n),
                           rng.uniform(0.19, 0.21, n)]).astype(np.float32)
    laz = _garage_laz(xyz)   # laspy, as data_agent.py l.360: 1 mm scale, offset = minimum
    theirs = laspy.read(io.BytesIO(laz)).xyz   # float64, as garage reads it
    ours = LazCodec().decode(laz)
    assert ours.dtype == np.float32
    np.testing.assert_array_equal(lidar_to_histogram_features(ours, "garage"), garage_f64(theirs))


def test_garage_float64_points_at_the_split():
    """laspy's own float64 points, given as they are, split exactly as garage does."""
    z = np.array([np.nextafter(0.2, -1), 0.2, np.nextafter(0.2, 1), 0.2 + 1e-9,
                  float(np.float32(0.2)), 99.99999999, 100.0])
    rng = np.random.default_rng(7)
    xy = rng.uniform(-30, 30, (len(z) * 30, 2))
    pts = np.column_stack([xy, np.tile(z, 30)])
    np.testing.assert_array_equal(lidar_to_histogram_features(pts, "garage"), garage_f64(pts))
