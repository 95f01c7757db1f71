"""LiDAR point clouds to bird's-eye-view histograms, as each project's loader computes them.

`lidar_to_histogram_features(points, preset)` reproduces, value for value, the function of the
same name in:

- "transfuser2022": transfuser@22b3ccd team_code_transfuser/data.py l.446. Grid x in
  [-16, 16] m, y in [-32, 0] m, 8 px/m (256 x 256), split at z = -2.3 m, at most 5 points a
  pixel, channels (above, below), then `np.rot90(features, -1, axes=(1, 2))`. No height cut.
  The preset takes the points as stored (`lidar/NNNN.npy` item 1, the sensor's own frame:
  x left, y forward), which is what a `transfuser2022` pack holds, and first negates y as
  `CARLA_Data.__getitem__` does (`lidars_i[:, 1] *= -1`) before its histogram: without it
  the grid's y in [-32, 0] would hold the 32 m BEHIND the car. Its `align` step is the
  identity for the shipped seq_len = 1 without rotation augmentation, so this is the whole
  path from file to network input.
- "garage": carla_garage@1448bed team_code/data.py l.873 with team_code/config.py values:
  min_x/max_x = -32/32, min_y/max_y = -32/32, pixels_per_meter = 4.0 (256 x 256),
  lidar_split_height = 0.2, hist_max_per_pixel = 5, max_height_lidar = 100.0 (points at or
  above it dropped), use_ground_plane = False (one channel, above), each plane transposed
  (`overhead_splat.T`: CARLA x forward becomes the image's height axis).

Both bin with `np.histogramdd` on the same edges as the projects, so the edge cases (a point
exactly on the last edge counts in the last bin) are theirs; both split (and cut) z in float64,
as the projects do (`_cut`), whatever the dtype of the points given.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .codecs import SchemaError


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


PRESETS: dict[str, HistogramPreset] = {
    "transfuser2022": HistogramPreset(
        x_range=(-16.0, 16.0), y_range=(-32.0, 0.0), pixels_per_meter=8.0, split_height=-2.3,
        max_per_pixel=5.0, channels=("above", "below"), use_ground_plane=True,
        orientation="rot90_cw", negate_y=True),
    "garage": HistogramPreset(
        x_range=(-32.0, 32.0), y_range=(-32.0, 32.0), pixels_per_meter=4.0, split_height=0.2,
        max_per_pixel=5.0, channels=("above",), use_ground_plane=False,
        orientation="transpose", max_height=100.0),
}


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


def lidar_to_histogram_features(points: np.ndarray, preset: str) -> np.ndarray:
    """(N, >=3) points (x, y, z[, ...]) as the dataset stores them -> float32 (C, H, W)
    histogram of the named preset, as that project's loader computes it from its file."""
    if preset not in PRESETS:
        raise ValueError(f"unknown histogram preset {preset!r}; presets: {sorted(PRESETS)}")
    p = PRESETS[preset]
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


__all__ = ["HistogramPreset", "PRESETS", "lidar_to_histogram_features"]
