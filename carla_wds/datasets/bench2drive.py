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
    image_size=(1600, 900))
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


INFO = DatasetInfo(
    name="bench2drive", aliases=("b2d",), layouts=("bench2drive",),
    frames={FRAME: Frame(((0.0, 1.0), (-1.0, 0.0)))},
    frame_aliases={"bench2drive": FRAME, "nuscenes": FRAME},
    codecs=(DatasetCodec("depth", CodecUse("depth_b2d8", "float32", (), "m"),
                         DepthB2D8Codec()),),
    rig=RIG,
    doc="Bench2Drive@0.0.4 (CARLA 0.9.15)")

__all__ = ["DepthB2D8Codec", "FRAME", "INFO", "RIG", "RIG_ROWS"]
