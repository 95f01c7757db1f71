"""Agent tracks of a route layout's boxes (the layout YAML's `tracks:`; garage ships it): per box
row of frame t, the same actor (by its `id` column) at frames t + k * step, k = -past..-1 then
1..future, in frame t's ego frame, as modalities/tracks.py stores them.

carla_garage's boxes files (carla_garage@1448bed team_code/data_agent.py get_bounding_boxes)
give each box's `position` and `yaw` in that frame's ego frame (CARLA's vehicle frame) and its
actor `id`; the frame's `ego_matrix` (world <- vehicle) places it in the world, so in frame t:
p_t = inv(M_t) @ M_f @ [position_f, 1] and yaw_t = yaw_f + yaw(M_f) - yaw(M_t). A step is valid
where frame f exists, reads and its boxes hold the id (the collector's own radius decides).
Defaults follow Bench2DriveZoo's UniAD dataset in seconds: 4 past and 12 future steps of 0.5 s
(at garage's 4 Hz, step 2 frames). Box files are read here (main process) and again by the
encoder: twice per frame, for tracks only.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ....datasets import box_parser
from ....modalities.boxes import BOX_COLUMNS, FILL
from ....modalities.tracks import TRACKS, track_array
from ...sources import decode_json, read_bytes
from .layout_parts import _only, fail

_ID, _X, _YAW = BOX_COLUMNS.index("id"), BOX_COLUMNS.index("x"), BOX_COLUMNS.index("yaw")
EGO_FRAMES = ("garage", "carla")   # the box frames tracks can follow (CARLA's vehicle frame)
TRACKS_MEMBER = f"{TRACKS}.npy"


@dataclass(frozen=True)
class TrackRule:
    """`tracks: {sensor: boxes, past: 4, future: 12, step: 2}`."""
    sensor: str
    past: int = 4
    future: int = 12
    step: int = 2


def parse_tracks(data: Any, sensors: tuple, frames: dict[str, str], where: str
                 ) -> TrackRule | None:
    """The layout's tracks rule: a boxes sensor in CARLA's vehicle frame, whole numbers."""
    if data is None:
        return None
    d = _only(data, ("sensor", "past", "future", "step"), where, "tracks")
    boxes = [s for s in sensors if s.name == d.get("sensor") and s.read.startswith("boxes_")]
    if not boxes or frames.get(boxes[0].name, frames.get("boxes")) not in EGO_FRAMES:
        raise fail(where, "tracks.sensor", d.get("sensor"), "a boxes sensor whose frame is "
                   f"one of {list(EGO_FRAMES)} (CARLA's vehicle frame)")
    rule = TrackRule(boxes[0].name, d.get("past", 4), d.get("future", 12), d.get("step", 2))
    for key in ("past", "future", "step"):
        v = getattr(rule, key)
        if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= 64 or \
                key == "step" and v == 0:
            raise fail(where, f"tracks.{key}", v, "a whole number 0..64 (step >= 1)")
    return rule


def route_boxes(paths: dict[int, str], read: str, gz: bool) -> dict[int, np.ndarray]:
    """frame -> its box table, for the frames whose boxes file reads (others: no tracks)."""
    out = {}
    for t, path in paths.items():
        try:
            out[t] = box_parser(read)(decode_json(read_bytes(Path(path)), gz))
        except (ValueError, OSError):   # the encoder reports that frame's own file
            continue
    return out


def route_tracks(t: int, tables: dict[int, np.ndarray], poses: dict[int, np.ndarray],
                 rule: TrackRule) -> np.ndarray | None:
    """(n_rows, past + future, 4) of frame t's box rows; None where frame t's boxes or pose
    are not read (the encoder then reports its file)."""
    if t not in tables or t not in poses:
        return None
    rows, now = tables[t], poses[t]
    offsets = [*range(-rule.past, 0), *range(1, rule.future + 1)]
    out = np.zeros((len(rows), len(offsets), 3))
    valid = np.zeros((len(rows), len(offsets)), bool)
    for j, k in enumerate(offsets):
        f = t + k * rule.step
        if f not in tables or f not in poses:
            continue
        move = np.linalg.solve(now, poses[f])          # frame f's ego -> frame t's ego
        turn = _yaw(poses[f]) - _yaw(now)
        by_id = {int(r[_ID]): r for r in tables[f] if r[_ID] != FILL}
        for i, actor in enumerate(rows[:, _ID]):
            r = by_id.get(int(actor)) if actor != FILL else None
            if r is None:
                continue
            out[i, j, :2] = (move @ np.append(r[_X:_X + 3].astype(np.float64), 1.0))[:2]
            yaw = float(r[_YAW]) + turn
            out[i, j, 2] = math.atan2(math.sin(yaw), math.cos(yaw))
            valid[i, j] = True
    return track_array(out, valid)


def _yaw(m: np.ndarray) -> float:
    return math.atan2(m[1, 0], m[0, 0])


__all__ = ["TRACKS_MEMBER", "TrackRule", "parse_tracks", "route_boxes", "route_tracks"]
