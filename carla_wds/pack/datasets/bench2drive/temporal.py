"""Per-frame temporal members of a bench2drive sample (issue 27): the ego pose, UniAD/VAD's
can_bus vector and the agent tracks of its box rows, all read from the clip's anno files.

Sources (Thinklab-SJTU/Bench2DriveZoo@uniad/vad 10a2e5d):
- `ego2world.npy`: inv(bounding_boxes[ego].world2ego), CARLA's left-handed world whatever
  --handedness (fields=["ego2world_rh"] is prepare_B2D's right-handed one: its
  `world2ego = left2right @ world2ego @ left2right`, mmcv/datasets/prepare_B2D.py l.224).
- `can_bus.npy` (18,) float64, as B2D_e2e_dataset.py / B2D_vad_dataset.py `get_data_info`
  fill it from prepare_B2D's per-frame values (prepare_B2D.py l.218-222): [0:3]
  ego_translation (x, -y, 0); [3:7] the quaternion (w, x, y, z) of ego_yaw about z; [7:10]
  ego_vel (speed, 0, 0); [10:13] ego_accel (ax, -ay, az); [13:16] ego_rotation_rate
  -angular_velocity; [16] ego_yaw in [0, 2 pi) (2 pi added where negative); [17] that in
  degrees; ego_yaw = pi/2 - theta, a NaN theta read as pi (np.nan_to_num(theta, nan=pi)).
  Always right-handed, as theirs, whatever --handedness. All absolute: the temporal queue's
  relative step (union2one) is a load-time function, datasets.bench2drive.can_bus_relative.
  `speed: null` (which their converter cannot read) is the speed the positions give (counted
  in null_speed).
- `tracks.npy` (n_boxes, P + F, 4) float32 (modalities/tracks.py): per box row, the same
  actor (by id) at frames t + k * 5 (their sample_interval 5 = 0.5 s at 10 Hz), k = -P..-1
  then 1..F, defaults P = 4, F = 12 (B2D_e2e_dataset.py past_frames=4, predict_frames=12:
  gt_past_traj / gt_fut_traj, get_past_or_future_xy), its box centre and yaw in frame t's ego
  frame (the boxes' frame and handedness), valid where that frame is in the clip and keeps the
  actor by prepare_B2D's distance and height rules. Differences from theirs, on purpose: the
  centre (their npc2world origin is the actor's location; the boxes table is of centres), the
  depth-visibility test is not applied at other frames (it needs their six depth PNGs), the
  past is stored oldest first and absolute (theirs: t-1 first, less the current position,
  local_xy=True), and yaw is kept (theirs: x, y only).
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from ....codecs import codec_named
from ....extras import Extra
from ....modalities.boxes import FILL
from ....modalities.pose import CAN_BUS, checked_pose
from ....modalities.tracks import TRACKS, track_array
from ..poses import POSE_MEMBER, pose_extras
from .anno import _matrix, ego_entry, floats, number
from .boxes import _kept, _location, _yaw_in_ego
from .vocab import B2D_BOX_COLUMNS

TRACK_STEP = 5                   # source frames between track steps (their sample_interval)
TRACK_STEPS = (4, 12)            # (past, future) steps: B2D_e2e_dataset past 4, predict 12
_ID = B2D_BOX_COLUMNS.index("id")


def temporal_extras(s: Any, frame: str) -> list[Extra]:
    """The pose and can_bus members of every bench2drive pack, and the tracks of its boxes."""
    out = pose_extras("anno ego world2ego") + [Extra(
        CAN_BUS, f"{CAN_BUS}.npy", "npy", CAN_BUS, "float64", (18,),
        "translation m, quaternion wxyz, velocity m/s, acceleration m/s2, rotation rate "
        "rad/s, yaw rad, yaw deg (Bench2DriveZoo B2D_e2e_dataset.py can_bus)", "b2d world")]
    past, future = s.track_steps
    if "boxes" in s.sensors and past + future:
        out.append(Extra(TRACKS, f"{TRACKS}.npy", "npy", TRACKS, "float32",
                         (None, past + future, 4),
                         f"x m, y m, yaw rad, valid; steps {-past}..-1, 1..{future} x "
                         f"{TRACK_STEP / 10:g} s", frame))
    return out


def ego_pose(anno: dict) -> np.ndarray:
    """ego2world of a frame: the inverse of its ego box's world2ego."""
    world2ego = _matrix(ego_entry(anno["bounding_boxes"])[0].get("world2ego"), (4, 4),
                        "ego world2ego")
    return checked_pose(np.linalg.inv(world2ego), "anno ego world2ego's inverse")


