"""Ego frames the trainer meets, and the kinematic prior: driving straight on at current speed.

Each layout keeps its project's coordinate convention (docs/coordinates.md); the manifest names
it per label (`spec.frames`, DEFAULT_FRAME when a layout names none). Every frame is an
orthogonal map of (right, forward) metres from the vehicle origin, plus an offset, registered
with its dataset (carla_wds.datasets, `Frame(axes, origin)`):

    point_in_frame = axes @ (right, forward) + origin

That one table gives both the straight-line prior, which is the reported baseline and the
model's starting point (`straight_ahead`), and the view TCP's PID controller expects
(`to_right_forward`).
"""
from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor

from ..datasets import DEFAULT_FRAME, canonical_frame, known_frames
from ..datasets import frame as frame_of

# The frames come from the dataset registry (carla_wds.datasets: each dataset's Frame, the
# 2x2 map from (right, forward) and the origin offset, and its frame aliases), so a dataset
# registered there is a frame the trainer knows.
canonical = canonical_frame


def label_frames(frames: Mapping[str, str]) -> tuple[str, str]:
    """(waypoints frame, target point frame) from a manifest's `spec.frames`."""
    return (canonical(frames.get("waypoints", DEFAULT_FRAME)),
            canonical(frames.get("target_point", DEFAULT_FRAME)))


def _axes(name: str, like: Tensor) -> tuple[Tensor, Tensor]:
    f = frame_of(name)
    return (torch.tensor(f.axes, dtype=like.dtype, device=like.device),
            torch.tensor(f.origin, dtype=like.dtype, device=like.device))


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


__all__ = ["DEFAULT_FRAME", "canonical", "known_frames", "label_frames", "straight_ahead",
           "to_right_forward"]
