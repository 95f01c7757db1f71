"""A map pack at load time (issue 42): CARLAWebData(..., overlays=Overlays(map=MAP_PACK))
reads the folder `carla-wds pack-map` wrote (maps.json and one <Town>.npz of plain arrays per
town, read with allow_pickle=False, each checked against its recorded sha256 and its
structure), and one worker stage, `MapVectors`, gives every sample its frame's map arrays:
the dataset's map recipe (datasets/maps.py, e.g. VAD's map GT) on its town's arrays and its
ego2world.

Refusals, each one line naming the fix: a folder that is not a map pack; a map pack of another
dataset than the shards'; at construction, a town that a shard's first or last sample names
and the map pack lacks; at load time, any other sample's town without a map.
"""
from __future__ import annotations

import hashlib
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np
import torch

from ... import limits
from ...datasets.maps import TownArrays, map_recipe

MANIFEST = "maps.json"                  # as pack-map writes it
FORMAT = "carla-wds map pack"
MAX_MANIFEST_BYTES = 4 << 20
POSE = "ego2world"                      # the field the recipes take the ego's pose from
KEYS = {"lane_points": np.float64, "lane_offsets": np.int64, "lane_type": np.int16,
        "trigger_points": np.float64, "trigger_offsets": np.int64, "trigger_type": np.int16}
FIX = "Fix: pass the folder `carla-wds pack-map MAPS_DIR OUT --allow-pickle-input` wrote"
_TOWNS: dict[tuple[str, str, str], TownArrays] = {}   # (root, town, sha256) -> arrays, per process


@dataclass(frozen=True)
class MapPack:
    """A checked maps.json: the dataset it serves, the type vocabularies and, per town, its
    file and sha256."""
    root: str
    dataset: str
    lane_types: tuple[str, ...]
    trigger_types: tuple[str, ...]
    towns: tuple[tuple[str, str, str], ...]      # (town, file, sha256)

    def names(self) -> list[str]:
        return [t for t, _, _ in self.towns]

    def town(self, name: str, key: str) -> TownArrays:
        """A town's arrays (read once per process); ValueError naming the town when absent."""
        entry = next((t for t in self.towns if t[0] == name), None)
        if entry is None:
            raise ValueError(missing_town(key, name, self))
        cached = _TOWNS.get((self.root, *entry[::2]))
        if cached is None:
            cached = _TOWNS[(self.root, entry[0], entry[2])] = read_town(self, *entry)
        return cached


def missing_town(key: str, town: str, pack: MapPack) -> str:
    return (f"map: sample {key} names the town {town!r}, which has no map in {pack.root} "
            f"(maps of {', '.join(pack.names()) or 'none'}). Fix: pack-map a maps folder that "
            f"holds {town}_HD_map.npz, or leave Overlays(map=...) out")


def open_map_pack(path: str | Path) -> MapPack:
    """maps.json of the map pack at `path`, checked; ValueError naming the fix."""
    root = Path(path)
    doc_path = root / MANIFEST
    if not doc_path.is_file():
        raise ValueError(f"Overlays(map={str(path)!r}) holds no {MANIFEST}. {FIX}")
    if doc_path.stat().st_size > MAX_MANIFEST_BYTES:
        raise ValueError(f"map: {doc_path} is over {MAX_MANIFEST_BYTES} bytes. {FIX}")
    try:
        doc = json.loads(doc_path.read_bytes())
        assert doc["format"] == FORMAT and doc["version"] == 1
        lanes, triggers = (tuple(doc[k]) for k in ("lane_types", "trigger_types"))
        assert all(isinstance(t, str) for t in lanes + triggers)
        towns = tuple((str(t), str(e["file"]), str(e["sha256"])) for t, e in doc["towns"].items())
        assert all(Path(f).name == f and f == f"{t}.npz" for t, f, _ in towns)
        dataset = str(doc["dataset"])
    except (ValueError, KeyError, TypeError, AttributeError, AssertionError):
        raise ValueError(f"map: {doc_path} is not a carla-wds map pack manifest. {FIX}") from None
    return MapPack(str(root), dataset, lanes, triggers, towns)


