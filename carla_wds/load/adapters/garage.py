"""carla_garage's camera twin: with probability p a training sample's `*_augmented` members
(the camera set garage renders shifted by `augmentation_translation` m and turned by
`augmentation_rotation` deg) stand in for the originals, and its labels move with the camera as
garage's loader moves them (autonomousvision/carla_garage@1448bed team_code/data.py
__getitem__: augment_target_point, augment_route, get_waypoints, align for the LiDAR,
get_bbox_label for the boxes). The draw is a function of (seed, epoch, key) only.

It applies to any shards whose manifest declares twin members (spec.extras[].twin_of); the
caller's option (`adapters={"garage_camera_twin": p}`, or the older `twin_p=`) is p.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ...codecs import codec_named
from ...modalities.measurements import MEASUREMENTS
from ...rng import derive_seed, draw_key, numpy_rng
from ...schema import SampleSpec
from .base import Draw, LoadAdapter, Raw, SampleState

NAME = "garage_camera_twin"


def augment_points(points: np.ndarray, y: float, yaw_deg: float) -> np.ndarray:
    """carla_garage's augment_target_point / augment_route: R(yaw).T @ (p - (0, y)), in its
    vehicle frame (x forward, y right; yaw in degrees). Works on the first two columns of
    (..., 2+) arrays; any further columns (LiDAR z) are returned unchanged, as its `align`
    leaves z alone (rotation about z, shift along y)."""
    p = np.asarray(points, np.float64)
    a = np.deg2rad(yaw_deg)
    rot = np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
    out = p.copy()
    out[..., :2] = (p[..., :2] - np.array([0.0, y])) @ rot
    return out.astype(np.float32)


def _normalize_angle(x: np.ndarray) -> np.ndarray:
    """carla_garage transfuser_utils.normalize_angle, elementwise: x mod 2pi, minus 2pi above pi."""
    a = np.mod(x, 2 * np.pi)
    return np.where(a > np.pi, a - 2 * np.pi, a)


def _move_boxes(boxes: np.ndarray, y: float, yaw_deg: float) -> np.ndarray:
    """Box rows (boxes.BOX_COLUMNS) as carla_garage's get_bbox_label moves them: position
    R(yaw).T @ (p - (0, y)), yaw - yaw_rad normalised; z, extents and the rest unchanged.
    Every row moves, the ego's too (garage drops its ego box; here it stays, in the same
    frame as the others, so class 4 is where the ego is seen from the augmented camera)."""
    out = boxes.copy()
    if len(out):
        out[:, 1:3] = augment_points(boxes[:, 1:3], y, yaw_deg)
        out[:, 7] = _normalize_angle(boxes[:, 7].astype(np.float64) - np.deg2rad(yaw_deg))
    return out


def move_labels(labels: dict[str, Any], y: float, yaw_deg: float) -> None:
    """The labels of the augmented camera set, as carla_garage's loader moves them
    (team_code/data.py __getitem__: augment_target_point, augment_route, get_waypoints, align
    for the LiDAR, get_bbox_label for the boxes). `boxes_raw` JSON stays as saved."""
    labels["target_point"] = augment_points(labels["target_point"], y, yaw_deg)
    wp = augment_points(labels["waypoints"], y, yaw_deg)
    labels["waypoints"] = wp
    labels["waypoints_diff"] = np.diff(np.concatenate([np.zeros((1, 2), np.float32), wp]),
                                       axis=0).astype(np.float32)
    fields = labels.get("fields") or {}
    m = fields.get(MEASUREMENTS)
    for name in ("target_point", "aim_wp", "route", "route_raw"):
        if m is not None and name in m:
            m[name] = augment_points(m[name], y, yaw_deg).reshape(m[name].shape)
            if f"{name}_len" in m:
                # rows past <name>_len are the packer's zero padding, not points: keep them 0
                m[name][int(m[f"{name}_len"]):] = 0
    if isinstance(fields.get("lidar"), np.ndarray):
        fields["lidar"] = augment_points(fields["lidar"], y, yaw_deg)
    if isinstance(fields.get("boxes"), np.ndarray):
        fields["boxes"] = _move_boxes(fields["boxes"], y, yaw_deg)


@dataclass(frozen=True)
class CameraTwin(LoadAdapter):
    """p: the share of training samples given the twin set; twins: (member, its twin member);
    record: the measurements member that holds each sample's augmentation."""
    p: float = 0.0
    twins: tuple[tuple[str, str], ...] = ()
    record: str | None = None
    name: str = NAME

    def before_decode(self, raw: Raw, draw: Draw, state: SampleState) -> Raw:
        """The sample with its twin members in the originals' places when the (seed, epoch,
        key) draw picks the augmented set (state.twin, the move in state.values)."""
        if self.p <= 0 or not draw.train:
            return raw
        rng = numpy_rng(derive_seed(draw.seed, draw.epoch, draw_key(raw), "twin"))
        if rng.random() >= self.p:
            return raw
        rec = codec_named("record").decode(raw[self.record])
        state.twin = True
        state.values[NAME] = (float(rec["augmentation_translation"]),
                              float(rec["augmentation_rotation"]))
        swapped = dict(raw)
        for member, twin in self.twins:
            swapped[member] = raw[twin]
        return swapped

    def after_labels(self, labels: dict[str, Any], state: SampleState) -> None:
        """Shards with a twin always say which set a sample is (1: the twin's; eval: 0)."""
        labels.setdefault("fields", {})["camera_set"] = np.array(state.twin, np.int8)
        if state.twin:
            move_labels(labels, *state.values[NAME])


class CameraTwinKind:
    """Applies to shards that hold twin members; its option is p (None or 0: never drawn)."""
    name, keyword = NAME, "twin_p"

    def build(self, spec: SampleSpec, option: Any) -> LoadAdapter | None:
        p = 0.0 if option is None else option
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"twin_p {p}: expected a probability in [0, 1]")
        by_name = {e.name: e for e in spec.extras}
        twins = tuple((f"{e.twin_of}.{spec.image_format}" if e.twin_of in spec.cameras
                       else by_name[e.twin_of].member, e.member)
                      for e in spec.extras if e.twin_of)
        if p > 0 and (not twins or MEASUREMENTS not in by_name):
            raise ValueError(f"twin_p {p}: these shards have no augmented camera twin and its "
                             "measurements (pack a layout with twins, such as garage)")
        if not twins:
            return None
        return CameraTwin(p, twins, by_name[MEASUREMENTS].member if p > 0 else None)
