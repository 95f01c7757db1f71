"""carla_wds.lidar: each preset equals its project's own lidar_to_histogram_features, copied
below verbatim (only config lookups inlined), on random points including out-of-range ones."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from carla_wds.codecs import SchemaError
from carla_wds.lidar import PRESETS, HistogramPreset, lidar_to_histogram_features


# transfuser@22b3ccdb7e806b42c9be2aa476b71546e8ec3620 team_code_transfuser/data.py l.446-470
def tf2022_reference(lidar):
    def splat_points(point_cloud):
        pixels_per_meter = 8
        hist_max_per_pixel = 5
        x_meters_max = 16
        y_meters_max = 32
        xbins = np.linspace(-x_meters_max, x_meters_max, 32*pixels_per_meter+1)
        ybins = np.linspace(-y_meters_max, 0, 32*pixels_per_meter+1)
        hist = np.histogramdd(point_cloud[..., :2], bins=(xbins, ybins))[0]
        hist[hist>hist_max_per_pixel] = hist_max_per_pixel
        overhead_splat = hist/hist_max_per_pixel
        return overhead_splat

    below = lidar[lidar[...,2]<=-2.3]
    above = lidar[lidar[...,2]>-2.3]
    below_features = splat_points(below)
    above_features = splat_points(above)
    features = np.stack([above_features, below_features], axis=-1)
    features = np.transpose(features, (2, 0, 1)).astype(np.float32)
    features = np.rot90(features, -1, axes=(1,2)).copy()
    return features


# transfuser@22b3ccd team_code_transfuser/data.py CARLA_Data.__getitem__ l.158-163 and
# l.247-251 (seq_len = 1, no rotation augmentation: degree = 0), align l.411-443, and
# utils.py get_lidar_to_vehicle_transform / get_vehicle_to_lidar_transform l.14-27
def tf2022_get_lidar_to_vehicle_transform():
    rot = np.array([[0, 1, 0],
                    [-1, 0, 0],
                    [0, 0, 1]], dtype=np.float32)
    T = np.eye(4)
    T[:3, :3] = rot
    T[0, 3] = 1.3
    T[1, 3] = 0.0
    T[2, 3] = 2.5
    return T


def tf2022_align(lidar_0, measurements_0, measurements_1, degree=0):
    matrix_0 = np.array(measurements_0['ego_matrix'])
    matrix_1 = np.array(measurements_1['ego_matrix'])
    Tr_lidar_to_vehicle = tf2022_get_lidar_to_vehicle_transform()
    Tr_vehicle_to_lidar = np.linalg.inv(tf2022_get_lidar_to_vehicle_transform())
    transform_0_to_1 = Tr_vehicle_to_lidar @ np.linalg.inv(matrix_1) @ matrix_0 @ Tr_lidar_to_vehicle
    rad = np.deg2rad(degree)
    degree_matrix = np.array([[np.cos(rad), np.sin(rad), 0, 0],
                              [-np.sin(rad), np.cos(rad), 0, 0],
                              [0, 0, 1, 0],
                              [0, 0, 0, 1]])
    transform_0_to_1 = degree_matrix @ transform_0_to_1
    lidar = lidar_0.copy()
    lidar[:, -1] = 1.
    lidar[:, 1] *= -1.
    lidar = transform_0_to_1 @ lidar.T
    lidar = lidar.T
    lidar[:, -1] = lidar_0[:, -1]
    lidar[:, 1] *= -1.
    return lidar


def tf2022_loader_points(stored):
    """What __getitem__ does to np.load(lidar/NNNN.npy, allow_pickle=True)[1] before
    lidar_to_histogram_features (the align step is checked to be the identity below)."""
    lidars_i = stored.copy()
    lidars_i[:, 1] *= -1
    return lidars_i


# carla_garage@1448bed63642bfe7c25e49e79e15713b20d104e6 team_code/data.py l.873-906, with the
# team_code/config.py values (l.126-138, l.481)
GARAGE_CONFIG = SimpleNamespace(min_x=-32, max_x=32, min_y=-32, max_y=32, pixels_per_meter=4.0,
                                hist_max_per_pixel=5, lidar_split_height=0.2,
                                max_height_lidar=100.0, use_ground_plane=False)


def garage_reference(lidar, use_ground_plane, config=GARAGE_CONFIG):
    def splat_points(point_cloud):
        xbins = np.linspace(config.min_x, config.max_x,
                            (config.max_x - config.min_x) * int(config.pixels_per_meter) + 1)
        ybins = np.linspace(config.min_y, config.max_y,
                            (config.max_y - config.min_y) * int(config.pixels_per_meter) + 1)
        hist = np.histogramdd(point_cloud[:, :2], bins=(xbins, ybins))[0]
        hist[hist > config.hist_max_per_pixel] = config.hist_max_per_pixel
        overhead_splat = hist / config.hist_max_per_pixel
        return overhead_splat.T

    lidar = lidar[lidar[..., 2] < config.max_height_lidar]
    below = lidar[lidar[..., 2] <= config.lidar_split_height]
    above = lidar[lidar[..., 2] > config.lidar_split_height]
    below_features = splat_points(below)
    above_features = splat_points(above)
    if use_ground_plane:
        features = np.stack([below_features, above_features], axis=-1)
    else:
        features = np.stack([above_features], axis=-1)
    features = np.transpose(features, (2, 0, 1)).astype(np.float32)
    return features


def _cloud(seed: int, n: int = 20000, cols: int = 3) -> np.ndarray:
    """Points well past every range, dense clusters (counts above the clip of 5), points on
    bin edges and on the split heights, and z above garage's 100 m cut."""
    rng = np.random.default_rng(seed)
    pts = rng.uniform([-50, -50, -5], [50, 50, 5], (n, 3))
    cluster = rng.normal([3, 4, -2.3], 0.05, (500, 3))   # ahead of TF2022 once y is negated
    edges = np.array([[16, -32, 0], [-16, 0, 0], [32, 32, 0.2], [-32, -32, -2.3], [0, 0, 0.2],
                      [16.0001, 0, 0], [1, 1, 150.0], [1, 1, 100.0], [2, 2, 99.9]])
    pts = np.concatenate([pts, cluster, edges]).astype(np.float32)
    if cols == 4:
        pts = np.concatenate([pts, rng.random((len(pts), 1), np.float32)], 1)
    return pts


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("cols", [3, 4])
def test_transfuser2022_equals_its_data_py(seed, cols):
    """The preset on the points as stored equals data.py's histogram of what its loader makes
    of the file (y negated first)."""
    pts = _cloud(seed, cols=cols)
    stored = pts.copy()
    got = lidar_to_histogram_features(pts, "transfuser2022")
    want = tf2022_reference(tf2022_loader_points(pts))
    assert got.shape == (2, 256, 256) and got.dtype == np.float32
    np.testing.assert_array_equal(got, want)
    assert got.max() == 1.0 and got.sum() > 0
    np.testing.assert_array_equal(pts, stored)   # the caller's points are not flipped in place
    # without the loader's negation the histogram differs: the fix is not a no-op on this cloud
    assert not np.array_equal(got, tf2022_reference(pts))


