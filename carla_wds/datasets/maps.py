"""Which map recipe serves a dataset's map pack at load time (load/stream/mappack.py asks here, so
the loader names no dataset): dataset name -> MapRecipe, the dataset room's functions."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from . import bench2drive_map, dataset
from .bench2drive_map import TownArrays


@dataclass(frozen=True)
class MapRecipe:
    """`town_of(key)`: the town a sample key names; `vectors(town, ego2world)`: one frame's
    map arrays (name -> array), named `keys`; `doc`: where its rules come from."""
    town_of: Callable[[str], str]
    vectors: Callable[[TownArrays, np.ndarray], dict[str, np.ndarray]]
    keys: tuple[str, ...]
    doc: str


RECIPES = {"bench2drive": MapRecipe(
    bench2drive_map.town_of_key, bench2drive_map.map_gt,
    ("map_pts", "map_labels", "gt_lane_labels", "gt_lane_bboxes", "gt_lane_masks"),
    "VAD's map GT and UniAD's lane GT (Bench2DriveZoo@10a2e5d B2D_vad_dataset.py, "
    "B2D_e2e_dataset.py)")}


def map_recipe(name: str) -> MapRecipe:
    """The recipe of the dataset a name, alias or layout means; KeyError naming those with one."""
    try:
        info = dataset(name)
    except KeyError:
        info = None
    if info is None or info.name not in RECIPES:
        raise KeyError(f"no map recipe for {name!r}; map packs serve {', '.join(RECIPES)}")
    return RECIPES[info.name]


__all__ = ["MapRecipe", "RECIPES", "TownArrays", "map_recipe"]
