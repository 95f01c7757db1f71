"""Checkpoint I/O in one place: one dict, written atomically by rank 0, read without pickle.

The file is torch.save's format, loaded with `weights_only=True`: only tensors and plain
containers come back, never arbitrary pickled objects.
"""
from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import torch

from .fileio import atomic_write_bytes

CHECKPOINT = "checkpoint.pt"


def save_checkpoint(path: str | Path, state: dict[str, Any]) -> Path:
    buf = io.BytesIO()
    torch.save(state, buf)
    return atomic_write_bytes(path, buf.getvalue())


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path} not found; pass resume=PATH to an existing "
                                f"{CHECKPOINT} or resume=none")
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch raises several types for bad files
        raise ValueError(f"checkpoint {path} cannot be read safely ({exc}); it is corrupt or "
                         "not a carla-wds checkpoint") from None


def find_resume(resume: str, run_dir: str | Path) -> Path | None:
    """resume='auto' -> run_dir/checkpoint.pt if it exists; 'none' -> None; else that path."""
    if resume == "none":
        return None
    if resume == "auto":
        candidate = Path(run_dir) / CHECKPOINT
        return candidate if candidate.is_file() else None
    return Path(resume)
