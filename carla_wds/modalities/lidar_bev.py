"""LiDAR point clouds to bird's-eye-view histograms, the way the projects' loaders compute
them with `np.histogramdd` on the preset's edges, equal to theirs bit for bit and without its
binary search (issue 26): `histogram_features(points, preset)` finds each point's (x, y) bin in
one pass (`_bins`: a guess from the step, settled against the edge values themselves, so it is
histogramdd's `searchsorted(edges, v, 'right') - 1`, a point exactly on the last edge counting in
the last bin, points outside, NaN or infinite left out), splits (and cuts) z in float64 as they
do (`_cut`), counts both planes in one `np.bincount` straight into the oriented grid (their
rot90/transpose as an index, `_indices`), and clips and normalises the counts as they do on
float64 (`_scale`). The presets (ranges, resolution, split height, orientation) are each
dataset's: carla_wds.datasets `lidar_preset(name)`, cited there.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..codecbase import SchemaError


@dataclass(frozen=True)
class HistogramPreset:
    """One project's histogram: ranges in metres (x is CARLA forward, y right), the
    channel order, and how the (X, Y) grid is turned into the image the network sees."""
    x_range: tuple[float, float]
    y_range: tuple[float, float]
    pixels_per_meter: float
    split_height: float          # z <= split is "below" (ground), z > split "above"
    max_per_pixel: float         # counts are clipped to this, then divided by it
    channels: tuple[str, ...]    # order of "above"/"below" planes in the output
    use_ground_plane: bool       # False: only the above plane
    orientation: str             # "rot90_cw" (np.rot90(k=-1) on (C,X,Y)) or "transpose"
    max_height: float | None = None   # points with z >= this are dropped first
    negate_y: bool = False       # stored y is flipped by the project's loader before binning

    def __post_init__(self) -> None:
        if set(self.channels) - {"above", "below"} or not self.channels:
            raise ValueError(f"channels {self.channels}; expected 'above'/'below' names")
        if not self.use_ground_plane and "below" in self.channels:
            raise ValueError("use_ground_plane=False leaves no 'below' channel")
        if self.orientation not in ("rot90_cw", "transpose"):
            raise ValueError(f"orientation {self.orientation!r}; expected rot90_cw or transpose")

    def edges(self) -> tuple[np.ndarray, np.ndarray]:
        """The bin edges exactly as the projects build them (linspace, count from the range)."""
        (x0, x1), (y0, y1) = self.x_range, self.y_range
        nx = int(round((x1 - x0) * self.pixels_per_meter))
        ny = int(round((y1 - y0) * self.pixels_per_meter))
        return np.linspace(x0, x1, nx + 1), np.linspace(y0, y1, ny + 1)


Cut = float | np.floating   # a height in the points' dtype (`_cut`)


def _cut(height: float, dtype: np.dtype, up: bool) -> Cut:
    """The height in the points' own dtype that splits them as the float64 `height` does.

    Both projects compare float64 z: TransFuser 2022's align() multiplies its float32 file by
    a float64 matrix first, garage's laspy `.xyz` is float64. numpy compares float32 z with a
    Python float in float32 (NEP 50), where float32(-2.3) == -2.3, so a point stored at
    float32(-2.3) = -2.29999995 would fall below instead of above. Rounding the height to the
    neighbouring float32 (down for `z > h` / `z <= h`, up for `z < h`) gives the float64
    answer for every float32 z without converting the cloud (no copy, no slower)."""
    if dtype.kind != "f" or dtype.itemsize >= 8:
        return height
    with np.errstate(over="ignore"):
        cut = dtype.type(height)
    if up and float(cut) < height:   # float(): compared as float64, not in the dtype's own
        return np.nextafter(cut, dtype.type(np.inf))
    if not up and float(cut) > height:
        return np.nextafter(cut, dtype.type(-np.inf))
    return cut


def _bins(values: np.ndarray, edges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(bin, inside) of each value, equal to np.histogramdd's (numpy 2.2 lib/_histograms_impl.py
    histogramdd: `searchsorted(edges, v, side='right') - 1`, a value equal to the last edge
    moved into the last bin, bins outside the edges dropped) in one pass instead of a binary
    search. The guess from the range's step is within a bin of the answer (the linspace edges
    are x0 + i * step up to rounding); it is then moved against the edge values themselves
    until `edges[b] <= v < edges[b + 1]` (or b is the last bin), so the rounding of the guess
    never decides a bin. `values` is in float64 (or wider), the dtype searchsorted compares
    in: float32 points against float64 edges are promoted, exactly."""
    n = len(edges) - 1
    inside = (values >= edges[0]) & (values <= edges[-1])   # False for NaN, +-inf, outside
    with np.errstate(over="ignore"):   # a huge value's guess is inf, clipped below
        guess = (values - edges[0]) * (n / (edges[-1] - edges[0]))
    # fmax/fmin take the number over NaN: every guess is a valid index, so the cast is safe
    b = np.fmin(np.fmax(guess, 0), n - 1).astype(np.intp)
    while True:   # 0-1 rounds: the guess is off by at most one bin
        down = (b > 0) & (edges[b] > values)
        up = (b < n - 1) & (edges[b + 1] <= values)
        if not (down.any() or up.any()):
            return b, inside
        b -= down
        b += up


