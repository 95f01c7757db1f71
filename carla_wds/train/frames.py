"""Ego frames the trainer meets, and the kinematic prior: driving straight on at current speed.

Each layout keeps its project's coordinate convention (docs/coordinates.md); the manifest names
it per label (`spec.frames`, `tcp` when a layout names none). Every frame is an orthogonal map
of (right, forward) metres from the vehicle origin, plus an offset:

    point_in_frame = AXES[frame] @ (right, forward) + ORIGIN[frame]

That one table gives both the straight-line prior, which is the reported baseline and the
model's starting point (`straight_ahead`), and the view TCP's PID controller expects
(`to_right_forward`).
"""
from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor

# transfuser@22b3ccd config.py lidar_pos: TF-2022's ego_waypoint origin is the virtual LiDAR,
# 1.3 m ahead of the vehicle origin.
_TF2022_LIDAR_X = 1.3

# frame -> (rows of the 2x2 map from (right, forward), origin offset in the frame)
_FRAMES: dict[str, tuple[tuple[tuple[float, float], tuple[float, float]], tuple[float, float]]] = {
    "tcp": (((1.0, 0.0), (0.0, -1.0)), (0.0, 0.0)),             # (right, -forward)
    "garage": (((0.0, 1.0), (1.0, 0.0)), (0.0, 0.0)),           # (forward, right)
    "transfuser2022": (((0.0, 1.0), (1.0, 0.0)), (-_TF2022_LIDAR_X, 0.0)),
    "b2d": (((0.0, 1.0), (-1.0, 0.0)), (0.0, 0.0)),             # (forward, left)
}
_ALIASES = {"transfuser2021": "tcp", "transfuser2022_target_point": "tcp", "carla": "garage",
            "bench2drive": "b2d", "nuscenes": "b2d"}
DEFAULT_FRAME = "tcp"   # what TCP and TransFuser 2021 layouts use without naming a frame
KNOWN_FRAMES: tuple[str, ...] = tuple(sorted([*_FRAMES, *_ALIASES]))


def canonical(frame: str) -> str:
    """The table's name for a frame (aliases resolved); ValueError naming the known ones."""
    name = _ALIASES.get(frame, frame)
    if name not in _FRAMES:
        raise ValueError(f"unknown coordinate frame {frame!r}; carla-wds knows "
                         f"{', '.join(KNOWN_FRAMES)} (docs/coordinates.md)")
    return name


def label_frames(frames: Mapping[str, str]) -> tuple[str, str]:
    """(waypoints frame, target point frame) from a manifest's `spec.frames`."""
    return (canonical(frames.get("waypoints", DEFAULT_FRAME)),
            canonical(frames.get("target_point", DEFAULT_FRAME)))


def _axes(frame: str, like: Tensor) -> tuple[Tensor, Tensor]:
    rows, origin = _FRAMES[canonical(frame)]
    return (torch.tensor(rows, dtype=like.dtype, device=like.device),
            torch.tensor(origin, dtype=like.dtype, device=like.device))


def straight_ahead(speed: Tensor, pred_len: int, dt: float, frame: str = DEFAULT_FRAME) -> Tensor:
    """(B,) m/s -> (B, pred_len, 2): the ego continuing straight at its current speed, point i
    (from 1) being speed * dt * i metres ahead of the vehicle origin, in `frame`.

    This is the straight-line baseline eval reports and the prior the model's decoder adds
    its residuals to, so a model whose residuals are zero scores exactly the baseline."""
    speed = speed.reshape(-1).float()
    axes, origin = _axes(frame, speed)
    ahead = speed[:, None] * (torch.arange(1, pred_len + 1, device=speed.device,
                                           dtype=speed.dtype) * dt)
    right_forward = torch.stack([torch.zeros_like(ahead), ahead], dim=-1)
    return right_forward @ axes.T + origin


def to_right_forward(points: Tensor, frame: str) -> Tensor:
    """(..., 2) points in `frame` -> (right, forward) metres from the vehicle origin, the
    view TCP's control_pid takes after flipping its y."""
    points = points if points.is_floating_point() else points.float()
    axes, origin = _axes(frame, points)
    return (points - origin) @ axes   # axes is orthogonal: its inverse is its transpose


__all__ = ["DEFAULT_FRAME", "KNOWN_FRAMES", "canonical", "label_frames", "straight_ahead",
           "to_right_forward"]
