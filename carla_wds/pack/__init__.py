"""The packing wing: raw CARLA route folders -> verified, reproducible shards and a manifest.

It imports the core only, never `load/`, `train/`, torch or webdataset (tests/test_imports.py),
so `carla-wds pack`, `verify`, `inspect`, `merge` and `synth` run without torch.
"""
from .options import PackOptions
from .packer import pack

__all__ = ["PackOptions", "pack"]