# points binned per pass: every temporary of a pass (<= 96 KB of float64) stays in the cache
# and in malloc's heap; whole-cloud temporaries (240 KB each for 30k points) often get fresh
# mmap'ed pages on each call, whose page faults cost more than the arithmetic on them (about
# 1.7 against 0.9 ms per 30k-point call: tools/bench_histogram.py --block, docs/benchmarks.md)
_CHUNK = 12288


def _indices(pts: np.ndarray, p: HistogramPreset, edges: tuple[np.ndarray, np.ndarray],
             cuts: tuple[Cut, Cut | None]) -> np.ndarray:
    """Each point's index in the (C, H, W) counts: its channel's plane and its pixel in the
    oriented image (so no rot90/transpose copy is made afterwards); C * H * W, one past the end,
    for a point left out (outside the ranges, NaN or infinite, cut by max_height, NaN z or in
    a plane the preset has no channel for). `cuts` are (split, max_height) from `_cut`."""
    # x, y in the dtype histogramdd's searchsorted compares them in (float64 against the
    # float64 edges, longdouble for longdouble points); y always a copy (np.array), even where
    # the column is already contiguous float64: the negation is exact there and the caller's
    # array (maybe a batch buffer) stays as stored
    work = np.result_type(pts.dtype, np.float64)
    x = np.ascontiguousarray(pts[:, 0], dtype=work)
    y = np.array(pts[:, 1], dtype=work)
    if p.negate_y:
        np.negative(y, out=y)
    (bx, keep), (by, in_y) = _bins(x, edges[0]), _bins(y, edges[1])
    keep &= in_y
    z, (split, ceiling) = pts[:, 2], cuts
    if ceiling is not None:
        keep &= z < ceiling
    planes = [(z > split) if name == "above" else (z <= split) for name in p.channels]
    nx, ny = len(edges[0]) - 1, len(edges[1]) - 1
    # np.rot90(m, -1, axes=(1, 2)) is flip(swapaxes(m, 1, 2), axis=2): out[c, j, i] =
    # m[c, nx - 1 - i, j]; the transpose is out[c, j, i] = m[c, i, j]
    index = by * nx + ((nx - 1) - bx if p.orientation == "rot90_cw" else bx)
    if len(planes) == 1:
        keep &= planes[0]
    else:   # a NaN z is in neither plane, as in the projects' two masks
        keep &= planes[0] | planes[1]
        index += planes[1] * (nx * ny)
    return np.where(keep, index, len(planes) * nx * ny)


def _scale(counts: np.ndarray, top: float) -> np.ndarray:
    """float32 min(counts, top) / top, computed in float64 as on histogramdd's float64 counts:
    the projects' values to the last bit. A count k only takes ceil(top) + 1 values, so the
    float64 formula runs on those once and the counts are looked up (in place, no 1 MB float64
    temporaries); an unusual `top` (not in (0, 65536]) takes the formula on every count."""
    if not 0 < top <= 65536:
        return (np.minimum(counts, top) / top).astype(np.float32)
    k = math.ceil(top)   # every count >= k is clipped to top: min(k, top) = top
    table = (np.minimum(np.arange(k + 1), top) / top).astype(np.float32)
    return table[np.minimum(counts, k, out=counts)]


def histogram_features(points: np.ndarray, p: HistogramPreset) -> np.ndarray:
    """(N, >=3) points (x, y, z[, ...]) as the dataset stores them -> float32 (C, H, W)
    histogram of the preset, as that project's loader computes it from its file."""
    pts = np.asarray(points)
    if pts.ndim != 2 or pts.shape[1] < 3:
        raise SchemaError(f"points have shape {pts.shape}; expected (N, 3) or more columns")
    edges, c = p.edges(), len(p.channels)
    cuts = (_cut(p.split_height, pts.dtype, up=False),
            None if p.max_height is None else _cut(p.max_height, pts.dtype, up=True))
    index = np.empty(len(pts), np.intp)
    for start in range(0, len(pts), _CHUNK):
        index[start:start + _CHUNK] = _indices(pts[start:start + _CHUNK], p, edges, cuts)
    nx, ny = len(edges[0]) - 1, len(edges[1]) - 1
    # both planes in one bincount; the points left out count in the one bin past the end
    counts = np.bincount(index, minlength=c * nx * ny + 1)[:-1]
    return _scale(counts, p.max_per_pixel).reshape(c, ny, nx)


__all__ = ["HistogramPreset", "histogram_features"]
