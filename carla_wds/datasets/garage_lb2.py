"""carla_garage's Leaderboard 2.0 data (PDM-Lite expert, CARLA 0.9.15), as PDM-Lite
(autonomousvision/PDM_Lite_Carla_LB2, DriveLM-CARLA) and SimLingo (RenzKa/simlingo) ship it:
the `garage_lb2` and `garage_lb2_simlingo` layouts, their sensor rig and their box parser.
docs/datasets/garage_lb2.md gives each fact with its source file.

- Rig (carla_garage@0f1cd25 leaderboard_2 team_code/config.py l.430-442, data_agent.py
  sensors l.122-220): one front camera `rgb` 1024 x 512, fov 110, at (-1.5, 0, 2.0) m, and
  its twin `rgb_augmented` shifted by augmentation_translation m to the right and turned by
  augmentation_rotation degrees (drawn once per route, U[-1, 1] m and U[-5, 5] deg); the
  LiDAR at (0, 0, 2.5) m, its points saved in the vehicle frame.
- Frames: the labels are in CARLA's vehicle frame (forward, right), the `garage` frame.
- Boxes (data_agent.py get_bounding_boxes l.438-1215): besides garage's five classes the LB2
  expert writes entries for its VQA labels ('traffic_light_vqa', 'stop_sign_vqa'), static
  props ('static_car', 'static_trafficwarning', 'static'), road landmarks ('landmark', no
  extent), the weather ('weather') and the ego's lane context ('ego_info'), the last two
  without a position. The box table keeps garage's five classes, as the loaders that read
  these files do (SimLingo dataset_base.py parse_bounding_boxes l.696-720 skips entries
  without position or extent and gives the static ones no class); the raw JSON beside it
  (boxes_raw) keeps every entry.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..codecbase import SchemaError
from .base import Camera, DatasetInfo, Rig
from .garage import garage_boxes

BOX_READER = "boxes_garage_lb2"
# the classes the box table keeps: the expert's geometric actor entries (garage's five)
TABLE_CLASSES = ("ego_car", "car", "walker", "traffic_light", "stop_sign")
# every class the LB2 expert writes (data_agent.py get_bounding_boxes); others are refused
OTHER_CLASSES = ("traffic_light_vqa", "stop_sign_vqa", "static_car", "static_trafficwarning",
                 "static", "landmark", "weather", "ego_info")
IMAGE_SIZE = (512, 1024)   # (height, width): config.py camera_height / camera_width
RIG = Rig(cameras=(Camera("front", "rgb", "rgb", -1.5, 0.0, 2.0, 0.0, 110.0),),
          lidar_mount=(0.0, 0.0, 2.5), radars=(), image_size=IMAGE_SIZE)


def lb2_boxes(boxes: Any) -> np.ndarray:
    """A leaderboard_2 boxes file -> (K, 14) float32 rows of garage's five classes, in file
    order; SchemaError for an entry that is no object or whose class the expert never writes."""
    if not isinstance(boxes, list):
        return garage_boxes(boxes)   # its one-line error names what the file holds
    kept = []
    for index, entry in enumerate(boxes):
        name = entry.get("class") if isinstance(entry, dict) else None
        if name in TABLE_CLASSES:
            kept.append(entry)
        elif name not in OTHER_CLASSES:
            raise SchemaError(f"box entry {index}: unknown leaderboard_2 box class {name!r}; "
                              f"expected one of {sorted(TABLE_CLASSES + OTHER_CLASSES)}")
    return garage_boxes(kept)


INFO = DatasetInfo(
    name="garage_lb2", aliases=("pdm_lite", "simlingo"),
    layouts=("garage_lb2", "garage_lb2_simlingo"),
    box_parsers={BOX_READER: lb2_boxes}, rig=RIG,
    doc="carla_garage@0f1cd25 (leaderboard_2), RenzKa/simlingo@eb2b89a")

__all__ = ["BOX_READER", "INFO", "OTHER_CLASSES", "RIG", "TABLE_CLASSES", "lb2_boxes"]