def read_town(pack: MapPack, town: str, file: str, sha256: str) -> TownArrays:
    """<Town>.npz as TownArrays: its bytes within array_bytes and equal to the recorded sha256,
    the arrays of KEYS' dtypes, offsets that cut the points, type codes in the vocabularies."""
    path = Path(pack.root) / file
    limits.active().check("array_bytes", path.stat().st_size, f"the map {path}, in bytes")
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest() != sha256:
        raise ValueError(f"map: {path} does not match the sha256 {MANIFEST} records (changed "
                         "or truncated). Fix: pack-map the maps again")
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            arrays = {k: z[k] for k in KEYS}
        return TownArrays(*_polylines(arrays, "lane", pack.lane_types),
                          *_polylines(arrays, "trigger", pack.trigger_types))
    except (ValueError, KeyError, OSError, AssertionError, IndexError) as exc:
        why = " ".join(str(exc).split())[:200]
        raise ValueError(f"map: {path} is not a map pack town ({why}). Fix: pack-map the maps "
                         "again") from None


def _polylines(arrays: dict[str, np.ndarray], part: str, vocab: tuple[str, ...]
               ) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    points, offsets, codes = (arrays[f"{part}_{k}"] for k in ("points", "offsets", "type"))
    for k, a in (("points", points), ("offsets", offsets), ("type", codes)):
        assert a.dtype == KEYS[f"{part}_{k}"], f"{part}_{k} is {a.dtype}"
    assert points.ndim == 2 and points.shape[1] == 3 and np.isfinite(points).all(), \
        f"{part}_points is not finite (P, 3)"
    assert offsets.ndim == 1 and len(offsets) == len(codes) + 1 and offsets[0] == 0 and \
        offsets[-1] == len(points) and (np.diff(offsets) > 0).all(), f"{part}_offsets"
    assert ((codes >= 0) & (codes < len(vocab))).all(), f"{part}_type out of its vocabulary"
    return points, offsets, tuple(vocab[c] for c in codes.tolist())


def attach_map(path: str | Path | None, dataset: str, first_keys: Iterable[str],
               parts: Any = None) -> "MapVectors | None":
    """CARLAWebData's Overlays(map=, map_gt=): the stage, after the map pack's dataset, the
    parts named (map_gt) and the towns of `first_keys` (each shard's first and last sample)
    are checked; None without."""
    if path is None:
        if parts is not None:
            raise ValueError(f"Overlays(map_gt={parts!r}) without map=: it chooses what a map "
                             f"pack gives. {FIX}, and give it as map=")
        return None
    pack = open_map_pack(path)
    recipe = map_recipe(pack.dataset)
    chosen = recipe.chosen(parts)
    if map_recipe(dataset) is not recipe:
        raise ValueError(f"map: {pack.root} is a map pack of {pack.dataset!r}; the shards are "
                         f"{dataset!r}. Fix: pass the map pack of the shards' dataset")
    for key in first_keys:
        town = recipe.town_of(key)
        if town not in pack.names():
            raise ValueError(missing_town(key, town, pack))
    return MapVectors(pack, chosen)


@dataclass(frozen=True)
class MapVectors:
    """Worker stage after decoding (pipeline.py): each batch's fields get the recipe's arrays
    per frame, as lists of tensors (None where the frame is padding), the pose taken from the
    batch's ego2world. With history the batch is still flat here (B * (K + 1) frames): every
    frame of a window gets its own map, and history.windowed makes them B lists of K + 1."""
    pack: MapPack
    parts: tuple[str, ...]   # the recipe's parts to compute (Overlays(map_gt=))

    def __call__(self, batches: Iterable[Any], at: Any) -> Iterator[Any]:
        recipe = map_recipe(self.pack.dataset)
        for batch in batches:
            poses = batch.fields[POSE]
            rows = [recipe.vectors(self.pack.town(recipe.town_of(k), k), poses[i].numpy(),
                                   self.parts) if ok else None
                    for i, (k, ok) in enumerate(zip(batch.keys, batch.valid.tolist()))]
            for name in recipe.keys(self.parts):
                batch.fields[name] = [None if r is None else torch.from_numpy(r[name])
                                      for r in rows]
            yield batch


__all__ = ["MANIFEST", "MapPack", "MapVectors", "attach_map", "open_map_pack", "read_town"]
