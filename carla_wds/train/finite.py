"""Non-finite numbers in a run, stopped where they enter (issue 38 Low 12).

A resumed checkpoint's optimizer and scheduler state went into torch unchecked: `lr=inf` trained
an epoch at NaN loss and wrote a NaN checkpoint. So on resume the step, the epoch, the weights
and every number of the optimizer and scheduler state are checked (finite, in range, the shapes
of this model's parameters); during training the first non-finite loss stops the run with one
line naming its epoch and step, and no checkpoint is written from non-finite weights.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
import torch.distributed as tdist

from .checkpoint import CheckpointError

# 10 million epochs: one a second for four months. A step is exact in a float64 up to 2^53.
MAX_EPOCH = 10 ** 7
MAX_STEP = 2 ** 53
_FIX = "Fix: resume=PATH to a checkpoint.pt that carla-wds train wrote, or resume=none"
_SQUARES = ("exp_avg_sq", "max_exp_avg_sq")   # Adam's second moments: square roots are taken


class NonFiniteError(ValueError):
    """The loss or the weights stopped being finite numbers; one line naming the step."""


def _refuse(path: Path, what: str, value: Any, expected: str) -> CheckpointError:
    return CheckpointError(path, f"its {what} is {value!r:.100}: expected {expected}. {_FIX}")


def _whole(path: Path, what: str, value: Any, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= hi:
        raise _refuse(path, what, value, f"a whole number from 0 to {hi:,}")
    return value


def _number(path: Path, what: str, value: Any, hi: float = math.inf) -> None:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            not (math.isfinite(value) and 0 <= value <= hi):
        raise _refuse(path, what, value, f"a finite number from 0 to {hi}")


def _tensor(path: Path, what: str, value: Any, shape: torch.Size | None = None,
            nonnegative: bool = False) -> None:
    if not isinstance(value, torch.Tensor):
        raise _refuse(path, what, type(value).__name__, "a tensor")
    if shape is not None and value.shape != shape:
        raise _refuse(path, what + "'s shape", tuple(value.shape),
                      f"{tuple(shape)}, its parameter's")
    if value.is_floating_point() and not bool(torch.isfinite(value).all()):
        raise _refuse(path, what, "not finite", "finite numbers")
    if nonnegative and bool((value < 0).any()):
        raise _refuse(path, what, "negative", "numbers >= 0")


def check_progress(path: Path, ckpt: dict[str, Any], weights_only: bool) -> None:
    """The checkpoint's step (and epoch, for a run that continues) and its weights finite."""
    _whole(path, "step", ckpt.get("step"), MAX_STEP)
    if not weights_only:
        _whole(path, "epoch", ckpt.get("epoch"), MAX_EPOCH)
    weights = ckpt.get("model")
    for name, value in (weights.items() if isinstance(weights, dict) else ()):
        if isinstance(value, torch.Tensor):
            _tensor(path, f"weight {name}", value)


def check_optimizer(path: Path, saved: Any, opt: torch.optim.Optimizer) -> None:
    """The optimizer state (AdamW's): finite hyperparameters, and finite moments of the shapes
    of this model's parameters (torch checks neither)."""
    groups = saved.get("param_groups") if isinstance(saved, dict) else None
    state = saved.get("state") if isinstance(saved, dict) else None
    if not isinstance(groups, list) or not isinstance(state, dict) or \
            len(groups) != len(opt.param_groups) or not all(isinstance(g, dict) for g in groups):
        raise _refuse(path, "optimizer state", type(saved).__name__,
                      f"AdamW's state_dict with {len(opt.param_groups)} parameter group(s)")
    for i, group in enumerate(groups):
        for key, value in group.items():
            what = f"optimizer param_groups[{i}].{key}"
            if key == "betas":
                if not isinstance(value, (list, tuple)) or len(value) != 2:
                    raise _refuse(path, what, value, "two numbers")
                for beta in value:
                    _number(path, what, beta, hi=1)
            elif key != "params" and value is not None and not isinstance(value, (bool, str)):
                _number(path, what, value)
    params = [p for g in opt.param_groups for p in g["params"]]
    for index, moments in state.items():
        if not isinstance(index, int) or not 0 <= index < len(params) or \
                not isinstance(moments, dict):
            raise _refuse(path, "optimizer state's key", index,
                          f"a parameter index from 0 to {len(params) - 1}")
        for key, value in moments.items():
            what = f"optimizer state[{index}].{key}"
            if key == "step":
                _number(path, what, value, hi=MAX_STEP)
            else:
                _tensor(path, what, value, params[index].shape, nonnegative=key in _SQUARES)


