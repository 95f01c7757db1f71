"""LiDAR point clouds to bird's-eye-view histograms, the way the projects' loaders compute
them: `histogram_features(points, preset)` bins (x, y) with `np.histogramdd` on the preset's
edges (so the edge cases, a point exactly on the last edge counting in the last bin, are the
projects'), splits (and cuts) z in float64 as they do (`_cut`), clips and normalises the
counts, and orients the grid. The presets (ranges, resolution, split height, orientation) are
each dataset's: carla_wds.datasets `lidar_preset(name)`, cited there.
"""
from __future__ import annotations

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


def _cut(height: float, dtype: np.dtype, up: bool) -> float | np.floating:
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


def _splat(xy: np.ndarray, preset: HistogramPreset) -> np.ndarray:
    hist = np.histogramdd(xy, bins=preset.edges())[0]
    return np.minimum(hist, preset.max_per_pixel) / preset.max_per_pixel


def histogram_features(points: np.ndarray, p: HistogramPreset) -> np.ndarray:
    """(N, >=3) points (x, y, z[, ...]) as the dataset stores them -> float32 (C, H, W)
    histogram of the preset, as that project's loader computes it from its file."""
    pts = np.asarray(points)
    if pts.ndim != 2 or pts.shape[1] < 3:
        raise SchemaError(f"points have shape {pts.shape}; expected (N, 3) or more columns")
    if p.negate_y:   # on a copy: the caller's array (maybe a batch buffer) stays as stored
        pts = pts[:, :3] * np.array([1, -1, 1], dtype=pts.dtype)
    if p.max_height is not None:
        pts = pts[pts[:, 2] < _cut(p.max_height, pts.dtype, up=True)]
    z = pts[:, 2]
    split = _cut(p.split_height, pts.dtype, up=False)
    planes = {"above": _splat(pts[z > split, :2], p),
              "below": _splat(pts[z <= split, :2], p)}
    features = np.stack([planes[name] for name in p.channels]).astype(np.float32)
    if p.orientation == "rot90_cw":
        features = np.rot90(features, -1, axes=(1, 2))
    else:
        features = features.transpose(0, 2, 1)
    return np.ascontiguousarray(features)


__all__ = ["HistogramPreset", "histogram_features"]
