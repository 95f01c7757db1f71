"""One-release shim: the box table moved to carla_wds.modalities.boxes (BOX_COLUMNS, the
generic `box_table`), each dataset's parser of its own boxes file to carla_wds.datasets
(`box_parser(reader)`; the parsers below live in datasets/transfuser.py and datasets/garage.py).
"""
from __future__ import annotations

from .datasets.garage import garage_boxes
from .datasets.transfuser import tf2022_boxes
from .modalities.boxes import BOX_CLASSES, BOX_COLUMNS, FILL, finite_row

__all__ = ["BOX_CLASSES", "BOX_COLUMNS", "FILL", "finite_row", "garage_boxes", "tf2022_boxes"]
