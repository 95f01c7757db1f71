"""LEAD / TransFuser v6 (kesai-labs/lead): route folders of 4 Hz CARLA 0.9.15 data whose
cameras are stitched into one strip and whose metas and boxes are lzma pickles, read only
with --allow-pickle-input through a pickle opcode walker (pickle_walk.py) and stored as JSON
and typed members. routes.py: where the routes are and LEAD's route filter; labels.py: its
loader's labels; plan.py: the frames; sensors.py and encoder.py: the files of a frame.
"""
from __future__ import annotations

from ....datasets.lead import LAYOUT
from .dataset import Lead

DATASETS = {LAYOUT: Lead()}

__all__ = ["DATASETS", "Lead"]
