"""The dict batch a sample_transform or an adapter gives, on its way from a worker to the
training loop: its own type so that transport (rings, pinning) needs nothing else of the
transform room."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class ModelBatch:
    """A transformed batch on its way from a worker: the dict, and why rows were skipped."""
    data: dict[str, Any]
    errors: list[str] = field(default_factory=list)

    def pin_memory(self) -> "ModelBatch":
        # DataLoader(pin_memory=True) calls this on custom batch types
        return ModelBatch(pinned(self.data), self.errors)


def pinned(value: Any) -> Any:
    """Pinned copies of every tensor, through the containers collate makes (dicts of their
    type, lists, tuples, namedtuples): the dict ring frees a pinned batch's slot at once."""
    if isinstance(value, torch.Tensor):
        return value.pin_memory()
    if isinstance(value, dict):
        return type(value)((k, pinned(v)) for k, v in value.items())
    if isinstance(value, list):
        return [pinned(v) for v in value]
    if isinstance(value, tuple):
        items = [pinned(v) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    return value
