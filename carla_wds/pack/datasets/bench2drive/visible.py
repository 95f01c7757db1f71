"""prepare_B2D.py's box geometry in its own right-handed LiDAR frame: the yaw it gives a box, the
velocity (vx, vy) it carries, and its depth-visibility test (`FILTER_INVISINLE`, on by default
there). Formulas from Bench2DriveZoo@uniad/vad 10a2e5d mmcv/datasets/prepare_B2D.py
(`preprocess`) and mmcv/datasets/vis_utils.py (`calculate_cube_vertices`,
`calculate_occlusion_stats`, `point_is_occluded`, `point_in_canvas_hw`):

- frames: world2lidar = E @ anno world2lidar @ L (E = LEFTHAND_EGO_TO_LIDAR, L = y -> -y),
  lidar2cam = inv(cam2ego_rh) @ lidar2ego_rh (modalities.calibration's right-handed matrices).
- yaw: from world2vehicle where the box has one (vehicle2lidar = world2lidar @
  inv(L @ world2vehicle @ L)), else -rotation_yaw - ego_yaw + pi/2 with
  ego_yaw = -theta + pi/2 (a NaN theta counts as pi there).
- velocity: speed * (cos yaw, sin yaw) in the LiDAR frame.
- visibility: the 8 corners c + R(-yaw) @ (+-w, +-l, +-h), half extents in prepare's
  (extent[1], extent[0], extent[2]) order and rotated by -yaw, as its lidar2box product does.
  Per camera, the corners in front of it (depth > 0) are projected with K; a corner nearer
  than 75 m and on the image counts visible unless every neighbour pixel (y+-1, x+-1, at the
  truncated pixel) on the image holds a smaller depth (none on the image: hidden), else it
  counts outside. A box is seen when one camera has more than 1 visible corner and fewer than
  7 outside. The depth map is the camera's depth PNG in whole metres (the first channel);
  the image is its own size (prepare_B2D's canvas is fixed at 1600x900, B2D's size).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ....datasets.bench2drive import RIG_ROWS as B2D_RIG
from ....modalities.calibration import (LEFT2RIGHT, to_right_handed_cam2ego,
                                       to_right_handed_lidar2ego)

LEFTHAND_EGO_TO_LIDAR = np.array([[0, 1, 0, 0], [1, 0, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]],
                                 np.float64)
MAX_RENDER_DEPTH = 75.0      # prepare_B2D passes MAX_DISTANCE
MIN_VISIBLE, MAX_OUTSIDE = 1, 7   # NUM_VISIBLE_SHRESHOLD, NUM_OUTPOINT_SHRESHOLD
_SIGNS = np.array([[sx, sy, sz] for sx in (1, -1) for sy in (1, -1) for sz in (1, -1)],
                  np.float64)
_NEIGHBOURS = np.array([[1, 1], [1, -1], [-1, 1], [-1, -1]])


@dataclass
class LidarRig:
    """One frame's matrices in prepare_B2D's right-handed frames, and (for the visibility
    test) each camera's K, lidar2cam and depth map in metres."""
    world2lidar: np.ndarray
    lidar2ego: np.ndarray
    ego_yaw: float
    cameras: list[tuple[np.ndarray, np.ndarray, np.ndarray]]


def lidar_rig(sensors: dict, theta: float, matrix, depth: list[np.ndarray] | None) -> LidarRig:
    """The rig of one anno's `sensors`; `matrix(value, shape, what)` reads a checked matrix;
    `depth`: the six depth maps in B2D_RIG order, or None (no visibility test)."""
    lidar = sensors.get("LIDAR_TOP") or {}
    world2lidar = LEFTHAND_EGO_TO_LIDAR @ matrix(lidar.get("world2lidar"), (4, 4),
                                                 "LIDAR_TOP.world2lidar") @ LEFT2RIGHT
    lidar2ego = to_right_handed_lidar2ego(matrix(lidar.get("lidar2ego"), (4, 4),
                                                 "LIDAR_TOP.lidar2ego"))
    cams = []
    for i, (_, sid, *_rest) in enumerate(B2D_RIG if depth is not None else ()):
        k = matrix(sensors[sid].get("intrinsic"), (3, 3), f"{sid}.intrinsic")
        c2e = to_right_handed_cam2ego(matrix(sensors[sid].get("cam2ego"), (4, 4),
                                             f"{sid}.cam2ego"))
        cams.append((k, np.linalg.inv(c2e) @ lidar2ego, depth[i]))
    ego_yaw = -(math.pi if math.isnan(theta) else theta) + math.pi / 2
    return LidarRig(world2lidar, lidar2ego, ego_yaw, cams)


