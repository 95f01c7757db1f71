"""Agent tracks: per box row of a frame, that actor's past and future positions and yaw in the
frame's own ego frame, linked by actor id across the clip, computed at pack time.

Stored as one float32 member (n_boxes, P + F, 4): x, y, yaw and validity (1/0) per time step,
row i the actor of box row i (the `boxes` member, same order). Time steps run oldest first:
t - P*dt .. t - dt, then t + dt .. t + F*dt (frame t itself is the box row). The loader serves
it as two fields, padded like boxes: `tracks` (B, K_max, P + F, 3) float32 and `tracks_valid`
(B, K_max, P + F) bool, with `tracks_len` / `tracks_valid_len` (B,) beside them. A step is
invalid where the frame is outside the clip or the actor is not kept there; its x, y, yaw are 0.
The horizon, step and frame are the pack's (manifest spec.extras[tracks] units and frame).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..codecbase import SchemaError
from .base import Modality

TRACKS = "tracks"
VALID = "_valid"
COLUMNS = ("x", "y", "yaw", "valid")


class TracksModality(Modality):
    """The tracks kind: one stored (n, T, 4) member served as positions and a validity mask."""

    def served_names(self, extra: Any) -> tuple[str, ...]:
        return extra.name, extra.name + VALID

    def serve(self, value: Any, extra: Any, where: str) -> dict[str, np.ndarray]:
        if not isinstance(value, np.ndarray) or value.ndim != 3 or value.shape[2] != 4 or \
                value.dtype != np.float32:
            raise SchemaError(f"{where}: {extra.member} decodes to "
                              f"{getattr(value, 'shape', value)}; expected float32 (n, T, 4)",
                              fix="re-pack the shard")
        return {extra.name: np.ascontiguousarray(value[..., :3]),
                extra.name + VALID: value[..., 3] > 0.5}


def track_array(xy_yaw: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """(n, T, 3) positions and yaw, (n, T) validity -> the stored (n, T, 4) float32, invalid
    steps zeroed (so a padding value is never mistaken for a position)."""
    out = np.zeros((*valid.shape, 4), np.float32)
    out[..., :3] = np.where(valid[..., None], xy_yaw, 0.0)
    out[..., 3] = valid
    return out


TRACKS_KIND = TracksModality(TRACKS, "float32", (None, None, 3), "m, m, rad", collate="rows",
                             doc="per box row: past then future (x, y, yaw) in the frame's ego "
                                 "frame (B, K_max, P+F, 3), tracks_valid (B, K_max, P+F) bool, "
                                 "tracks_len (B,)")

__all__ = ["COLUMNS", "TRACKS", "TRACKS_KIND", "TracksModality", "VALID", "track_array"]
