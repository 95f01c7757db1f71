"""carla_garage (autonomousvision/carla_garage@1448bed): the `garage` layout's frame, LiDAR
histogram, box parser and 8-bit depth codec `depth_garage8`.

- Frame: CARLA's vehicle frame, (forward, right) metres from the vehicle origin.
- LiDAR: team_code/data.py l.873 with team_code/config.py values: min_x/max_x = -32/32,
  min_y/max_y = -32/32, pixels_per_meter = 4.0 (256 x 256), lidar_split_height = 0.2,
  hist_max_per_pixel = 5, max_height_lidar = 100.0 (points at or above it dropped),
  use_ground_plane = False (one channel, above), each plane transposed (`overhead_splat.T`:
  CARLA x forward becomes the image's height axis).
- Boxes (team_code/data_agent.py get_bounding_boxes): classes ego_car, car, walker,
  traffic_light, stop_sign; `extent` is the CARLA half extent [x, y, z], the ego frame.
- Depth (data_agent.py, transfuser_utils.py convert_depth, data.py): uint8 =
  round(convert_depth(d) * 255) with convert_depth = min(d_norm, 0.05) * 20, so metres =
  v / 255 * 50 (data.py divides by 255 for [0, 1]).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..modalities.base import CodecUse
from ..modalities.boxes import box_table, known_class
from ..modalities.depth import QuantizedDepthCodec
from ..modalities.lidar_bev import HistogramPreset
from .base import DatasetCodec, DatasetInfo, Frame

FRAME = "garage"
DEPTH_MAX = 50.0   # garage clips at 0.05 normalised = 50 m
PRESET = HistogramPreset(
    x_range=(-32.0, 32.0), y_range=(-32.0, 32.0), pixels_per_meter=4.0, split_height=0.2,
    max_per_pixel=5.0, channels=("above",), use_ground_plane=False,
    orientation="transpose", max_height=100.0)
_CLASSES = {"ego_car": "ego", "car": "car", "walker": "walker",
            "traffic_light": "traffic_light", "stop_sign": "stop_sign"}
BOX_READER = "boxes_garage"


def garage_boxes(boxes: list) -> np.ndarray:
    """carla_garage boxes list -> (K, 14) float32; extents are already half [x, y, z]."""
    return box_table(boxes, "carla_garage",
                     lambda i, e: known_class(_CLASSES, i, e, "carla_garage"), list)


@dataclass(frozen=True)
class DepthGarage8Codec(QuantizedDepthCodec):
    """carla_garage depth/NNNN.png: v / 255 * 50 metres, written (x * 255 + 0.5) as uint8 on
    the clipped [0, 1] depth (see the module docstring)."""
    name: str = "depth_garage8"
    full_scale: float = DEPTH_MAX
    rounding: str = "half_up"
    expected: str = "1-channel 8-bit garage depth"


INFO = DatasetInfo(
    name="garage", aliases=("carla_garage",), layouts=("garage",),
    frames={FRAME: Frame(((0.0, 1.0), (1.0, 0.0)))},
    frame_aliases={"carla": FRAME},
    lidar_presets={"garage": PRESET},
    box_parsers={BOX_READER: garage_boxes},
    codecs=(DatasetCodec("depth", CodecUse("depth_garage8", "float32", (), "m"),
                         DepthGarage8Codec()),),
    doc="carla_garage@1448bed")

__all__ = ["BOX_READER", "DEPTH_MAX", "DepthGarage8Codec", "FRAME", "INFO", "PRESET",
           "garage_boxes"]
