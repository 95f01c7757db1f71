"""One-release shim: `depth_b2d8` moved to carla_wds.datasets.bench2drive, `instance` to
carla_wds.modalities.semantics."""
from __future__ import annotations

from .datasets.bench2drive import DepthB2D8Codec
from .modalities.semantics import InstanceCodec

__all__ = ["DepthB2D8Codec", "InstanceCodec"]
