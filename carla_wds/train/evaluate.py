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


# The model "beats" the baseline only by at least this share of the baseline's ADE: below it the
# two print nearly alike (0.869 m against 0.870 m) and the order is within one run's noise.
LEVEL = 0.01


def baseline_verdict(ade: float, baseline_ade: float) -> str:
    """How the model's ADE compares with the straight-line baseline's, with the margin in m and
    in % of the baseline: "beats", "does NOT beat", or "is level with" within LEVEL."""
    margin = baseline_ade - ade
    if baseline_ade <= 0 < -margin:   # an exact baseline (a pack standing still): no share
        return f"does NOT beat the baseline: {-margin:.4f} m worse (the baseline's ADE is 0)"
    share = margin / baseline_ade if baseline_ade > 0 else 0.0
    if share >= LEVEL:
        return f"beats the baseline by {margin:.4f} m ({share:.1%})"
    if share <= -LEVEL:
        return f"does NOT beat the baseline: {-margin:.4f} m ({-share:.1%}) worse"
    return (f"is level with the baseline (within {LEVEL:.0%}: {abs(margin):.4f} m "
            f"{'better' if margin > 0 else 'worse' if margin < 0 else 'apart'})")


def eval_line(ev: dict[str, Any]) -> str:
    """One evaluation as a log line: the model's ADE/FDE next to the straight-line baseline's."""
    return (f"val ADE {ev['ade']:.3f} m, FDE {ev['fde']:.3f} m on {ev['n']} samples; "
            f"straight-line baseline ADE {ev['baseline_ade']:.3f} m, FDE "
            f"{ev['baseline_fde']:.3f} m")


__all__ = ["baseline_verdict", "eval_line", "evaluate"]
