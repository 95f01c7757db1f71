"""From a batch to the model's inputs, and what the loader must decode for them.

The model config picks its inputs (cameras always; `model.lidar` a LiDAR histogram preset,
`model.measurements` extra values from the shards' measurements record). This module asks the
loader for those fields, checks them against the shards' manifest before anything trains, and
turns a CARLABatch into the model's tensors, in one place for training, eval and `show`.

With history windows (data.history=K) a batch's per-frame values have a time axis (B, K + 1,
...): `predict` gives the model the whole window, and `current_frame` is the batch of each
window's own frame, which the loss, eval's metrics and `show` read as they read any batch.
"""
from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import fields as dc_fields
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor

from ..datasets import lidar_preset, lidar_presets
from ..modalities.measurements import MEASUREMENTS, MeasField
from ..load import CARLABatch, CARLAWebData, Decode
from ..schema import SampleSpec
from .config import ConfigError, TrainConfig
from .control import has_expert_controls
from .frames import label_frames
from .model import (
    POSITION_SCALE,
    SPEED_SCALE,
    ModelConfig,
    ModelIO,
    Past,
    WaypointModel,
    build_model,
)

# Extra measurement inputs are scaled by their declared units, as speed and positions are,
# so every input the MLP sees is O(1).
_UNIT_SCALE = {"m": POSITION_SCALE, "m/s": SPEED_SCALE, "deg": 90.0}


def record_fields(spec: SampleSpec) -> dict[str, MeasField]:
    """The fields of the shards' measurements record by name ({} when they have none)."""
    extra = next((e for e in spec.extras if e.name == MEASUREMENTS), None)
    return {f.name: f for f in extra.fields} if extra is not None else {}


def check_inputs(cfg: ModelConfig, spec: SampleSpec, where: str) -> None:
    """ConfigError naming the key and what the shards hold, for inputs they do not have."""
    lidar = [e for e in spec.extras if e.modality == "lidar" and e.twin_of is None]
    if cfg.lidar is not None and not lidar:
        raise ConfigError(f"model.lidar={cfg.lidar}: {where} holds no LiDAR (its extras: "
                          f"{[e.name for e in spec.extras] or 'none'}). Fix: model.lidar=null, "
                          "or shards packed with a layout that has LiDAR (one with a "
                          f"histogram preset: {', '.join(sorted(lidar_presets()))})")
    fields = record_fields(spec)
    missing = [m for m in cfg.measurements if m not in fields]
    if missing:
        raise ConfigError(f"model.measurements: {missing} not in the measurements of {where}; "
                          f"they hold {sorted(fields) or 'no measurements record'}. Fix: "
                          "model.measurements=[...] with names from that list, or []")


def loader_options(cfg: ModelConfig, spec: SampleSpec | None = None) -> dict[str, Any]:
    """CARLAWebData keywords for the fields the model reads; with the val shards' spec, also
    the measurements that carry the expert's controls (eval's steer/throttle/brake MAE)."""
    fields = ["lidar"] if cfg.lidar is not None else []
    controls = spec is not None and has_expert_controls(list(record_fields(spec)))
    if cfg.measurements or controls:
        fields.append(MEASUREMENTS)
    return {"fields": fields or None, "decode": Decode(lidar_histogram=cfg.lidar)}


def same_view(train: CARLAWebData, val: CARLAWebData) -> None:
    """ConfigError unless val serves what train does: the cameras, pred_len and label frames
    the model is built for (a mix of layouts serves its common view, docs/mixing.md)."""
    def view(d: CARLAWebData) -> tuple:
        return (len(d.camera_names), d.pred_len, label_frames(dict(d.spec.frames)),
                d.waypoint_hz)
    if view(train) != view(val):
        raise ConfigError(f"data.val {val.where}: (cameras, pred_len, (waypoint, target point) "
                          f"frames, waypoint Hz) {view(val)}, but the train data serves "
                          f"{view(train)}; eval "
                          "would score the model in another frame. Fix: data.val_mix=MIX.yaml "
                          "over val packs of the train mix's layouts (served in its common "
                          "view), or data.val of the train data's layout")


