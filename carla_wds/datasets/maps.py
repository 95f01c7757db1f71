"""Which map recipe serves a dataset's map pack at load time (load/stream/mappack.py asks here, so
the loader names no dataset): dataset name -> MapRecipe, the dataset room's functions."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from . import bench2drive_map, dataset
from .bench2drive_map import TownArrays


@dataclass(frozen=True)
class MapRecipe:
    """`town_of(key)`: the town a sample key names; `vectors(town, ego2world, parts)`: one
    frame's map arrays (name -> array) of the named parts; `parts`: each part's name (the
    model whose ground truth it is) and the arrays it gives; `doc`: where its rules come
    from."""
    town_of: Callable[[str], str]
    vectors: Callable[[TownArrays, np.ndarray, tuple[str, ...]], dict[str, np.ndarray]]
    parts: tuple[tuple[str, tuple[str, ...]], ...]
    doc: str

    def keys(self, parts: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(k for name, keys in self.parts if name in parts for k in keys)

    def chosen(self, parts: Sequence[str] | str | None) -> tuple[str, ...]:
        """The parts a caller names (every part for None), checked: ValueError in one line
        listing the valid names."""
        names = tuple(name for name, _ in self.parts)
        if parts is None:
            return names
        given = (parts,) if isinstance(parts, str) else tuple(parts)
        wrong = [p for p in given if p not in names]
        if wrong or not given:
            raise ValueError(f"Overlays(map_gt={parts!r}): expected some of {list(names)} "
                             "(whose map ground truth to compute), or None for all")
        return tuple(n for n in names if n in given)


RECIPES = {"bench2drive": MapRecipe(
    bench2drive_map.town_of_key, bench2drive_map.map_gt,
    (("vad", ("map_pts", "map_labels")),
     ("uniad", ("gt_lane_labels", "gt_lane_bboxes", "gt_lane_masks"))),
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
