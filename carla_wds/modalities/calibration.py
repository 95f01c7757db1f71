"""Calibration: pinhole intrinsics, CARLA transforms, handedness, and the intrinsics of a
resized or cropped image. Core (no torch): the packer, the synthetic data and the loader all
use these, so a matrix means the same thing wherever it is read. A dataset's camera rig (mounts,
fields of view, image size) is in carla_wds.datasets.

Not a member of its own: `intrinsics` and `cam2ego` are values of the measurements record,
served as two batch attributes (intrinsics scaled to the loader's image size).

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

from .base import Modality

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


CALIBRATION = Modality("calibration", "float32", (), "", member=False, batch="",
                       parts=("intrinsics", "cam2ego"),
                       doc="intrinsics (B, n_cam, 3, 3) at the output size, cam2ego "
                           "(B, n_cam, 4, 4) as stored: values of the measurements record")

__all__ = ["CALIBRATION", "HANDEDNESS", "LEFT2RIGHT", "LIDAR_TO_RIGHTHAND_EGO", "STAND_TO_UE4",
           "carla_matrix", "intrinsic", "project", "resized_intrinsic", "to_right_handed_cam2ego",
           "to_right_handed_lidar2ego"]
