"""Bench2Drive: clips (extracted folders or their .tar.gz archives) of 10 Hz CARLA 0.9.15 data
with anno/*.json.gz, planned into keyframe samples (plan.py) with boxes (boxes.py, visible.py),
the expert's supervision (anno.py) and raw sensors (raw.py). Its own pack options live in
options.py, not in PackOptions.
"""
from __future__ import annotations

from .dataset import Bench2Drive

DATASETS = {"bench2drive": Bench2Drive()}

__all__ = ["Bench2Drive", "DATASETS"]
