"""carla-wds: exact, resumable WebDataset shards and DDP loaders for CARLA driving data.

Three wings over a small core: `pack/` (raw routes -> shards, torch-free), `load/` (shards ->
exact DDP batches) and `train/` (the bundled trainer), each importing only the core and, for
train, load's public names.
"""
from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["CARLAWebData", "CARLABatch", "CARLASample", "__version__"]


def __getattr__(name: str):
    # Lazy, so `carla-wds pack` and friends do not pay for importing torch.
    if name in ("CARLAWebData", "CARLABatch", "CARLASample"):
        from . import load
        return getattr(load, name)
    raise AttributeError(f"module 'carla_wds' has no attribute {name!r}")
