"""The chosen samples decoded as the loader decodes them (carla_wds.load's own decode stage,
with the fields the pack holds: boxes, LiDAR points, calibration, the route), and each turned
into what the page draws: camera JPEGs with projected boxes, and a bird's-eye dict in
(right, forward) metres through carla_wds.train.frames (the axes `show` draws with)."""
from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from ..load import CARLABatch, CARLAWebData
from ..load.decode.fields import check_fields
from ..load.decode.stages import decode_batches, group
from ..modalities.boxes import BOX_CLASSES
from ..train.frames import canonical, label_frames, to_right_forward
from .draw import camera_jpeg, corners

log = logging.getLogger(__name__)
_EGO = BOX_CLASSES["ego"]
_FOOTPRINT = [0, 2, 6, 4]   # corners() indices of the bottom face, in ring order
SCENE_KINDS = ("boxes", "lidar")


def scene_fields(spec: Any) -> list[str]:
    """The fields the report draws that the pack holds: its first boxes and LiDAR points
    member, calibration, and the measurements record when it carries a route."""
    fields = []
    for kind in SCENE_KINDS:
        fields += [e.name for e in spec.extras if e.modality == kind and e.twin_of is None][:1]
    for extra in (["calibration"], ["measurements"] if "route" in dict(spec.frames) else []):
        try:
            if extra and check_fields(spec, extra):
                fields += extra
        except ValueError:
            pass   # the pack does not hold it: nothing of it is drawn
    return fields


def decode(data: CARLAWebData, raws: list[dict]) -> CARLABatch:
    """One batch of `raws` through the loader's decode stage (eval: no augmentation or
    draws), with data's fields, image size and each camera's recorded size."""
    opts = replace(data.field_opts, train=False)
    return next(decode_batches(group(iter(raws), len(raws), 1), data.spec, data.image_size,
                               on_error="skip", sizes=data.manifest.sizes_of(data.spec.cameras),
                               field_opts=opts))


def _in(points: torch.Tensor, frames: dict[str, str], label: str) -> np.ndarray | None:
    """(..., 2) points of `label` as (right, forward) metres, or None when the manifest names
    no frame for it (then nothing is drawn rather than drawn in guessed axes)."""
    if label not in frames:
        log.debug("no frame for %s in the manifest: not drawn", label)
        return None
    return to_right_forward(points.double(), canonical(frames[label])).numpy()


def _boxes(batch: CARLABatch, i: int, frames: dict[str, str]) -> list[tuple[int, np.ndarray]]:
    """Sample i's boxes (not the ego's own) as (class, (8, 3) corners in (right, forward, up))."""
    if batch.boxes is None or "boxes" not in frames:
        return []
    out = []
    for row in batch.boxes[i, :int(batch.boxes_len[i])].double().numpy():
        if int(row[0]) == _EGO:
            continue
        c = corners(row)
        rf = _in(torch.from_numpy(c[:, :2]), frames, "boxes")
        out.append((int(row[0]), np.c_[rf, c[:, 2]]))
    return out


def bev_of(batch: CARLABatch, i: int, frames: dict[str, str]) -> dict[str, Any]:
    """Sample i's bird's-eye layers in (right, forward) metres."""
    wp_frame, tp_frame = label_frames(frames)
    bev: dict[str, Any] = {
        "waypoints": to_right_forward(batch.waypoints[i].double(), wp_frame).numpy(),
        "target": to_right_forward(batch.target_point[i].double(), tp_frame).numpy()}
    if batch.route is not None:
        bev["route"] = _in(batch.route[i].reshape(-1, 2), frames, "route")
    if batch.lidar is not None and batch.lidar.dim() == 3:   # points, not a histogram
        pts = batch.lidar[i, :int(batch.lidar_len[i]), :2]
        bev["lidar"] = _in(pts, frames, "lidar")
    bev["boxes"] = [(c, p[_FOOTPRINT, :2]) for c, p in _boxes(batch, i, frames)]
    return bev


def cameras_of(batch: CARLABatch, i: int, frames: dict[str, str]) -> list[bytes]:
    """Sample i's cameras as JPEGs, boxes projected where the pack has calibration."""
    boxes = None
    if batch.intrinsics is not None and batch.cam2ego is not None:
        # project() takes CARLA's ego axes (forward, right, up)
        boxes = [(c, p[:, [1, 0, 2]]) for c, p in _boxes(batch, i, frames)]
    out = []
    for cam in range(batch.images.shape[1]):
        k = None if boxes is None else batch.intrinsics[i, cam].numpy()
        c2e = None if boxes is None else batch.cam2ego[i, cam].numpy()
        out.append(camera_jpeg(batch.images[i, cam].numpy(), boxes, k, c2e))
    return out
