"""`carla-wds show`: a montage of samples with ground truth and, given a checkpoint, predictions."""
from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ..load import CARLABatch, CARLAWebData, History
from ..manifest import read_manifest
from .checkpoint import CheckpointError, load_checkpoint, stored_config
from .config import ConfigError, TrainConfig, config_from_dict
from .frames import label_frames, to_right_forward
from .inputs import current_frame, loader_options, model_for, predict
from .model import WaypointModel

_FIX = "Fix: pass --checkpoint the checkpoint.pt that `carla-wds train` wrote into its run_dir"
log = logging.getLogger(__name__)


class ShowError(ValueError):
    """A --checkpoint that show cannot draw predictions from; one line naming the file."""


def show(shards: str | Path, out: str | Path, checkpoint: str | Path | None = None,
         n: int = 6, image_size: tuple[int, int] = (128, 256), on_error: str = "raise",
         pick: Callable[[CARLAWebData, int], CARLABatch] | None = None) -> Path:
    """Write a PNG of n samples of `shards` with their waypoints: those `pick(data, n)`
    returns (`carla-wds show` passes view's choice across routes, commands and speeds,
    view/pick.py; train sits below view and cannot import it), else the first n in eval
    order. With on_error="skip", bad samples are left out of it."""
    from .viz import montage
    model, cameras, ckpt, inputs = None, None, None, {}
    if checkpoint is not None:
        ckpt, cfg = _read(checkpoint)
        image_size, cameras = tuple(cfg.data.image_size), cfg.data.cameras
        inputs = {**loader_options(cfg.model),
                  "history": History(cfg.data.history, stride=cfg.data.history_stride)}
    data = _shards(shards, n, image_size, cameras, checkpoint, on_error, inputs)
    batch = pick(data, n) if pick is not None else next(iter(data))
    if ckpt is not None:
        model = _model(checkpoint, ckpt, cfg, data)
        with torch.no_grad():
            pred = predict(model, batch)
    rows = bev_rows(current_frame(batch), dict(data.spec.frames),
                    pred if model is not None else None)
    title = f"{shards}" + (f" - predictions of {checkpoint}" if checkpoint else "")
    return montage(rows, data.camera_names, out, title=title)


def bev_rows(batch: Any, frames: dict[str, str], pred: torch.Tensor | None = None
             ) -> list[dict[str, Any]]:
    """The montage's rows: each valid sample's images, and its waypoints, target point and
    prediction as (right, forward) metres, from the frame each label is in (the manifest's
    spec.frames: garage and bench2drive are (forward, right), TCP (right, -forward)), so the
    bird's-eye panel draws every layout driving up the page."""
    wp_frame, tp_frame = label_frames(frames)
    waypoints = to_right_forward(batch.waypoints, wp_frame)
    target = to_right_forward(batch.target_point, tp_frame)
    pred = None if pred is None else to_right_forward(pred, wp_frame)
    rows = []
    for i in range(len(batch)):
        if not batch.valid[i]:
            continue
        row = {"images": batch.images[i].numpy(), "waypoints": waypoints[i].numpy(),
               "target_point": target[i].numpy(), "key": batch.keys[i],
               "command": int(batch.command[i].argmax())}
        if pred is not None:
            row["pred"] = pred[i].numpy()
        rows.append(row)
    return rows


def _read(checkpoint: str | Path) -> tuple[dict[str, Any], TrainConfig]:
    """The checkpoint (weights_only=True, never unpickling objects) and its config, held to
    the config's bounds (bounds.py) before anything is built from it."""
    try:
        ckpt = load_checkpoint(checkpoint)
    except CheckpointError as exc:
        raise ShowError(f"--checkpoint {checkpoint}: {exc.problem}. {_FIX}") from None
    try:
        return ckpt, config_from_dict(_without_pretrained(checkpoint, stored_config(ckpt)),
                                      f"--checkpoint {checkpoint}'s config")
    except (ConfigError, TypeError) as exc:
        raise ShowError(f"--checkpoint {checkpoint}: its stored config does not fit this "
                        f"carla-wds ({exc}). {_FIX}, with the carla-wds version that wrote "
                        "it") from None


def _without_pretrained(checkpoint: str | Path, config: Any) -> Any:
    """The stored config with model.pretrained null: the checkpoint holds the trained weights,
    and a file must not make show open another file (issue 38: it named any path)."""
    model = config.get("model") if isinstance(config, dict) else None
    if not isinstance(model, dict) or model.get("pretrained") is None:
        return config
    log.info("--checkpoint %s: its model.pretrained is ignored: the checkpoint holds the "
             "trained weights, and show opens no file a checkpoint names", checkpoint)
    return {**config, "model": {**model, "pretrained": None}}


def _shards(shards: str | Path, n: int, image_size: tuple[int, int], cameras: list[str] | None,
            checkpoint: str | Path | None, on_error: str, inputs: dict[str, Any]) -> CARLAWebData:
    if checkpoint is not None and cameras is not None:
        held = read_manifest(str(shards)).spec.cameras
        if missing := [c for c in cameras if c not in held]:
            raise ShowError(f"--checkpoint {checkpoint}: its model was trained on data.cameras "
                            f"{cameras}, but the shards hold {held} (no {missing}). Fix: show "
                            "shards with those cameras, or a checkpoint trained on these "
                            "shards' cameras")
    return CARLAWebData(str(shards), batch_size=max(1, n), mode="eval", image_size=image_size,
                        cameras=cameras, rank=0, world_size=1, on_error=on_error, **inputs)


def _model(checkpoint: str | Path, ckpt: dict[str, Any], cfg: TrainConfig,
           data: CARLAWebData) -> WaypointModel:
    """The model the checkpoint's config describes for these shards, with its weights."""
    try:
        model = model_for(cfg, data)
    except ConfigError as exc:
        raise ShowError(f"--checkpoint {checkpoint}: its model's inputs are not in {data.where}: "
                        f"{exc}") from None
    mismatch = _mismatch(model.state_dict(), ckpt["model"])
    if mismatch:
        raise ShowError(f"--checkpoint {checkpoint}: its weights do not match the model its "
                        f"config describes for {len(data.camera_names)} cameras "
                        f"(model.backbone={cfg.model.backbone}, model.feature_dim="
                        f"{cfg.model.feature_dim}): {mismatch}. Fix: show shards with the "
                        "cameras it was trained on, or pass a checkpoint carla-wds train wrote "
                        "unedited") from None
    model.load_state_dict(ckpt["model"])
    return model.eval()


def _mismatch(expected: dict[str, torch.Tensor], got: Any) -> str:
    """'' when `got` is a state_dict of the same keys and shapes, else the first differences."""
    if not isinstance(got, dict):
        return f"'model' is a {type(got).__name__}, not a state_dict"
    missing = [k for k in expected if k not in got]
    unexpected = [k for k in got if k not in expected]
    shapes = [f"{k} is {tuple(got[k].shape)} in the file, {tuple(v.shape)} in the model"
              for k, v in expected.items()
              if k in got and getattr(got[k], "shape", None) != v.shape]
    parts = [f"{len(missing)} missing keys ({', '.join(missing[:3])})" if missing else "",
             f"{len(unexpected)} unexpected keys ({', '.join(unexpected[:3])})" if unexpected
             else "", "; ".join(shapes[:2])]
    return "; ".join(p for p in parts if p)
