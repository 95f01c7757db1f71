"""One-release shim: calibration moved. The generic math is carla_wds.modalities.calibration;
Bench2Drive's rig is carla_wds.datasets.bench2drive.RIG (`carla_wds.datasets.rig(name)`).
"""
from __future__ import annotations

from .datasets.bench2drive import RIG, RIG_ROWS
from .modalities.calibration import (HANDEDNESS, LEFT2RIGHT, LIDAR_TO_RIGHTHAND_EGO,
                                     STAND_TO_UE4, carla_matrix, intrinsic, project,
                                     resized_intrinsic, to_right_handed_cam2ego,
                                     to_right_handed_lidar2ego)

# (camera name in carla-wds, sensor id, folder suffix, mount x, y, z (m), yaw (deg), fov)
B2D_RIG: tuple[tuple[str, str, str, float, float, float, float, float], ...] = RIG_ROWS
B2D_LIDAR_MOUNT = RIG.lidar_mount
B2D_RADARS = RIG.radars
B2D_IMAGE_SIZE = RIG.image_size   # (height, width)

__all__ = ["B2D_IMAGE_SIZE", "B2D_LIDAR_MOUNT", "B2D_RADARS", "B2D_RIG", "HANDEDNESS",
           "LEFT2RIGHT", "LIDAR_TO_RIGHTHAND_EGO", "STAND_TO_UE4", "carla_matrix", "intrinsic",
           "project", "resized_intrinsic", "to_right_handed_cam2ego", "to_right_handed_lidar2ego"]