def can_bus(anno: dict, speed: float) -> np.ndarray:
    """The 18 can_bus values of one frame (see the module docstring)."""
    theta = number(anno, "theta", allow_nan=True)
    yaw = math.pi / 2 - (math.pi if math.isnan(theta) else theta)
    acc, rate = (floats(anno.get(k), f"key {k!r}") for k in ("acceleration",
                                                             "angular_velocity"))
    if acc.shape != (3,) or rate.shape != (3,):
        raise ValueError("anno acceleration / angular_velocity are not 3 numbers each")
    wrapped = yaw + 2 * math.pi if yaw < 0 else yaw
    return np.array([number(anno, "x"), -number(anno, "y"), 0.0,
                     math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2), speed, 0.0, 0.0,
                     acc[0], -acc[1], acc[2], *(-rate), wrapped, math.degrees(wrapped)])


class TrackIndex:
    """The actors each frame of a clip keeps (id -> entry), read once per frame."""

    def __init__(self, anno_at: Callable[[int], Any], radius: float) -> None:
        self.anno_at, self.radius = anno_at, radius
        self.kept: dict[int, dict[Any, dict] | None] = {}

    def actors(self, f: int) -> dict[Any, dict] | None:
        """id -> entry at frame f (the ego's own id too); None where f has no usable anno."""
        if f not in self.kept:
            anno = self.anno_at(f)
            try:
                boxes = anno["bounding_boxes"]
                ego = ego_entry(boxes)[0]
                loc = _location(ego, 0)
                self.kept[f] = {_key(e.get("id")): e for i, e in enumerate(boxes)
                                if isinstance(e, dict) and _key(e.get("id")) is not None
                                and (e is ego or _kept(e, i, loc, self.radius))}
            except (TypeError, KeyError, ValueError, IndexError):   # no usable anno there
                self.kept[f] = None
        return self.kept[f]

    def tracks(self, t: int, rows: np.ndarray, now: dict, steps: tuple[int, int],
               right: bool) -> np.ndarray:
        """(n_rows, P + F, 4) of box rows `rows` of frame t (anno `now`)."""
        world2ego = _matrix(ego_entry(now["bounding_boxes"])[0].get("world2ego"), (4, 4),
                            "ego world2ego")
        ego_yaw = math.atan2(world2ego[0, 1], world2ego[0, 0])
        offsets = [k for k in range(-steps[0], 0)] + list(range(1, steps[1] + 1))
        xyyaw = np.zeros((len(rows), len(offsets), 3))
        valid = np.zeros((len(rows), len(offsets)), bool)
        for j, k in enumerate(offsets):
            actors = self.actors(t + k * TRACK_STEP) or {}
            for i, actor in enumerate(rows[:, _ID]):
                e = actors.get(int(actor)) if actor != FILL else None
                if e is None:
                    continue
                try:
                    centre = floats(e.get("center", e.get("location")), "center")
                    xyyaw[i, j, :2] = (world2ego @ np.append(centre, 1.0))[:2]
                    xyyaw[i, j, 2] = _yaw_in_ego(e, world2ego, ego_yaw)
                    valid[i, j] = True
                except (ValueError, TypeError):   # that frame's entry is unusable: invalid
                    continue
        if right:   # the boxes' right-handed frame (prepare_B2D): y and yaw flip
            xyyaw[..., 1:] *= -1
        return track_array(xyyaw, valid)


def _key(value: Any) -> int | None:
    """Bench2Drive writes str(actor.id); the table stores it as a number."""
    try:
        return int(value) if not isinstance(value, bool) else None
    except (TypeError, ValueError):
        return None


def frame_members(anno: dict, speed: float, t: int, s: Any, index: TrackIndex,
                  rows: np.ndarray | None) -> dict[str, tuple[str, bytes]]:
    """member -> ("", bytes) of frame t's temporal members (ClipTask.files entries)."""
    npy = codec_named("npy")
    out = {POSE_MEMBER: ("", npy.encode(ego_pose(anno))),
           f"{CAN_BUS}.npy": ("", npy.encode(can_bus(anno, speed)))}
    if rows is not None and sum(s.track_steps):
        out[f"{TRACKS}.npy"] = ("", npy.encode(index.tracks(
            t, rows, anno, s.track_steps, s.handedness == "right")))
    return out


__all__ = ["TRACK_STEP", "TRACK_STEPS", "TrackIndex", "can_bus", "ego_pose", "frame_members",
           "temporal_extras"]
