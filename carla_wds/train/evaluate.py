"""Offline evaluation: ADE/FDE of the model and of the straight-line baseline over the val
shards, each sample counted once across ranks, and, where the shards carry the expert's
controls, the steer/throttle/brake MAE of TCP's PID controller driven by each prediction."""
from __future__ import annotations

from typing import Any

import torch
import torch.distributed as tdist

from ..load import CARLABatch, CARLAWebData
from .config import TrainConfig
from .control import CONTROLS, controls_in_frames, expert_controls
from .frames import label_frames, straight_ahead
from .inputs import autocast_for, current_frame, predict

_PREDICTIONS = ("", "baseline_")   # the model's, then the baseline's
# per prediction: ADE, FDE, then one MAE per control; then the sample and control counts
_PER = 2 + len(CONTROLS)


def _add(sums: torch.Tensor, at: int, pred: torch.Tensor, batch: CARLABatch,
         expert: torch.Tensor | None, frames: tuple[str, str], dt: float) -> None:
    valid = batch.valid.double()
    err = (pred.float() - batch.waypoints).norm(dim=-1).double()
    sums[at] += (err.mean(dim=1) * valid).sum()
    sums[at + 1] += (err[:, -1] * valid).sum()
    if expert is not None:
        ctl = controls_in_frames(pred.float(), batch.speed, batch.target_point, dt, frames)
        sums[at + 2:at + _PER] += ((ctl - expert).abs() * valid[:, None]).sum(dim=0)


@torch.no_grad()
def evaluate(model: torch.nn.Module, data: CARLAWebData, cfg: TrainConfig, device: str = "cpu",
             world: int = 1) -> dict[str, Any]:
    """Every val sample once: ade, fde, baseline_ade, baseline_fde, n, and with the expert's
    controls in the shards steer_mae, throttle_mae, brake_mae (and baseline_* of each)."""
    model.eval()
    frames, dt = label_frames(dict(data.spec.frames)), cfg.data.frame_dt
    sums = torch.zeros(_PER * len(_PREDICTIONS) + 2, dtype=torch.float64, device=device)
    autocast = autocast_for(device, cfg.bf16)
    for batch in data:
        window = batch.to(device)
        batch = current_frame(window)   # with history: each window's own frame
        expert = expert_controls(batch.measurements)
        base = straight_ahead(batch.speed, data.pred_len, dt, frames[0])
        for i, pred in enumerate((predict(model, window, autocast), base)):
            _add(sums, i * _PER, pred, batch, expert, frames, dt)
        sums[-2] += batch.valid.double().sum()
        if expert is not None:
            sums[-1] += batch.valid.double().sum()
    if world > 1:
        tdist.all_reduce(sums)
    n, n_ctl = max(sums[-2].item(), 1.0), sums[-1].item()
    out: dict[str, Any] = {"n": int(sums[-2].item())}
    for i, prefix in enumerate(_PREDICTIONS):
        out[f"{prefix}ade"] = sums[i * _PER].item() / n
        out[f"{prefix}fde"] = sums[i * _PER + 1].item() / n
        if n_ctl:
            for j, name in enumerate(CONTROLS):
                out[f"{prefix}{name}_mae"] = sums[i * _PER + 2 + j].item() / n_ctl
    if n_ctl:
        out["n_controls"] = int(n_ctl)
    return out


__all__ = ["evaluate"]
