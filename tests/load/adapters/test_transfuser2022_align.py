"""adapter="transfuser2022"'s LiDAR histogram on points planted exactly on its 1/8 m bin edges
(issue 38): TransFuser 2022's align() multiplies every cloud by `Tr_vehicle_to_lidar @
inv(ego_matrix) @ ego_matrix @ Tr_lidar_to_vehicle` (its seq_len 1: both frames the sample's
own), which is not the identity in float64, so an edge point can move into the neighbouring bin.
The adapter's histogram must equal theirs bit for bit; theirs is written here from their
formulas (autonomousvision/transfuser@22b3ccd team_code_transfuser/data.py align,
lidar_to_histogram_features; utils.py get_lidar_to_vehicle_transform), with np.histogramdd."""
from __future__ import annotations

import math

import numpy as np
import pytest

from carla_wds.datasets.transfuser import PRESET
from carla_wds.load.adapters.transfuser2022 import draw_rotation, tf2022_sample
from carla_wds.modalities.lidar_bev import histogram_features

from .test_transfuser2022_model import _sample


def their_histogram(stored: np.ndarray, ego_matrix: list, degree: float) -> np.ndarray:
    """Their loader from the file's points on: the y flip at load, align(), the histogram."""
    lidar_0 = stored.copy()
    lidar_0[:, 1] *= -1                     # __getitem__: lidars_i[:, 1] *= -1
    l2v = np.eye(4)                         # get_lidar_to_vehicle_transform
    l2v[:3, :3] = np.array([[0, 1, 0], [-1, 0, 0], [0, 0, 1]], dtype=np.float32)
    l2v[0, 3], l2v[1, 3], l2v[2, 3] = 1.3, 0.0, 2.5
    v2l = np.linalg.inv(l2v)
    m0, m1 = np.array(ego_matrix), np.array(ego_matrix)   # seq_len 1: the same measurement
    transform = v2l @ np.linalg.inv(m1) @ m0 @ l2v
    rad = np.deg2rad(degree)
    turn = np.array([[np.cos(rad), np.sin(rad), 0, 0], [-np.sin(rad), np.cos(rad), 0, 0],
                     [0, 0, 1, 0], [0, 0, 0, 1]])
    transform = turn @ transform
    lidar = lidar_0.copy()
    lidar[:, -1] = 1.
    lidar[:, 1] *= -1.
    lidar = (transform @ lidar.T).T
    lidar[:, -1] = lidar_0[:, -1]
    lidar[:, 1] *= -1.

    def splat(cloud: np.ndarray) -> np.ndarray:
        xbins = np.linspace(-16, 16, 32 * 8 + 1)
        ybins = np.linspace(-32, 0, 32 * 8 + 1)
        hist = np.histogramdd(cloud[..., :2], bins=(xbins, ybins))[0]
        hist[hist > 5] = 5
        return hist / 5

    below, above = lidar[lidar[..., 2] <= -2.3], lidar[lidar[..., 2] > -2.3]
    features = np.stack([splat(above), splat(below)], axis=-1)
    features = np.transpose(features, (2, 0, 1)).astype(np.float32)
    return np.rot90(features, -1, axes=(1, 2)).copy()


def pose(yaw: float, pitch: float, x: float, y: float, z: float) -> list:
    """A vehicle's world <- vehicle matrix as CARLA's get_matrix gives it (yaw, then pitch),
    as a JSON list of floats."""
    cy, sy, cp, sp = math.cos(yaw), math.sin(yaw), math.cos(pitch), math.sin(pitch)
    return [[cp * cy, -sy, sp * cy, x], [cp * sy, cy, sp * sy, y], [-sp, 0.0, cp, z],
            [0.0, 0.0, 0.0, 1.0]]


def planted(rng: np.random.Generator, n: int = 4000) -> np.ndarray:
    """float32 (N, 4) points as the file stores them (x, y before their flip), every x and y
    exactly on a bin edge of the grid, z on either side of the split (some on float32(-2.3)),
    plus a few with an infinite or NaN coordinate."""
    x = -16 + rng.integers(0, 257, n) / 8
    y = rng.integers(0, 257, n) / 8        # stored y; their flip puts it in [-32, 0]
    z = rng.choice([-2.3, -2.5, -1.0, 0.5], n)
    pts = np.stack([x, y, z, rng.random(n)], axis=1).astype(np.float32)
    pts[:4, 2] = [np.inf, -np.inf, np.nan, np.inf]
    pts[4, 0], pts[5, 1] = np.inf, np.nan
    return pts


POSES = [pose(0.3, 0.0, 120.5, -80.25, 0.03), pose(-2.1, 0.02, 391.7, 233.4, 1.5),
         pose(1.5707963, -0.05, -12.6, 4021.9, 10.2), pose(0.0, 0.0, 0.0, 0.0, 0.0),
         pose(3.0, 0.01, 7.77, -1500.3, 0.4)]


@pytest.mark.filterwarnings("ignore:invalid value encountered in matmul")   # theirs, on inf
@pytest.mark.parametrize("augment", [False, True])
def test_edge_points_bin_as_their_aligned_points(augment):
    rng = np.random.default_rng(38)
    # a seed whose draw rotates (augment) or any seed (no rotation without augment)
    seed = next(i for i in range(50) if draw_rotation(True, np.random.default_rng(i)) != 0)
    degree = draw_rotation(augment, np.random.default_rng(seed))
    assert (degree != 0) == augment
    moved = 0
    for ego in POSES:
        pts = planted(rng)
        s = {**_sample(rng), "lidar": pts, "lidar_len": len(pts),
             "fields": {"ego2world": np.array(ego)}, "augment": augment}
        got = tf2022_sample(None, s, np.random.default_rng(seed))["lidar"]
        want = their_histogram(pts, ego, degree)
        assert got.dtype == want.dtype and got.shape == want.shape
        assert np.array_equal(got, want), int((got != want).sum())
        moved += not np.array_equal(histogram_features(pts, PRESET), want)
    # the planted points do cross edges under their align (what the old binning of the
    # stored points got wrong), so the comparison above is not vacuous
    assert moved >= 2, moved