def check_resume_state(path: Path, ckpt: dict[str, Any], opt: torch.optim.Optimizer) -> None:
    """CheckpointError unless the optimizer and scheduler state of `ckpt` may be loaded."""
    check_optimizer(path, ckpt.get("optimizer"), opt)
    check_scheduler(path, ckpt.get("scheduler"), len(opt.param_groups))


def check_scheduler(path: Path, saved: Any, groups: int) -> None:
    """The LambdaLR state: finite learning rates, one per group, and a whole step count.
    `lr_lambdas` stays None: torch would copy a dict of it into the lambda's attributes."""
    if not isinstance(saved, dict):
        raise _refuse(path, "scheduler state", type(saved).__name__, "LambdaLR's state_dict")
    for key in ("base_lrs", "_last_lr"):
        lrs = saved.get(key)
        if not isinstance(lrs, list) or len(lrs) != groups:
            raise _refuse(path, f"scheduler {key}", lrs, f"a list of {groups} learning rates")
        for lr in lrs:
            _number(path, f"scheduler {key}", lr)
    _whole(path, "scheduler last_epoch", saved.get("last_epoch"), MAX_STEP)
    _whole(path, "scheduler _step_count", saved.get("_step_count", 0), MAX_STEP)
    if any(fn is not None for fn in saved.get("lr_lambdas") or ()):
        raise _refuse(path, "scheduler lr_lambdas", saved["lr_lambdas"], "[null]")


def _any_rank(flag: bool, device: str, world: int) -> bool:
    """Whether `flag` holds on any rank (every rank calls this at the same step)."""
    if world == 1:
        return flag
    t = torch.tensor([float(flag)], device=device)
    tdist.all_reduce(t, op=tdist.ReduceOp.MAX)
    return bool(t.item())


def check_losses(run: Any, window: list[torch.Tensor]) -> None:
    """NonFiniteError naming the first non-finite loss of `window`, the losses of the steps up
    to `run.step` (loop.Run). Called once a log window (a sync, not one a step) and before any
    checkpoint, on every rank at the same steps: every rank stops if any rank's loss is."""
    step, epoch = run.step, run.epoch
    losses = torch.stack(window).float() if window else torch.zeros(0, device=run.device)
    bad = (~torch.isfinite(losses)).nonzero().flatten()
    if not _any_rank(len(bad) > 0, run.device, run.world):
        return
    if len(bad) == 0:
        raise NonFiniteError(f"another rank's training loss is not finite before step {step} "
                             f"(epoch {epoch}): training stops, no checkpoint written")
    first = int(bad[0])
    raise NonFiniteError(f"the training loss is {losses[first].item()} at epoch {epoch}, step "
                         f"{step - len(window) + first + 1}: training stops there, no "
                         "checkpoint is written from it (the last one is kept). Fix: a lower "
                         "optim.lr, or check the data's labels (carla-wds verify --deep)")


def check_weights(run: Any) -> None:
    """NonFiniteError before a checkpoint would store non-finite weights or buffers (loop.Run;
    every rank calls it at the same step)."""
    floats = [t for t in run.raw_model.state_dict().values() if t.is_floating_point()]
    finite = bool(torch.stack([torch.isfinite(t).all() for t in floats]).all()) if floats \
        else True
    if _any_rank(not finite, run.device, run.world):
        raise NonFiniteError(f"the model's weights are not finite after step {run.step}: no "
                             "checkpoint is written from them (the last one is kept). Fix: a "
                             "lower optim.lr or optim.grad_clip")
