"""Ego poses: one 4x4 float64 member per sample, `ego2world`, and Bench2Drive's `can_bus`.

`ego2world` maps a point of the ego frame of that frame (CARLA's vehicle frame: x forward,
y right, z up, metres, origin at the vehicle's location) to CARLA's world frame (left-handed,
x east-ish, y south-ish: north is -y, z up, metres), the frame every raw file stores world
positions in. `ego2world_rh` is the same pose mirrored (y -> -y on both sides:
L @ ego2world @ L, L = diag(1, -1, 1, 1)), as Bench2DriveZoo's converter makes every matrix
right-handed (Thinklab-SJTU/Bench2DriveZoo@uniad/vad 10a2e5d mmcv/datasets/prepare_B2D.py
`left2right`); it is not stored, the loader mirrors the one member.

Where each layout's pose comes from (docs/poses.md; the room says which it uses):
- `ego_matrix` (garage, transfuser2022): the measurement's 4x4 `ego_matrix`, which is
  `carla.Transform.get_matrix()` of the vehicle (pitch and roll included; carla_garage@1448bed
  team_code/autopilot.py `save`, transfuser@22b3ccd team_code_autopilot/autopilot.py `save`).
- `gnss_compass` (tcp, tcp_roach, transfuser4): `x`, `y` are the GNSS scaled by
  (111324.6, 111319.5) m/deg with mean 0 (TCP@73cc1dd leaderboard/team_code/planner.py), so
  x ~ north = -y_world and y ~ east = x_world; `theta` is the IMU compass (0 north, pi/2 east:
  yaw = theta - pi/2; NaN read as 0, TCP/data.py's rule). No height is saved: z = 0, and the
  rotation is the yaw alone. TCP's gen_data.py swaps x and y into future_y/future_x and its
  data.py swaps them back (tools/gen_data.py l.63-64, TCP/data.py l.99-111); the pose is of the
  measurement as saved, before either swap.
- `world_yaw`: world `x`, `y` and `theta` the CARLA yaw in radians (carla_garage's
  `pos_global` and `theta` after preprocess_compass), z = 0.
- Bench2Drive: the inverse of the ego box's `world2ego` (anno bounding_boxes[0]).

float64, because a world pose is kilometres from the origin: float32 keeps ~0.5 mm at 4 km,
and the relative transform of two nearby frames loses more than that; a model casts it.

`can_bus` (18 floats, float64 as UniAD's np.zeros(18)) is Bench2DriveZoo's vector of
B2D_e2e_dataset.py / B2D_vad_dataset.py `get_data_info` (uniad/vad 10a2e5d), see
carla_wds.datasets.bench2drive for its entries and the temporal queue's relative step.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..codecbase import SchemaError
from .base import Modality

POSE, CAN_BUS = "pose", "can_bus"
EGO2WORLD, RH_SUFFIX = "ego2world", "_rh"
RIGHT_FRAME = "carla_world_rh"       # the Extra.frame of the mirrored view
LEFT_FRAME = "carla_world"
POSE_SOURCES = ("ego_matrix", "gnss_compass", "world_yaw")
MIRROR = np.diag([1.0, -1.0, 1.0, 1.0])
# names a pack made before these members existed lacks: selecting one says to re-pack
REPACK = {EGO2WORLD: "ego poses", EGO2WORLD + RH_SUFFIX: "ego poses",
          CAN_BUS: "can_bus", "tracks": "agent tracks"}


def yaw_pose(x: float, y: float, yaw: float, z: float = 0.0) -> np.ndarray:
    """ego2world of a vehicle at world (x, y, z) whose CARLA yaw is `yaw` (radians)."""
    c, s = math.cos(yaw), math.sin(yaw)
    return np.array([[c, -s, 0.0, x], [s, c, 0.0, y], [0.0, 0.0, 1.0, z], [0.0, 0.0, 0.0, 1.0]])


def gnss_pose(north: float, east: float, compass: float) -> np.ndarray:
    """ego2world from TCP/TransFuser's scaled GNSS (x = north, y = east) and compass."""
    return yaw_pose(east, -north, compass - math.pi / 2)


def right_handed(m: np.ndarray) -> np.ndarray:
    """A pose (or a stack of them, ..., 4, 4) in the mirrored, right-handed frames."""
    return MIRROR @ np.asarray(m) @ MIRROR


def relative(pose_from: np.ndarray, pose_to: np.ndarray) -> np.ndarray:
    """The transform taking points of frame `pose_from`'s ego into frame `pose_to`'s ego:
    inv(pose_to) @ pose_from (both ego2world)."""
    return np.linalg.solve(np.asarray(pose_to, np.float64), np.asarray(pose_from, np.float64))


def checked_pose(m: Any, what: str) -> np.ndarray:
    """A finite 4x4 rigid transform (last row 0 0 0 1); SchemaError naming `what` else."""
    arr = np.asarray(m, np.float64)
    if arr.shape != (4, 4) or not np.isfinite(arr).all() or \
            not np.allclose(arr[3], (0, 0, 0, 1)) or \
            not np.allclose(arr[:3, :3] @ arr[:3, :3].T, np.eye(3), atol=1e-4):
        raise SchemaError(f"{what} is not a finite 4x4 rigid transform (rotation and "
                          "translation, last row 0 0 0 1)")
    return arr


class PoseModality(Modality):
    """The pose kind: its stored member serves as `ego2world`, or mirrored where the Extra
    is the right-handed view (frame RIGHT_FRAME) of the same member."""

    def serve(self, value: Any, extra: Any, where: str) -> dict[str, np.ndarray]:
        if not isinstance(value, np.ndarray) or value.shape != (4, 4) or \
                value.dtype != np.float64:
            raise SchemaError(f"{where}: {extra.member} decodes to "
                              f"{getattr(value, 'shape', value)}; expected float64 (4, 4)",
                              fix="re-pack the shard")
        return {extra.name: right_handed(value) if extra.frame == RIGHT_FRAME else value}


def repack_hint(name: Any) -> str:
    """Why a pack lacks a field that packs made since issue 27 hold, and the fix."""
    what = REPACK.get(name) if isinstance(name, str) else None
    return (f"; {name!r} ({what}) is in packs made by this carla-wds version (docs/poses.md "
            "lists the layouts that have it): re-pack the raw data with `carla-wds pack` to "
            "add it") if what else ""


POSE_KIND = PoseModality(POSE, "float64", (4, 4), "m", collate="fixed",
                         doc="ego2world (B, 4, 4) float64: ego (x fwd, y right, z up) -> CARLA "
                             "world (left-handed); ego2world_rh mirrored (docs/poses.md)")
CAN_BUS_KIND = Modality(CAN_BUS, "float64", (18,), "m, quaternion, m/s, m/s2, rad/s, rad, deg",
                        collate="fixed",
                        doc="the 18-float can_bus vector (B, 18) float64, absolute per "
                            "frame (docs/poses.md: the temporal queue's relative step)")

__all__ = ["CAN_BUS", "CAN_BUS_KIND", "EGO2WORLD", "LEFT_FRAME", "MIRROR", "POSE", "POSE_KIND",
           "POSE_SOURCES", "PoseModality", "REPACK", "RH_SUFFIX", "RIGHT_FRAME",
           "checked_pose", "gnss_pose", "relative", "repack_hint", "right_handed", "yaw_pose"]
