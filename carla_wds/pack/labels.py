"""TCP's label formulas (OpenDriveLab/TCP), computed in float64 and stored as float32.

For frame t with heading theta (0 where NaN) and R = rot(pi/2 + theta):
waypoint i = R.T @ (p[t+i] - p[t]), target point = R.T @ (target[t] - p[t]).
In that ego frame forward is -y and x is lateral, as in TCP's own data.
"""
from __future__ import annotations

import math

import numpy as np

from ..schema import N_COMMANDS, RoadOption

F32_MAX = float(np.finfo(np.float32).max)


def ego_rotation(theta: float) -> np.ndarray:
    """R = rot(pi/2 + theta) in float64."""
    a = math.pi / 2 + theta
    return np.array([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]], dtype=np.float64)


def to_ego(theta: float, origin: np.ndarray, points: np.ndarray) -> np.ndarray:
    """World points (..., 2) -> the ego frame at `origin` with heading `theta`."""
    rot = ego_rotation(theta)
    return (np.asarray(points, np.float64) - np.asarray(origin, np.float64)) @ rot


def command_index(raw: int) -> int:
    """RoadOption -> one-hot index; VOID (< 0) becomes LANEFOLLOW as in TCP."""
    value = RoadOption.LANEFOLLOW if raw < 0 else int(raw)
    if not 1 <= value <= N_COMMANDS:
        raise ValueError(f"command {raw} is not a CARLA RoadOption (expected -1 or 1..6)")
    return value - 1


def command_onehot(raw: int) -> np.ndarray:
    onehot = np.zeros(N_COMMANDS, np.float64)
    onehot[command_index(raw)] = 1.0
    return onehot


def frame_labels(xy: np.ndarray, theta: float, target: np.ndarray, command: int,
                 pred_len: int) -> dict[str, np.ndarray]:
    """Labels of the frame whose position is xy[0]; xy holds it and its pred_len future positions.

    theta must already be finite (the packer maps NaN to 0 and counts it, and refuses an
    infinite one). The float32 results can still overflow; see `non_finite_label`.
    """
    xy = np.asarray(xy, np.float64)
    if xy.shape != (pred_len + 1, 2):
        raise ValueError(f"need {pred_len + 1} positions, got shape {xy.shape}")
    waypoints = to_ego(theta, xy[0], xy[1:])
    diff = np.diff(np.concatenate([np.zeros((1, 2)), waypoints]), axis=0)
    return {
        "waypoints": waypoints.astype(np.float32),
        "waypoints_diff": diff.astype(np.float32),
        "target_point": to_ego(theta, xy[0], target).astype(np.float32),
        "target_command": command_onehot(command).astype(np.float32),
    }


def finite_f32(value) -> bool:
    """Whether every number of `value` is finite once stored as float32: a float64 value
    past float32's range (1e39) becomes an infinity there."""
    with np.errstate(over="ignore", invalid="ignore"):   # the cast's overflow is the finding
        return bool(np.isfinite(np.asarray(value, np.float32)).all())


def non_finite_label(labels: dict) -> str | None:
    """The first label that is not finite as stored (float32), or None: positions each within
    float32's range can still be too far apart for it, and an infinity must not be packed."""
    for name in ("waypoints", "waypoints_diff", "target_point", "speed"):
        if name in labels and not finite_f32(labels[name]):
            return name
    return None


def matrix_waypoints(mats: list[np.ndarray], origin: tuple[float, float, float] = (0.0, 0.0, 0.0)
                     ) -> np.ndarray:
    """Waypoints from 4x4 ego matrices (mats[0] now, mats[1:] the future), as TransFuser 2022
    and carla_garage compute them: R_t^T (p_{t+i} - p_t) with the full 3x3 rotation (pitch
    and roll count), x forward and y right (CARLA's vehicle frame), less `origin` (TransFuser
    2022's virtual LiDAR sits 1.3 m ahead of the vehicle)."""
    now = np.asarray(mats[0], np.float64)
    rot, pos = now[:3, :3], now[:3, 3]
    future = np.stack([np.asarray(m, np.float64)[:3, 3] for m in mats[1:]])
    return ((future - pos) @ rot)[:, :2] - np.asarray(origin[:2], np.float64)


def layout_labels(xy: np.ndarray, theta: float, target: tuple[float, float], command: int,
                  pred_len: int, mats: list[np.ndarray] | None = None,
                  origin: tuple[float, float, float] = (0.0, 0.0, 0.0),
                  target_in_ego: bool = False) -> dict[str, np.ndarray]:
    """frame_labels, with waypoints from ego matrices when `mats` is given and the target
    point taken as saved when it is already in the ego frame (carla_garage)."""
    labels = frame_labels(xy, theta, target, command, pred_len)
    if mats is not None:
        waypoints = matrix_waypoints(mats, origin)
        labels["waypoints"] = waypoints.astype(np.float32)
        labels["waypoints_diff"] = np.diff(np.concatenate([np.zeros((1, 2)), waypoints]),
                                           axis=0).astype(np.float32)
    if target_in_ego:
        labels["target_point"] = np.asarray(target, np.float64).astype(np.float32)
    return labels
