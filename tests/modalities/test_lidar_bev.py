"""carla_wds.modalities.lidar_bev: the one-pass histogram (issue 26) equals, bit for bit, the
`np.histogramdd` formula it replaced (the projects' own: TransFuser 2022 data.py l.446,
carla_garage data.py l.873, see tests/modalities/test_lidar.py), written again here.

The clouds are made to hit every edge case of histogramdd's binning (numpy 2.2
lib/_histograms_impl.py: `searchsorted(edges, v, side='right')`, the last edge moved into the
last bin, outliers dropped): points on every edge value and on their nextafter neighbours (in
the cloud's own dtype), on the first and last edges, past the ranges, NaN and +-inf in each
column, z on the split and max heights, empty and one-point clouds, and clouds longer than one
pass of the function. Beside the dataset presets, made-up presets whose linspace edges are
not multiples of the step (so a plain floor((x - x0) * ppm) gets some points wrong, checked
below) and whose clip is not an integer.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from carla_wds.datasets import lidar_presets
from carla_wds.modalities import lidar_bev
from carla_wds.modalities.lidar_bev import HistogramPreset, histogram_features


def histogramdd_reference(points: np.ndarray, p: HistogramPreset) -> np.ndarray:
    """The formula before issue 26: per plane `np.histogramdd` of the stored x, y (y negated
    in the points' dtype where the preset says so), z compared in float64 as the projects do,
    counts clipped and divided in float64, then float32, rot90 clockwise or transposed."""
    pts = np.asarray(points)[:, :3]
    if p.negate_y:
        pts = pts * np.array([1, -1, 1], pts.dtype)
    z = pts[:, 2].astype(np.float64)
    if p.max_height is not None:
        pts, z = pts[z < p.max_height], z[z < p.max_height]
    planes = {"above": pts[z > p.split_height], "below": pts[z <= p.split_height]}
    hist = np.stack([np.histogramdd(planes[name][:, :2], bins=p.edges())[0]
                     for name in p.channels])
    hist[hist > p.max_per_pixel] = p.max_per_pixel
    out = (hist / p.max_per_pixel).astype(np.float32)
    if p.orientation == "rot90_cw":
        return np.rot90(out, -1, axes=(1, 2)).copy()
    return out.transpose(0, 2, 1).copy()


MADE_UP = {   # edges off the step's multiples, both orientations, both channel orders
    "odd_steps": HistogramPreset((-10.1, 20.3), (-7.7, 3.3), 7.3, 0.35, 2.5, ("below", "above"),
                                 True, "transpose", max_height=1.7),
    "odd_rot": HistogramPreset((-3.3, 9.9), (-0.7, 11.1), 10 / 3, -0.1, 1.0, ("above", "below"),
                               True, "rot90_cw", negate_y=True),
    "far_away": HistogramPreset((1e6 + 0.1, 1e6 + 12.8), (-5e5 - 9.3, -5e5), 9.7, 0.0, 7.0,
                                ("above",), False, "rot90_cw"),
    "below_only": HistogramPreset((-4.0, 4.0), (-2.5, 2.5), 2.9, 0.5, 3e5, ("below",), True,
                                  "transpose", max_height=2.0),
}
PRESETS = {**lidar_presets(), **MADE_UP}


def _around(values: np.ndarray, dtype: type, steps: int = 2) -> np.ndarray:
    """Each value rounded to `dtype` and its `steps` neighbours down and up in that dtype."""
    v = values.astype(dtype)
    out, down, up = [v], v, v
    for _ in range(steps):
        down, up = np.nextafter(down, dtype(-np.inf)), np.nextafter(up, dtype(np.inf))
        out += [down, up]
    return np.concatenate(out)


def _cloud(p: HistogramPreset, seed: int, n: int, dtype: type) -> np.ndarray:
    """n random points over twice the ranges and around the heights, then the edge values:
    every x and y edge (and -y where the preset negates y) with its neighbours, each paired
    with random other coordinates, and NaN/inf in every column."""
    rng = np.random.default_rng(seed)
    (x0, x1), (y0, y1) = p.x_range, p.y_range
    ysign = -1 if p.negate_y else 1
    heights = [p.split_height] + ([p.max_height] if p.max_height is not None else [])
    lo, hi = min(heights) - 1, max(heights) + 1

    def rand(k: int) -> np.ndarray:   # x, y, z columns
        return np.column_stack([rng.uniform(2 * x0 - x1, 2 * x1 - x0, k),
                                ysign * rng.uniform(2 * y0 - y1, 2 * y1 - y0, k),
                                rng.uniform(lo, hi, k)])

    xe, ye = p.edges()
    on_x, on_y = _around(xe, dtype), _around(ysign * ye, dtype)
    on_z = _around(np.array(heights), dtype)
    special = [np.nan, np.inf, -np.inf]
    mid = (x0 + 0.5, ysign * (y0 + 0.5), hi - 1)   # inside the grid, above every height
    edge_rows = [np.column_stack([on_x, rand(len(on_x))[:, 1:]]),
                 np.column_stack([rand(len(on_y))[:, 0], on_y, rand(len(on_y))[:, 2]]),
                 np.column_stack([rng.choice(on_x, len(on_y) * 4), np.tile(on_y, 4),
                                  rng.choice(on_z, len(on_y) * 4)]),
                 np.array([[s, mid[1], mid[2]] for s in special]
                          + [[mid[0], s, mid[2]] for s in special]
                          + [[mid[0], mid[1], s] for s in special])]
    pts = np.concatenate([rand(n)] + edge_rows)
    pts = pts[rng.permutation(len(pts))].astype(dtype)
    return np.concatenate([pts, rng.random((len(pts), 1)).astype(dtype)], 1)   # intensity


@pytest.mark.parametrize("name", sorted(PRESETS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_equals_histogramdd_on_edge_heavy_clouds(name, dtype):
    p = PRESETS[name]
    for seed, n in enumerate([0, 1, 7, 300, 5000, 30000]):
        pts = _cloud(p, seed, n, dtype)
        got = histogram_features(pts, p)
        want = histogramdd_reference(pts, p)
        assert got.dtype == np.float32 and got.flags.c_contiguous
        assert np.array_equal(got, want), (name, dtype, seed, np.argwhere(got != want)[:5])
        assert want.any()   # the cloud does land in the grid


@pytest.mark.parametrize("name", sorted(PRESETS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_empty_clouds_and_only_dropped_points(name, dtype):
    """Nothing counted and no warning (the NaN/inf/huge values never reach an integer cast)."""
    p = PRESETS[name]
    xe, ye = p.edges()
    shape = (len(p.channels), len(ye) - 1, len(xe) - 1)
    huge = float(np.finfo(dtype).max)
    bad = np.array([[np.nan, 0, 0], [np.inf, -np.inf, 0], [xe[0], ye[0], np.nan],
                    [huge, -huge, 0], [-huge, huge, 0], [xe[0] - 1, ye[0] - 1, 0],
                    [xe[-1] + 1, ye[-1] + 1, 0]], dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for pts in (np.zeros((0, 3), dtype), np.zeros((0, 4), dtype), bad):
            got = histogram_features(pts, p)
            assert got.shape == shape and got.dtype == np.float32 and not got.any()
            assert np.array_equal(got, histogramdd_reference(pts, p))


def test_a_point_on_the_last_edge_counts_in_the_last_bin():
    p = lidar_presets()["garage"]   # transposed: row = y bin, column = x bin
    got = histogram_features(np.array([[32.0, 32.0, 1.0], [-32.0, -32.0, 1.0]]), p)
    assert got[0, 255, 255] == np.float32(0.2) and got[0, 0, 0] == np.float32(0.2)
    assert got.sum() == np.float32(0.4)
    beyond = np.nextafter(32.0, np.inf)
    assert not histogram_features(np.array([[beyond, 0.0, 1.0]]), p).any()


def test_the_edge_values_decide_not_the_step():
    """On the made-up presets a plain floor((x - x0) / step) differs from histogramdd's bin
    for some edge points: the clouds above do test the settling against the edge values."""
    for name in ("odd_steps", "odd_rot", "far_away"):
        p = MADE_UP[name]
        xe = p.edges()[0]
        x = _around(xe[1:-1], np.float64)
        step = (xe[-1] - xe[0]) / (len(xe) - 1)
        plain = np.floor((x - xe[0]) / step).astype(np.intp)
        assert (plain != np.searchsorted(xe, x, side="right") - 1).any(), name
        got, inside = lidar_bev._bins(x, xe)
        assert inside.all()
        assert np.array_equal(got, np.searchsorted(xe, x, side="right") - 1), name


def test_more_points_than_one_pass_and_the_callers_array_unchanged():
    p = lidar_presets()["transfuser2022"]
    n = 2 * lidar_bev._CHUNK + 3   # three passes, the last of 3 points
    pts = _cloud(p, 11, n, np.float64)
    fortran = np.asfortranarray(pts)   # a contiguous y column: still copied before negation
    before = fortran.copy()
    assert np.array_equal(histogram_features(fortran, p), histogramdd_reference(pts, p))
    assert np.array_equal(fortran, before, equal_nan=True)
    one = np.asfortranarray(pts[:1].copy())
    assert np.array_equal(histogram_features(one, p), histogramdd_reference(one, p))
    assert np.array_equal(one, pts[:1], equal_nan=True)
