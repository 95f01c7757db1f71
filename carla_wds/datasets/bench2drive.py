"""Bench2Drive (Thinklab-SJTU/Bench2Drive@0.0.4, CARLA 0.9.15): its sensor rig, its label
frame and its 8-bit depth codec `depth_b2d8`.

- Rig (tools/data_collect.py, sensor_interface.py): six cameras at 1600x900, the LiDAR mount,
  five radars (numbered in the order of the radar .h5's datasets).
- Frame `b2d`: right-handed (Bench2DriveZoo prepare_B2D.py), (forward, left) metres from the
  vehicle origin; its left-handed labels are in CARLA's vehicle frame (`garage`).
- Depth (tools/data_collect.py save, tools/utils.py convert_depth): cv2.imwrite of float
  metres, i.e. whole metres saturated at 255 (Thinklab-SJTU/Bench2Drive#190).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..modalities.base import CodecUse
from ..modalities.depth import QuantizedDepthCodec
from .base import Camera, DatasetCodec, DatasetInfo, Frame, Rig

FRAME = "b2d"
RIG = Rig(
    cameras=(Camera("front", "CAM_FRONT", "front", 0.80, 0.0, 1.60, 0.0, 70.0),
             Camera("front_left", "CAM_FRONT_LEFT", "front_left", 0.27, -0.55, 1.60, -55.0, 70.0),
             Camera("front_right", "CAM_FRONT_RIGHT", "front_right", 0.27, 0.55, 1.60, 55.0,
                    70.0),
             Camera("back", "CAM_BACK", "back", -2.0, 0.0, 1.60, 180.0, 110.0),
             Camera("back_left", "CAM_BACK_LEFT", "back_left", -0.32, -0.55, 1.60, -110.0, 70.0),
             Camera("back_right", "CAM_BACK_RIGHT", "back_right", -0.32, 0.55, 1.60, 110.0,
                    70.0)),
    lidar_mount=(-0.39, 0.0, 1.84),
    radars=("radar_front", "radar_front_left", "radar_front_right", "radar_back_left",
            "radar_back_right"),
    image_size=(900, 1600))
# the rig as the tuples carla_wds.calib.B2D_RIG has always held
RIG_ROWS = tuple(c.row() for c in RIG.cameras)


@dataclass(frozen=True)
class DepthB2D8Codec(QuantizedDepthCodec):
    """A Bench2Drive depth PNG: OpenCV wrote float metres as uint8 (rounded, saturated), so
    a pixel's value is its depth in whole metres, 255 meaning 255 m or more."""
    name: str = "depth_b2d8"
    full_scale: float = 255.0
    rounding: str = "even"
    expected: str = "1-channel 8-bit depth in metres"


def can_bus_relative(window: np.ndarray, valid: np.ndarray | None = None) -> np.ndarray:
    """UniAD/VAD's temporal-queue step on a window of can_bus vectors (K+1, 18), oldest first
    (Bench2DriveZoo@uniad/vad 10a2e5d mmcv/datasets/B2D_e2e_dataset.py and B2D_vad_dataset.py
    `union2one`): the first frame of a scene gets translation [0:3] and angle [17] (degrees)
    set to 0, each later one the difference to the frame before it (its absolute values
    minus the previous frame's). Only [0:3] and [17] depend on the previous frame; the
    quaternion [3:7], velocity, acceleration, rotation rate and the yaw in radians [16] stay
    absolute. `valid` (K+1,) bool: an invalid step (before the route's start, a gap) is zeroed
    and the next valid one starts a new chain, as their new scene does. Pure numpy; the input
    is not changed. Also takes (B, K+1, 18) with valid (B, K+1)."""
    window = np.asarray(window, np.float64)
    if window.ndim == 3:
        masks = [None] * len(window) if valid is None else valid
        return np.stack([can_bus_relative(w, v) for w, v in zip(window, masks)])
    if window.ndim != 2 or window.shape[1] != 18:
        raise ValueError(f"can_bus window has shape {window.shape}; expected (K+1, 18)")
    ok = np.ones(len(window), bool) if valid is None else np.asarray(valid, bool)
    out, prev = window.copy(), None
    for i, row in enumerate(window):
        if not ok[i]:
            out[i], prev = 0.0, None
            continue
        base = (row[:3], row[17]) if prev is None else prev
        out[i, :3], out[i, 17] = row[:3] - base[0], row[17] - base[1]
        prev = (row[:3], row[17])
    return out


INFO = DatasetInfo(
    name="bench2drive", aliases=("b2d",), layouts=("bench2drive",),
    frames={FRAME: Frame(((0.0, 1.0), (-1.0, 0.0)))},
    frame_aliases={"bench2drive": FRAME, "nuscenes": FRAME},
    codecs=(DatasetCodec("depth", CodecUse("depth_b2d8", "float32", (), "m"),
                         DepthB2D8Codec()),),
    rig=RIG,
    doc="Bench2Drive@0.0.4 (CARLA 0.9.15)")

__all__ = ["DepthB2D8Codec", "FRAME", "INFO", "RIG", "RIG_ROWS", "can_bus_relative"]