def box_yaw(rig: LidarRig, entry: dict, matrix, rotation_yaw_deg) -> float:
    """prepare_B2D's yaw_local of a box in its LiDAR frame."""
    if isinstance(entry.get("world2vehicle"), list):
        w2v = LEFT2RIGHT @ matrix(entry["world2vehicle"], (4, 4), "world2vehicle") @ LEFT2RIGHT
        v2l = rig.world2lidar @ np.linalg.inv(w2v)
        return math.atan2(v2l[1, 0], v2l[0, 0])
    return -math.radians(rotation_yaw_deg()) - rig.ego_yaw + math.pi / 2


def velocity_in_ego(rig: LidarRig, speed: float, yaw: float) -> np.ndarray:
    """prepare_B2D's (speed_x, speed_y) turned from its LiDAR frame into the right-handed ego
    frame (x forward, y left): the table's frame before any y -> -y."""
    v = np.array([speed * math.cos(yaw), speed * math.sin(yaw), 0.0])
    return (rig.lidar2ego[:3, :3] @ v)[:2]


def _rot_z(a: float) -> np.ndarray:
    c, s = math.cos(a), math.sin(a)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def _camera_sees(k: np.ndarray, lidar2cam: np.ndarray, depth_map: np.ndarray,
                 corners: np.ndarray) -> bool:
    cam = (lidar2cam @ np.c_[corners, np.ones(len(corners))].T)[:3].T
    cam = cam[cam[:, 2] > 0]
    if not len(cam):
        return False
    img = (k @ cam.T).T
    x, y, d = img[:, 0] / img[:, 2], img[:, 1] / img[:, 2], cam[:, 2]
    h, w = depth_map.shape[:2]
    on = (d < MAX_RENDER_DEPTH) & (y >= 0) & (y < h) & (x >= 0) & (x < w)
    yi, xi = y[on].astype(np.int64), x[on].astype(np.int64)   # int(): truncation, >= 0 here
    ny = yi[:, None] + _NEIGHBOURS[:, 0]
    nx = xi[:, None] + _NEIGHBOURS[:, 1]
    inside = (ny >= 0) & (ny < h) & (nx >= 0) & (nx < w)
    values = np.full(ny.shape, np.inf)
    values[inside] = depth_map[ny[inside], nx[inside]]
    hidden = ((values < d[on][:, None]) | ~inside).all(axis=1)   # all([]) is True there too
    visible, outside = int((~hidden).sum()), int((~on).sum())
    return visible > MIN_VISIBLE and outside < MAX_OUTSIDE


def seen(rig: LidarRig, centre_rh: np.ndarray, extent: np.ndarray, yaw: float) -> bool:
    """prepare_B2D's visibility test of one box (centre in the right-handed world frame,
    CARLA half extent [x, y, z], prepare's yaw_local)."""
    c = (rig.world2lidar @ np.append(centre_rh, 1.0))[:3]
    half = np.array([extent[1], extent[0], extent[2]], np.float64)
    corners = c + (_SIGNS * half) @ _rot_z(-yaw).T
    return any(_camera_sees(k, l2c, dm, corners) for k, l2c, dm in rig.cameras)


__all__ = ["LidarRig", "box_yaw", "lidar_rig", "seen", "velocity_in_ego"]
