"""All randomness in one place: stable derived seeds, seeding, and RNG state for checkpoints.

Seeds are derived by hashing their parts (never Python's salted `hash`), so they are the same on
every rank, worker, process and machine.
"""
from __future__ import annotations

import hashlib
import random
from typing import Any

import numpy as np


def derive_seed(*parts: Any) -> int:
    """A 63-bit seed from any mix of ints and strings, identical everywhere."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def draw_key(raw: dict[str, Any]) -> str:
    """The key a sample's random draws (augmentation, a twin camera) are a function of: its
    own, or, for an earlier frame of a history window, the window's (load/stream/history.py), so
    every frame of a window gets the same draw."""
    return raw.get("__draw_key__") or raw["__key__"]


def numpy_rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (CPU and CUDA) for one process."""
    import torch
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state() -> dict[str, Any]:
    import torch
    # Only tensors and plain containers, so checkpoints load with weights_only=True.
    name, keys, pos, has_gauss, cached = np.random.get_state()
    state = {"python": random.getstate(),
             "numpy": [name, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, cached],
             "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    import torch
    random.setstate(state["python"])
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
