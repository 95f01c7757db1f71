"""Checkpoint I/O in one place: one dict, written atomically by rank 0, read without pickle.

The file is torch.save's format, loaded with `weights_only=True`: only tensors and plain
containers come back, never arbitrary pickled objects.
"""
from __future__ import annotations

import io
import json
import math
import pickle
import re
import zipfile
from pathlib import Path
from typing import Any

import torch

from ..fileio import atomic_write_bytes

CHECKPOINT = "checkpoint.pt"
REQUIRED = ("model", "config", "step")   # what every reader of a checkpoint needs


class CheckpointError(ValueError):
    """A file that cannot be used as a checkpoint. `problem` says why, with no fix, so each
    command (train's resume=, show's --checkpoint) words the fix for its own option."""

    def __init__(self, path: str | Path, problem: str) -> None:
        self.path, self.problem = Path(path), problem
        super().__init__(f"checkpoint {path}: {problem}")


def save_checkpoint(path: str | Path, state: dict[str, Any]) -> Path:
    buf = io.BytesIO()
    torch.save(state, buf)
    return atomic_write_bytes(path, buf.getvalue())


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """The checkpoint dict, read with weights_only=True; CheckpointError for anything else."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(path, "no such file" if not path.exists() else "not a file")
    # torch.save writes a zip archive; anything else (garbage, a file cut short, torch's
    # legacy format) would reach the unpickler only to fail there less clearly.
    if not zipfile.is_zipfile(path):
        raise CheckpointError(path, "not a checkpoint: not the zip archive torch.save writes "
                                    "(other bytes, or a file cut short)")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        refused = re.search(r"Unsupported [^\n.]*", str(exc))
        if refused is None:
            raise CheckpointError(path, f"corrupt ({_first_line(exc)})") from None
        raise CheckpointError(path, "holds pickled objects, not only tensors and plain "
                                    f"containers ({refused.group(0)}); weights_only=True refused "
                                    "to unpickle them, since that could run code. carla-wds "
                                    "checkpoints never hold such objects") from None
    except Exception as exc:  # noqa: BLE001 - torch raises several types for bad archives
        raise CheckpointError(path, f"corrupt ({_first_line(exc)})") from None
    missing = [k for k in REQUIRED if not isinstance(state, dict) or k not in state]
    if missing:
        raise CheckpointError(path, "a torch file, but not a carla-wds checkpoint: it has no "
                                    + ", ".join(repr(k) for k in missing))
    return state


def stored_config(state: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint's config as today's carla-wds reads it. A checkpoint written before the
    model had a prior (model.prior) was trained on TCP's plain deltas: its config says
    prior "none", not today's default, or its weights would be read as residuals."""
    cfg = state["config"]
    model = cfg.get("model") if isinstance(cfg, dict) else None
    if isinstance(model, dict) and "prior" not in model:
        return {**cfg, "model": {**model, "prior": "none"}}
    return cfg


def refuse_other_training(path: str | Path, state: dict[str, Any], cfg: Any) -> None:
    """CheckpointError when the run (a TrainConfig) would read the checkpoint's weights
    otherwise than they were trained: model.prior (residuals or plain deltas), data.history
    and data.history_stride (the past-frame branch, and which frames it learned from)."""
    stored = stored_config(state)
    prior = (stored.get("model") or {}).get("prior")
    if prior is not None and prior != cfg.model.prior:
        raise CheckpointError(path, f"its weights were trained with model.prior={prior}, this "
                                    f"run has model.prior={cfg.model.prior}. Fix: pass "
                                    f"model.prior={prior}, or resume=none to start afresh")
    data = stored.get("data") or {}
    was = _history(data.get("history", 0), data.get("history_stride", 1))  # 0, 1: before issue 27
    now = _history(cfg.data.history, cfg.data.history_stride)
    if was != now:
        raise CheckpointError(path, f"its weights were trained with data.history={was[0]}, "
                                    f"data.history_stride={was[1]}, this run has "
                                    f"data.history={now[0]}, data.history_stride={now[1]}. Fix: "
                                    f"pass data.history={was[0]} data.history_stride={was[1]}, "
                                    "or resume=none to start afresh")


def _history(history: int, stride: int) -> tuple[int, int]:
    return history, stride if history else 1   # without history the stride means nothing


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0].rstrip(".")


def find_resume(resume: str, run_dir: str | Path) -> Path | None:
    """resume='auto' -> run_dir/checkpoint.pt if it exists; 'none' -> None; else that path."""
    if resume == "none":
        return None
    if resume == "auto":
        candidate = Path(run_dir) / CHECKPOINT
        return candidate if candidate.is_file() else None
    return Path(resume)


def trim_metrics(path: Path, step: int) -> None:
    """Drop lines a killed run logged after its last checkpoint, so curves don't double up."""
    if path.exists():
        keep = [ln for ln in path.read_text().splitlines() if _step_of(ln) <= step]
        atomic_write_bytes(path, "".join(ln + "\n" for ln in keep).encode())


def _step_of(line: str) -> float:
    try:
        return json.loads(line)["step"]
    except (json.JSONDecodeError, KeyError, TypeError):
        return math.inf   # a line cut short by a kill: dropped


def load_weights(model: Any, path: str | Path, weights: dict[str, Any], run_dir: str | Path
                 ) -> None:
    """A checkpoint's weights into `model` (a torch module); a model of another shape (a
    config changed in an existing run_dir) is one line naming the way out, not torch's 40."""
    try:
        model.load_state_dict(weights)
    except RuntimeError as exc:
        first = next((ln.strip() for ln in str(exc).splitlines()[1:] if ln.strip()), str(exc))
        raise CheckpointError(path, f"its model does not fit this run's model ({first}): "
                                    "the config's model.* changed since it was written. Fix: "
                                    "pass another run_dir for the new model, or resume=none "
                                    f"to start afresh in {run_dir}") from None
