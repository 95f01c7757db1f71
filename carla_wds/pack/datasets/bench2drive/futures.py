"""`--future-labels masked` (issue 42): UniAD's and VAD's sample set, every frame of a clip
with the labels that need frames past its end masked, and their ego future `gt_sdc_fut_traj`.

Sources (Thinklab-SJTU/Bench2DriveZoo@uniad/vad 10a2e5d; docs/datasets/bench2drive.md has the
full account):
- Sample set: B2D_E2E_Dataset and B2D_VAD_Dataset index every info of prepare_B2D.py, one per
  10 Hz anno frame (prepare_B2D.py l.205) where it keeps a box (l.336: `if len(gt_boxes) ==
  0: continue`), the last ones of a clip included. Here too: with boxes packed, a frame
  where no box besides the ego's is kept (by --box-visibility's rule) is no sample, counted
  in loader_tail_frames (Infos). Their future lookups stop at the clip's end (`if adj_idx >= len(self.data_infos): break`, `if
  adj_frame['folder'] != cur_frame['folder']: break`, B2D_e2e_dataset.py l.554-558,
  B2D_vad_dataset.py l.376-380) and leave zeros with mask 0 there (l.549-550, l.371-372).
- Here: a step k of the pack's pred_len future labels (waypoints, waypoints_diff,
  future_expert_feature, future_expert_action) is real where frame t + 5k is in the clip
  (and, with the expert, so is its expert file); the record's `future_valid` (pred_len,) bool
  says which; the others are 0, as their masked values.
- `gt_sdc_fut_traj` (1, 12, 4): B2D_e2e_dataset.py get_ego_future_xy (l.545-572) with their
  predict_frames 12 (l.27, l.409): per step j = 1..12, frame t + 5j's LiDAR origin in frame
  t's LiDAR frame, adj2cur = world2lidar_t @ inv(world2lidar_adj) (l.560), x, y =
  adj2cur[0:2, 3] (l.561), yaw = -atan2(adj2cur[1, 0], adj2cur[0, 0]) - pi wrapped into
  [-pi, pi] (l.562-567), valid 1; from the first frame past the clip's end on, 0 (their
  break). Their t + 5j counts infos, not frames (index + 5 * sample_interval into the info
  list): where a frame without boxes was dropped, step j is the 5j-th info after t, as here
  (Infos.ahead); waypoints and future_valid keep frames t + 5k (the TCP port's labels). world2lidar = lefthand_ego_to_lidar @ anno world2lidar @ left2right (prepare_B2D.py
  l.252). Their gt_sdc_fut_traj is [..., :2] with mask [..., 3] (l.429-430); UniAD's
  sdc_planning is its first 6 steps with yaw (planning_frames 6, l.278). Stored in the tracks
  kind, so served as `gt_sdc_fut_traj` (B, 1, 12, 3) and `gt_sdc_fut_traj_valid` (B, 1, 12).
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from ....extras import Extra
from ....modalities.measurements import MeasField
from ....modalities.tracks import TRACKS, track_array
from ..routes.layout_parts import SampleRule
from .anno import _matrix
from .vocab import B2D_BOX_COLUMNS

FUTURE_LABELS = ("full", "masked")
SDC_FUT = "gt_sdc_fut_traj"
SDC_STEPS = 12                   # B2D_e2e_dataset.py predict_frames (l.27)
SDC_STEP = 5                     # their sample_interval: 0.5 s at 10 Hz
FUTURE_VALID = "future_valid"
# prepare_B2D.py l.38-44
LEFTHAND_EGO_TO_LIDAR = np.array([[0, 1, 0, 0], [1, 0, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]],
                                 np.float64)
LEFT2RIGHT = np.diag([1.0, -1.0, 1.0, 1.0])
MASKED_SAMPLES = SampleRule(head=0, tail=0, loader="Bench2DriveZoo@uniad/vad 10a2e5d "
                            "B2D_e2e_dataset.py / B2D_vad_dataset.py: every info frame "
                            "(prepare_B2D.py l.336: frames without boxes are none), futures "
                            "masked at the clip's end (--future-labels masked)")


def real_steps(future: list[int], last: int, expert_last: int | None,
               expert_offset: int) -> list[bool]:
    """Which of the future frames `future` (t + 5k) are real: in the clip (<= its last anno
    frame) and, where the expert is packed (`expert_last` its last file), with its expert
    file; once one is not, none after it is (their break at the clip's end)."""
    out, ok = [], True
    for f in future:
        ok = ok and f <= last and (expert_last is None or f + expert_offset <= expert_last)
        out.append(ok)
    return out


def mask_labels(labels: dict[str, Any], real: list[bool]) -> dict[str, Any]:
    """Zero the waypoint rows of the masked steps (their fill: 0, as VAD's
    ego_fut_trajs offsets at mask 0, B2D_vad_dataset.py l.390-393)."""
    keep = np.asarray(real, bool)[:, None]
    for name in ("waypoints", "waypoints_diff"):
        labels[name] = np.where(keep, labels[name], 0).astype(labels[name].dtype)
    return labels


def no_expert(feature_len: int) -> dict[str, Any]:
    """A masked step's future expert values (future_expert_feature, future_expert_action): 0."""
    return {"expert_feature": np.zeros(feature_len, np.float32), "expert_action": 0}


def world2lidar(anno: dict) -> np.ndarray:
    """Their right-handed world -> LiDAR (x right, y forward) of a frame: prepare_B2D.py
    l.252 on anno['sensors']['LIDAR_TOP']['world2lidar']."""
    raw = _matrix(((anno.get("sensors") or {}).get("LIDAR_TOP") or {}).get("world2lidar"),
                  (4, 4), "LIDAR_TOP.world2lidar")
    return LEFTHAND_EGO_TO_LIDAR @ raw @ LEFT2RIGHT


def kept_boxes(table: np.ndarray, visibility: str) -> int:
    """How many boxes besides the ego's (row 0) prepare_B2D keeps in a frame's box table:
    with --box-visibility flag, those its visibility filter would keep."""
    rows = table[1:]
    if visibility == "flag":
        rows = rows[rows[:, B2D_BOX_COLUMNS.index("visible")] > 0]
    return len(rows)


class Infos:
    """prepare_B2D's infos of one clip: its anno frames less those where it keeps no box
    (prepare_B2D.py l.336, `if len(gt_boxes) == 0: continue`), which their dataset classes'
    index arithmetic steps over. `kept_boxes(t, anno)`: how many boxes besides the ego's frame
    t keeps (None: boxes not packed, every frame counts)."""

    def __init__(self, anno_at: Callable[[int], dict | None],
                 kept_boxes: Callable[[int, dict], int] | None) -> None:
        self.anno_at, self.kept_boxes = anno_at, kept_boxes
        self._boxless: dict[int, bool] = {}
        self._at: dict[int, int] | None = None    # info frame -> its position
        self._frames: list[int] = []

    def boxless(self, t: int) -> bool:
        """Frame t has a usable anno but no box is kept there (a table that cannot be made
        is not boxless here: the frame's own skip says why)."""
        if self.kept_boxes is None:
            return False
        if t not in self._boxless:
            anno = self.anno_at(t)
            try:
                self._boxless[t] = anno is not None and self.kept_boxes(t, anno) == 0
            except ValueError:
                self._boxless[t] = False
        return self._boxless[t]

    def ahead(self, t: int, frames: list[int], steps: int = SDC_STEPS) -> list[dict | None]:
        """The annos their index arithmetic reaches from frame t (`frames`: the clip's anno
        frames): info position + 5j, j = 1..steps; None past the clip's last info."""
        return [None if f is None else self.anno_at(f)
                for f in self.frames_ahead(t, frames, steps, SDC_STEP)]

    def frames_ahead(self, t: int, frames: list[int], steps: int, step: int) -> list[int | None]:
        """The anno frames of info position + step * j, j = 1..steps, from frame t (None past
        the clip's last info); frame arithmetic where t is no info itself (no sample either)."""
        if self._at is None:
            self._frames = [f for f in frames if self.anno_at(f) is not None
                            and not self.boxless(f)]
            self._at = {f: i for i, f in enumerate(self._frames)}
        if t not in self._at:
            return [t + step * j if self.anno_at(t + step * j) is not None else None
                    for j in range(1, steps + 1)]
        i = self._at[t]
        return [self._frames[i + step * j] if i + step * j < len(self._frames) else None
                for j in range(1, steps + 1)]


def sdc_fut_traj(now: dict, ahead: list[dict | None]) -> np.ndarray:
    """(1, len(ahead), 4) float32 x, y, yaw, valid: get_ego_future_xy (see the module
    docstring) over the annos their index arithmetic reaches (Infos.ahead); the first None
    (past the clip's end) or unusable one ends it, as their clip's end does."""
    cur = world2lidar(now)
    steps = len(ahead)
    xyyaw, valid = np.zeros((1, steps, 3)), np.zeros((1, steps), bool)
    for j, adj in enumerate(ahead):
        try:
            adj2cur = cur @ np.linalg.inv(world2lidar(adj)) if adj is not None else None
        except (ValueError, np.linalg.LinAlgError):
            adj2cur = None
        if adj2cur is None:
            break
        yaw = -math.atan2(adj2cur[1, 0], adj2cur[0, 0]) - math.pi
        while yaw > math.pi:
            yaw -= 2 * math.pi
        while yaw < -math.pi:
            yaw += 2 * math.pi
        xyyaw[0, j] = (adj2cur[0, 3], adj2cur[1, 3], yaw)
        valid[0, j] = True
    return track_array(xyyaw, valid)


def masked_extras() -> list[Extra]:
    """The member --future-labels masked adds: the ego future as theirs."""
    return [Extra(SDC_FUT, f"{SDC_FUT}.npy", "npy", TRACKS, "float32", (None, SDC_STEPS, 4),
                  f"x m, y m, yaw rad (theirs: -yaw - pi), valid; steps 1..{SDC_STEPS} x "
                  f"{SDC_STEP / 10:g} s (Bench2DriveZoo B2D_e2e_dataset.py get_ego_future_xy)",
                  "b2d_lidar")]


def record_fields(pred_len: int) -> tuple[MeasField, ...]:
    """The record field --future-labels masked adds: which future steps are real."""
    return (MeasField(FUTURE_VALID, "bool", shape=(pred_len,)),)


def spec_doc(masked: bool) -> dict[str, Any]:
    """What the manifest's spec says of it (nothing without the option: manifests keep
    their bytes)."""
    return {"future_labels": "masked", "sdc_fut_steps": SDC_STEPS} if masked else {}


__all__ = ["FUTURE_LABELS", "FUTURE_VALID", "Infos", "kept_boxes", "MASKED_SAMPLES", "SDC_FUT", "SDC_STEPS",
           "mask_labels", "masked_extras", "no_expert", "real_steps", "record_fields", "sdc_fut_traj",
           "spec_doc", "world2lidar"]
