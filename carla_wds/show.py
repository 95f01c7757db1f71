"""`carla-wds show`: a montage of samples with ground truth and, given a checkpoint, predictions."""
from __future__ import annotations

from pathlib import Path

import torch

from .checkpoint import load_checkpoint
from .config import config_from_dict
from .data import CARLAWebData
from .model import build_model


def show(shards: str | Path, out: str | Path, checkpoint: str | Path | None = None,
         n: int = 6, image_size: tuple[int, int] = (128, 256)) -> Path:
    """Write a PNG of the first n samples of `shards` (eval order) with their waypoints."""
    from .viz import montage
    model, cameras = None, None
    if checkpoint is not None:
        ckpt = load_checkpoint(checkpoint)
        cfg = config_from_dict(ckpt["config"])
        image_size, cameras = tuple(cfg.data.image_size), cfg.data.cameras
    data = CARLAWebData(str(shards), batch_size=max(1, n), mode="eval", image_size=image_size,
                        cameras=cameras, rank=0, world_size=1)
    batch = next(iter(data))
    if checkpoint is not None:
        model = build_model(cfg.model, len(data.camera_names), data.pred_len)
        model.load_state_dict(ckpt["model"])
        model.eval()
        with torch.no_grad():
            pred = model(batch.normalized_images(), batch.speed, batch.target_point, batch.command)
    rows = []
    for i in range(len(batch)):
        if not batch.valid[i]:
            continue
        row = {"images": batch.images[i].numpy(), "waypoints": batch.waypoints[i].numpy(),
               "target_point": batch.target_point[i].numpy(), "key": batch.keys[i],
               "command": int(batch.command[i].argmax())}
        if model is not None:
            row["pred"] = pred[i].numpy()
        rows.append(row)
    title = f"{shards}" + (f" - predictions of {checkpoint}" if checkpoint else "")
    return montage(rows, data.camera_names, out, title=title)
