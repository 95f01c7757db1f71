"""`--future-boxes F` (issue 42): UniAD's future box sets, the boxes of the F infos after frame
t, each in its own frame, with each frame's pose so that the transform to frame t follows.

Sources (Thinklab-SJTU/Bench2DriveZoo@uniad/vad 10a2e5d; docs/datasets/bench2drive.md has the
full account):
- B2D_e2e_dataset.py get_data_info l.255-266: `all_frames` holds the info indices index -
  occ_receptive_field + 1 .. index + occ_n_future (defaults 3 and 6, l.27; the B2D configs pass
  neither, adzoo/uniad/configs/stage2_e2e/base_e2e_b2d.py l.741-759, and their
  occ_n_future_max is 6, l.152), -1 where outside the info list or in another clip's folder;
  `future_frames = all_frames[occ_receptive_field - 1:]`: t, t+1 .. t+6 in INFOS (consecutive
  10 Hz anno frames less those without a kept box, prepare_B2D.py l.336), not the 5-frame
  sample interval.
- l.267-275: per future frame `get_ann_boxes_only` (l.434-462: that info's gt_boxes in its own
  LiDAR frame, labels by CLASSES with -1 for other names, gt_inds), None at -1; l.277
  `occ_get_transforms` (l.574-605: per frame lidar2ego rotation/translation and
  ego2global = inv(world2ego), None at -1). GenerateOccFlowLabels
  (mmcv/datasets/pipelines/occflow_label.py l.49-78 reframe_boxes, l.112-132) moves each
  frame's boxes lidar -> ego -> world -> frame t's ego -> frame t's lidar; `gt_future_boxes`
  / `gt_future_labels` are those of the valid frames only (l.121-132).

Here, per sample:
- `future_boxes.npy` (N, 17) float32: the box tables (vocab.B2D_BOX_COLUMNS, the ego's row
  first, made by boxes.py with the pack's rules, so each equals that frame's own `boxes`
  member) of offsets k = 1..F, each with a last column `offset` = k. Offset 0 is the sample's
  own `boxes` member, not stored twice. Stored in the boxes kind: served as
  fields["future_boxes"] (B, N_max, 17) with fields["future_boxes_len"].
- record `future_boxes_valid` (F + 1,) bool, `future_boxes_frames` (F + 1,) int32 (the anno
  frame of offset k, -1 past the clip's last info) and `future_boxes_to_t` (F + 1, 4, 4)
  float32: the transform of offset k's ego frame into frame t's, inv(ego2world_t) @
  ego2world_t+k of the frames' `ego2world` (inv(anno world2ego), temporal.ego_pose), composed
  in float64, mirrored as the boxes are with --handedness right (M @ T @ M, M = diag(1, -1,
  1, 1)); identity at offset 0 (frame t itself, always valid), zeros where not valid. (The
  record holds float32, not a world pose's float64: a relative transform of metres keeps
  ~1e-6 m.)
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ....extras import Extra
from ....modalities.measurements import MeasField
from .temporal import ego_pose
from .vocab import B2D_BOX_COLUMNS

FUTURE_BOXES = "future_boxes"
COLUMNS: tuple[str, ...] = B2D_BOX_COLUMNS + ("offset",)
VALID, FRAMES, TO_T = (f"{FUTURE_BOXES}_{s}" for s in ("valid", "frames", "to_t"))
MIRROR = np.diag([1.0, -1.0, 1.0, 1.0])
UNIAD_STEPS = 6       # B2D_e2e_dataset.py occ_n_future (l.27)
MAX_STEPS = 50


class FutureFrameError(ValueError):
    """A future frame's box table cannot be made: `frame` names it."""

    def __init__(self, frame: int, reason: str) -> None:
        super().__init__(f"future frame {frame:05d} (future box sets): {reason}")
        self.frame = frame


def extras(frame: str) -> list[Extra]:
    """The member --future-boxes adds (its record fields: record_fields)."""
    return [Extra(FUTURE_BOXES, f"{FUTURE_BOXES}.npy", "npy", "boxes", "float32",
                  (None, len(COLUMNS)), "columns " + " ".join(COLUMNS) + " (the boxes "
                  "table's, each in its own frame's ego frame, then the info offset k >= 1 "
                  "after frame t; measurements future_boxes_to_t[k] moves them into frame "
                  "t's)", frame)]


def record_fields(steps: int, frame: str) -> tuple[MeasField, ...]:
    """The record fields --future-boxes adds: per offset 0..F, valid, frame and the
    transform into frame t's ego frame (`frame`: the boxes')."""
    n = steps + 1
    return (MeasField(VALID, "bool", (n,)), MeasField(FRAMES, "int32", (n,)),
            MeasField(TO_T, "float32", (n, 4, 4), "m", frame))


def spec_doc(steps: int) -> dict[str, Any]:
    """What the manifest's spec says of it (nothing without the option)."""
    return {"future_boxes": steps, "future_box_columns": list(COLUMNS)} if steps else {}


def members(t: int, now: dict, ahead: list[int | None], anno_at: Callable[[int], dict | None],
            table_of: Callable[[int, dict], np.ndarray], mirror: bool = False
            ) -> tuple[np.ndarray, dict[str, Any]]:
    """Frame t's future box sets: `ahead` the anno frames of infos t+1..t+F (None past the
    clip's last info, Infos.frames_ahead), `table_of(frame, anno)` a frame's box table (the
    planner's cached one), `mirror` the boxes' right-handed frame (--handedness right).
    Returns the (N, 17) table and the record values; FutureFrameError where a future frame's
    table or pose cannot be made."""
    n = len(ahead) + 1
    valid, frames = np.zeros(n, bool), np.full(n, -1, np.int32)
    poses = np.zeros((n, 4, 4), np.float64)
    valid[0], frames[0], poses[0] = True, t, ego_pose(now)
    rows = [np.zeros((0, len(COLUMNS)), np.float32)]
    for k, f in enumerate(ahead, 1):
        if f is None:
            continue
        try:
            anno = anno_at(f)
            if anno is None:
                raise ValueError("no usable anno")
            table, poses[k] = table_of(f, anno), ego_pose(anno)
        except (ValueError, KeyError, TypeError) as exc:
            raise FutureFrameError(f, str(exc)) from None
        rows.append(np.column_stack([table, np.full(len(table), k, np.float32)]))
        valid[k], frames[k] = True, f
    to_t = np.linalg.inv(poses[0]) @ poses[valid]
    if mirror:
        to_t = MIRROR @ to_t @ MIRROR
    out = np.zeros((n, 4, 4), np.float32)
    out[valid] = to_t
    return np.concatenate(rows).astype(np.float32), {VALID: valid, FRAMES: frames, TO_T: out}


__all__ = ["COLUMNS", "FRAMES", "FUTURE_BOXES", "FutureFrameError", "MAX_STEPS", "TO_T",
           "UNIAD_STEPS", "VALID", "extras", "members", "record_fields", "spec_doc"]