def model_io(cfg: TrainConfig, spec: SampleSpec) -> ModelIO:
    """What the data decides about the model: frame, interval, input sizes."""
    fields = record_fields(spec)
    chosen = [fields[m] for m in cfg.model.measurements]
    channels = len(lidar_preset(cfg.model.lidar).channels) if cfg.model.lidar else 0
    return ModelIO(frame=label_frames(dict(spec.frames))[0], frame_dt=cfg.data.frame_dt,
                   extra_dim=sum(math.prod(f.shape) for f in chosen), lidar_channels=channels,
                   extra_scales=tuple(_UNIT_SCALE.get(f.units, 1.0) for f in chosen),
                   history=cfg.data.history)


def model_for(cfg: TrainConfig, data: CARLAWebData) -> WaypointModel:
    """The model the config describes for these shards (inputs checked against them)."""
    check_inputs(cfg.model, data.spec, data.where)
    return build_model(cfg.model, len(data.camera_names), data.pred_len,
                       model_io(cfg, data.spec))


def extra_inputs(model: WaypointModel, batch: CARLABatch) -> Tensor | None:
    """(B, extra_dim) selected measurement values, flattened and scaled by their units; zeros
    for a batch of padding only (the loader then has no record to give)."""
    names, b = model.cfg.measurements, batch.speed.shape[0]
    if not names:
        return None
    if not batch.measurements:
        return torch.zeros(b, model.io.extra_dim, device=batch.speed.device)
    return torch.cat([batch.measurements[m].reshape(b, -1).float() / scale
                      for m, scale in zip(names, model.io.extra_scales)], dim=1)


def _last_step(value: Any, b: int, steps: int) -> Any:
    if isinstance(value, Tensor) and value.dim() >= 2 and value.shape[:2] == (b, steps):
        return value[:, -1]
    if isinstance(value, dict):
        return {k: _last_step(v, b, steps) for k, v in value.items()}
    if isinstance(value, list) and len(value) == b and all(
            isinstance(v, list) and len(v) == steps for v in value):
        return [v[-1] for v in value]
    return value


def current_frame(batch: CARLABatch) -> CARLABatch:
    """A windowed batch (B, K + 1, ...) -> the batch of each window's own (last) frame, as a
    history=0 loader serves it; a batch without windows as it is."""
    if batch.frame_valid is None:
        return batch
    b, steps = batch.frame_valid.shape
    keep = ("keys", "valid", "errors", "frame_valid", "frame_keys")
    return replace(batch, frame_valid=None, frame_keys=None,
                   **{f.name: _last_step(getattr(batch, f.name), b, steps)
                      for f in dc_fields(batch) if f.name not in keep})


def _images_and_past(raw: WaypointModel, batch: CARLABatch) -> tuple[Tensor, Past | None]:
    """The current frames' normalised images, and the earlier K frames of each window when
    the model has history (each frame normalised once)."""
    if not raw.io.history:
        return current_frame(batch).normalized_images(), None
    if batch.frame_valid is None or batch.frame_valid.shape[1] != raw.io.history + 1:
        got = 0 if batch.frame_valid is None else batch.frame_valid.shape[1] - 1
        raise ValueError(f"this model was trained with data.history={raw.io.history}, the batch "
                         f"has history {got}. Fix: load with CARLAWebData(history="
                         f"{raw.io.history}), as the checkpoint's config says")
    images = batch.normalized_images()
    return images[:, -1], Past(images=images[:, :-1], speed=batch.speed[:, :-1],
                               valid=batch.frame_valid[:, :-1])


def predict(model: WaypointModel | torch.nn.Module, batch: CARLABatch,
            autocast: Any = None) -> Tensor:
    """The model's waypoints for a batch (model may be the DDP wrapper); a windowed batch
    gives a model with history its past frames."""
    raw: WaypointModel = getattr(model, "module", model)
    images, past = _images_and_past(raw, batch)
    batch = current_frame(batch)
    b = batch.speed.shape[0]
    lidar = None
    if raw.io.lidar_channels:
        lidar = batch.lidar
        if lidar is None:   # padding only: no sample had a cloud to histogram
            lidar = torch.zeros(b, raw.io.lidar_channels, 8, 8, device=batch.speed.device)
    extra = extra_inputs(raw, batch)
    with autocast or nullcontext():
        return model(images, batch.speed, batch.target_point, batch.command,
                     lidar=lidar, extra=extra, **({"past": past} if past is not None else {}))


def autocast_for(device: str, bf16: bool):
    """bf16 autocast on CUDA when configured; nothing on the CPU."""
    if device.startswith("cuda") and bf16:
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return nullcontext()


__all__ = ["autocast_for", "check_inputs", "current_frame", "loader_options", "model_for",
           "model_io", "predict", "record_fields"]