def test_transfuser2022_align_is_the_identity_for_one_frame():
    """seq_len = 1, no augmentation: align(lidar, m, m) leaves the negated points as they are,
    so the negation is the only step between the file and lidar_to_histogram_features."""
    ego = {"ego_matrix": [[0.1032, -0.99466, 0.0, -71.7], [0.99466, 0.1032, 0.0, 48.4],
                          [0.0, 0.0, 1.0, 0.3], [0.0, 0.0, 0.0, 1.0]]}
    pts = tf2022_loader_points(_cloud(3, cols=4)).astype(np.float64)
    np.testing.assert_allclose(tf2022_align(pts, ego, ego), pts, rtol=0, atol=1e-9)


def test_transfuser2022_point_ahead_lands_ahead():
    # stored (sensor frame): x = 5 m to the LEFT, y = 20 m FORWARD of the LiDAR, z above ground
    got = lidar_to_histogram_features(np.array([[5.1, 20.05, -1.0, 0.3]], np.float32),
                                      "transfuser2022")
    # data.py's grid after the negation: x bin (5.1 + 16) * 8 = 168, y bin (-20.05 + 32) * 8
    # = 95; rot90(-1) puts it at row 95 (forward is up), col 255 - 168 = 87 (left of 128)
    assert got[0, 95, 87] == pytest.approx(0.2) and got.sum() == pytest.approx(0.2)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("cols", [3, 4])
def test_garage_equals_its_data_py(seed, cols):
    pts = _cloud(seed, cols=cols)
    got = lidar_to_histogram_features(pts, "garage")
    # garage's loader holds laspy's float64 `.xyz` (data.py l.366): the float64 of these points
    want = garage_reference(pts.astype(np.float64), use_ground_plane=False)
    assert got.shape == (1, 256, 256) and got.dtype == np.float32
    np.testing.assert_array_equal(got, want)


def test_garage_with_ground_plane_equals_its_data_py():
    from dataclasses import replace
    import carla_wds.lidar as lidar
    preset = replace(PRESETS["garage"], use_ground_plane=True, channels=("below", "above"))
    pts = _cloud(5)
    lidar.PRESETS["_test_ground"] = preset
    try:
        got = lidar_to_histogram_features(pts, "_test_ground")
    finally:
        del lidar.PRESETS["_test_ground"]
    np.testing.assert_array_equal(got, garage_reference(pts.astype(np.float64),
                                                        use_ground_plane=True))


def test_garage_pixel_of_one_point_by_hand():
    # garage transposes (X, Y) so the image row is the y bin and the column the x bin
    got = lidar_to_histogram_features(np.array([[10.1, -5.1, 1.0]], np.float32), "garage")
    # x bin = floor((10.1 + 32) * 4) = 168, y bin = floor((-5.1 + 32) * 4) = 107, transposed
    assert got[0, 107, 168] == pytest.approx(0.2) and got.sum() == pytest.approx(0.2)


def test_empty_cloud_gives_zeros():
    for name, shape in (("transfuser2022", (2, 256, 256)), ("garage", (1, 256, 256))):
        got = lidar_to_histogram_features(np.zeros((0, 3), np.float32), name)
        assert got.shape == shape and not got.any()


def test_unknown_preset_lists_the_presets():
    with pytest.raises(ValueError, match="garage.*transfuser2022"):
        lidar_to_histogram_features(np.zeros((1, 3)), "tcp")


def test_bad_shape_is_a_schema_error():
    with pytest.raises(SchemaError, match=r"\(5,\)"):
        lidar_to_histogram_features(np.zeros(5), "garage")


def test_presets_are_frozen_and_checked():
    with pytest.raises(Exception):
        PRESETS["garage"].pixels_per_meter = 8   # type: ignore[misc]
    with pytest.raises(ValueError, match="no 'below'"):
        HistogramPreset((-1, 1), (-1, 1), 1, 0, 5, ("below",), False, "transpose")
