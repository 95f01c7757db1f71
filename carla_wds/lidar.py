"""One-release shim: LiDAR histograms moved. The generic histogram is
carla_wds.modalities.lidar_bev (`histogram_features(points, preset)`); the presets are each
dataset's, in carla_wds.datasets (`lidar_preset(name)`, `lidar_presets()`).

`lidar_to_histogram_features(points, preset)` reproduces, value for value, the function of the
same name in transfuser@22b3ccd team_code_transfuser/data.py l.446 ("transfuser2022") and
carla_garage@1448bed team_code/data.py l.873 ("garage"); see those modules.
"""
from __future__ import annotations

import numpy as np

from .datasets import lidar_preset, lidar_presets
from .modalities.lidar_bev import HistogramPreset, histogram_features

PRESETS: dict[str, HistogramPreset] = lidar_presets()


def lidar_to_histogram_features(points: np.ndarray, preset: str) -> np.ndarray:
    """(N, >=3) points (x, y, z[, ...]) as the dataset stores them -> float32 (C, H, W)
    histogram of the named preset, as that project's loader computes it from its file."""
    return histogram_features(points, lidar_preset(preset))


__all__ = ["HistogramPreset", "PRESETS", "lidar_to_histogram_features"]
