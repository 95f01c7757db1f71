"""Camera calibration: Bench2Drive's rig, pinhole intrinsics, handedness, and the intrinsics of
a resized or cropped image. Core (no torch): the packer, the synthetic data and the loader all
use these, so a matrix means the same thing wherever it is read.

Conventions (Bench2Drive@0.0.4 tools/utils.py, tools/data_collect.py; CARLA 0.9.15):
- `cam2ego` maps the camera ACTOR frame in CARLA/UE4 axes (x forward, y right, z up,
  left-handed) to the ego frame (same axes): CARLA's Transform.get_matrix of the mount.
  It is not the optical frame: a point p in the camera actor frame is seen at pixel
  K @ (p_y, -p_z, p_x) / p_x (`get_image_point` in tools/utils.py).
- `intrinsic` K = [[f, 0, w/2], [0, f, h/2], [0, 0, 1]] with f = w / (2 tan(fov/2)).
- Right-handed (Bench2DriveZoo prepare_B2D.py): cam2ego_rh = L @ cam2ego @ S with
  L = diag(1, -1, 1, 1) and S = STAND_TO_UE4 (the optical frame x right, y down, z forward
  into UE4 axes), lidar2ego_rh = L @ lidar2ego @ L @ LIDAR_TO_RIGHTHAND_EGO.
"""
from __future__ import annotations

import math

import numpy as np

# (camera name in carla-wds, B2D sensor id, folder suffix, mount x, y, z (m), yaw (deg), fov)
B2D_RIG: tuple[tuple[str, str, str, float, float, float, float, float], ...] = (
    ("front", "CAM_FRONT", "front", 0.80, 0.0, 1.60, 0.0, 70.0),
    ("front_left", "CAM_FRONT_LEFT", "front_left", 0.27, -0.55, 1.60, -55.0, 70.0),
    ("front_right", "CAM_FRONT_RIGHT", "front_right", 0.27, 0.55, 1.60, 55.0, 70.0),
    ("back", "CAM_BACK", "back", -2.0, 0.0, 1.60, 180.0, 110.0),
    ("back_left", "CAM_BACK_LEFT", "back_left", -0.32, -0.55, 1.60, -110.0, 70.0),
    ("back_right", "CAM_BACK_RIGHT", "back_right", -0.32, 0.55, 1.60, 110.0, 70.0),
)
B2D_LIDAR_MOUNT = (-0.39, 0.0, 1.84)
# the datasets of a radar .h5, in the order carla-wds numbers them (sensor_interface.py)
B2D_RADARS = ("radar_front", "radar_front_left", "radar_front_right", "radar_back_left",
              "radar_back_right")
B2D_IMAGE_SIZE = (1600, 900)   # (width, height)

LEFT2RIGHT = np.diag([1.0, -1.0, 1.0, 1.0])
STAND_TO_UE4 = np.array([[0, 0, 1, 0], [1, 0, 0, 0], [0, -1, 0, 0], [0, 0, 0, 1]], np.float64)
LIDAR_TO_RIGHTHAND_EGO = np.array([[0, 1, 0, 0], [-1, 0, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]],
                                  np.float64)
HANDEDNESS = ("left", "right")


def carla_matrix(x: float, y: float, z: float, yaw_deg: float, pitch_deg: float = 0.0,
                 roll_deg: float = 0.0) -> np.ndarray:
    """carla.Transform(Location(x, y, z), Rotation(pitch, yaw, roll)).get_matrix()."""
    cy, sy = math.cos(math.radians(yaw_deg)), math.sin(math.radians(yaw_deg))
    cr, sr = math.cos(math.radians(roll_deg)), math.sin(math.radians(roll_deg))
    cp, sp = math.cos(math.radians(pitch_deg)), math.sin(math.radians(pitch_deg))
    return np.array([[cp * cy, cy * sp * sr - sy * cr, -cy * sp * cr - sy * sr, x],
                     [sy * cp, sy * sp * sr + cy * cr, -sy * sp * cr + cy * sr, y],
                     [sp, -cp * sr, cp * cr, z],
                     [0.0, 0.0, 0.0, 1.0]])


def intrinsic(width: int, height: int, fov_deg: float) -> np.ndarray:
    """Bench2Drive's pinhole K of a CARLA camera (tools/utils.py build_projection_matrix)."""
    f = width / (2.0 * math.tan(fov_deg * math.pi / 360.0))
    return np.array([[f, 0.0, width / 2.0], [0.0, f, height / 2.0], [0.0, 0.0, 1.0]])


def project(points_ego: np.ndarray, k: np.ndarray, cam2ego: np.ndarray) -> np.ndarray:
    """(N, 3) ego-frame points (left-handed, CARLA axes) -> (N, 3) pixel u, v and depth (m)
    through a left-handed `cam2ego` as Bench2Drive stores it."""
    p = np.c_[np.asarray(points_ego, np.float64), np.ones(len(points_ego))]
    cam = (np.linalg.inv(cam2ego) @ p.T)[:3]           # actor frame: x fwd, y right, z up
    optical = np.stack([cam[1], -cam[2], cam[0]])      # x right, y down, z forward
    uvw = k @ optical
    return np.stack([uvw[0] / uvw[2], uvw[1] / uvw[2], cam[0]], axis=1)


def to_right_handed_cam2ego(cam2ego: np.ndarray) -> np.ndarray:
    """prepare_B2D.py: left2right @ cam2ego @ stand_to_ue4_rotate (optical -> right-handed ego)."""
    return LEFT2RIGHT @ np.asarray(cam2ego, np.float64) @ STAND_TO_UE4


def to_right_handed_lidar2ego(lidar2ego: np.ndarray) -> np.ndarray:
    """prepare_B2D.py: left2right @ lidar2ego @ left2right @ lidar_to_righthand_ego."""
    return LEFT2RIGHT @ np.asarray(lidar2ego, np.float64) @ LEFT2RIGHT @ LIDAR_TO_RIGHTHAND_EGO


def resized_intrinsic(k: np.ndarray, src_hw: tuple[int, int], dst_hw: tuple[int, int],
                      crop: tuple[int, int, int, int] | None = None) -> np.ndarray:
    """K of an image cropped to (top, left, height, width) of the source, then resized to
    dst_hw. Pixel coordinates are continuous (pixel i spans [i, i + 1)), as CARLA's
    c = (w/2, h/2) says, so a crop shifts and a resize scales them (cv2.resize samples the
    output pixel centre i + 0.5 at (i + 0.5) / scale): a point projects onto the same content
    in the output image as in the source."""
    top, left, h, w = crop if crop is not None else (0, 0, *src_hw)
    sx, sy = dst_hw[1] / w, dst_hw[0] / h
    out = np.array(k, np.float64, copy=True)
    out[0] = (out[0] - left * out[2]) * sx
    out[1] = (out[1] - top * out[2]) * sy
    return out


__all__ = ["B2D_IMAGE_SIZE", "B2D_LIDAR_MOUNT", "B2D_RADARS", "B2D_RIG", "HANDEDNESS", "carla_matrix",
           "intrinsic", "project", "resized_intrinsic", "to_right_handed_cam2ego",
           "to_right_handed_lidar2ego"]
