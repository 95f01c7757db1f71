"""carla-wds: exact, resumable WebDataset shards and DDP loaders for CARLA driving data."""
from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["CARLAWebData", "CARLABatch", "CARLASample", "__version__"]


def __getattr__(name: str):
    # Lazy, so `carla-wds pack` and friends do not pay for importing torch.
    if name == "CARLAWebData":
        from .data import CARLAWebData
        return CARLAWebData
    if name in ("CARLABatch", "CARLASample"):
        from . import batch
        return getattr(batch, name)
    raise AttributeError(f"module 'carla_wds' has no attribute {name!r}")
