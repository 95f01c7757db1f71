"""The loading wing: shards -> exact, resumable, DDP-split batches.

It imports the core only, never `pack/` or `train/` (tests/test_imports.py). These names are
its public surface, and the only ones `train/` uses.
"""
from ..remote import RemoteError, RemoteOptions
from ..tario import ShardError
from .decode.batch import CARLABatch, CARLASample
from .dataset import CARLAWebData
from .options import Augment, Decode, History, Overlays, Storage, Transport
from .decode.stages import decode_sample
from .decode.transform import SampleTransform, sample_rng

__all__ = ["Augment", "CARLABatch", "CARLASample", "CARLAWebData", "Decode", "History",
           "Overlays", "RemoteError", "RemoteOptions", "SampleTransform", "ShardError", "Storage",
           "Transport", "decode_sample", "sample_rng"]
