"""Per-frame members a planner computes from the whole episode (not read from one file): the
ego pose (modalities/pose.py) for every dataset, and the helpers that carry them from a plan to
the shard. The route layouts' FrameTask carries them as `arrays` (PosedTask) and ArrayEncoder
stores each as .npy; Bench2Drive's ClipTask carries encoded bytes in its `files`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...codecs import codec_named
from ...extras import Extra
from ...modalities.pose import (EGO2WORLD, LEFT_FRAME, POSE, RH_SUFFIX, RIGHT_FRAME,
                                checked_pose, gnss_pose, yaw_pose)
from ..frames import Encoded, FrameEncoder
from ..routes import FrameTask, Skip

POSE_MEMBER = f"{EGO2WORLD}.npy"


def pose_extras(source: str) -> list[Extra]:
    """The pose member and its right-handed view (the same member, mirrored at load time);
    `source` (the layout's pose source) is recorded in the units."""
    units = f"m; ego (x fwd, y right, z up) -> CARLA world; from {source} (docs/poses.md)"
    return [Extra(EGO2WORLD, POSE_MEMBER, "npy", POSE, "float64", (4, 4), units, LEFT_FRAME),
            Extra(EGO2WORLD + RH_SUFFIX, POSE_MEMBER, "npy", POSE, "float64", (4, 4),
                  units + "; mirrored y -> -y (prepare_B2D left2right)", RIGHT_FRAME)]


def frame_pose(values: dict[str, Any], source: str) -> np.ndarray:
    """A route frame's ego2world from its measurement values (measure.read_measurement's:
    x, y, theta with a NaN theta already 0, and ego_matrix where the layout reads it)."""
    if source == "ego_matrix":
        return checked_pose(values["ego_matrix"], "ego_matrix")
    if source == "gnss_compass":
        return gnss_pose(values["x"], values["y"], values["theta"])
    return yaw_pose(values["x"], values["y"], values["theta"])


@dataclass
class PosedTask(FrameTask):
    """A FrameTask with members computed by the planner: member name -> array."""
    arrays: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass(frozen=True)
class ArrayEncoder(FrameEncoder):
    """FrameEncoder that also stores a PosedTask's arrays, each as its .npy member."""

    def encode(self, task: FrameTask) -> Encoded | Skip:
        got = super().encode(task)
        if isinstance(got, Encoded):
            npy = codec_named("npy")
            for member, value in getattr(task, "arrays", {}).items():
                got.sample[member] = npy.encode(value)
        return got


__all__ = ["ArrayEncoder", "POSE_MEMBER", "PosedTask", "frame_pose", "pose_extras"]
