"""Shared by the overlay tests (issue 30): a garage pack with overlay trees beside its data/,
as SimLingo's database has them, and an overlay pack's entries read with plain tarfile."""
from __future__ import annotations

import json
import tarfile
from pathlib import Path
from typing import Any, Callable

from carla_wds.pack import PackOptions, pack
from carla_wds.pack.synth import synth_dataset
from carla_wds.pack.synth.overlays import synth_overlay

from .helpers import all_keys


def garage_with_trees(root: Path, trees: dict[str, str], episodes: int, seed: int,
                      coverage: float = 0.6) -> list[Path]:
    """<root>/data (garage routes), <root>/shards (packed, every frame, 5 a shard) and one
    synthetic overlay tree per {kind: folder name} (seeded per kind); the routes."""
    routes = synth_dataset(root / "data", "garage", episodes=episodes, frames=16, seed=seed,
                           image_size=(24, 32), progress=False)
    pack(root / "data", root / "shards", PackOptions.of(layout="garage", max_samples=5,
                                                        all_frames=True, progress=False))
    for i, (kind, folder) in enumerate(trees.items()):
        synth_overlay(root / folder, kind, routes, root / "data", coverage=coverage, seed=i)
    return routes


def overlay_entries(pack_dir: Path) -> dict[str, object]:
    """key -> entry (None: the sample has none) of an overlay pack, in pack order."""
    values = {}
    for shard in sorted(pack_dir.glob("overlay-*.tar")):
        with tarfile.open(shard) as tar:
            for m in tar:
                values[m.name.split(".")[0]] = json.loads(tar.extractfile(m).read())
    return values


def entry_tables(roots: Any, kinds: tuple[str, ...]) -> dict[str, str]:
    """key -> the JSON of its entries, one per kind (None for a kind its pack has no overlay
    of), for packs at root/shards with overlay packs at root/<kind>."""
    out = {}
    for p in roots:
        have = {k: overlay_entries(p / k) for k in kinds if (p / k).is_dir()}
        for key in all_keys(p / "shards"):
            out[key] = json.dumps([have[k][key] if k in have else None for k in kinds],
                                  sort_keys=True)
    return out


def resumed_epoch(make: Callable[[], Any], head: int, epoch: int = 1
                  ) -> tuple[list, list, list]:
    """(the whole epoch from one loader, its first `head` batches from another, the rest of
    the epoch from a third that loaded the second's state_dict taken after them)."""
    whole = make()
    whole.set_epoch(epoch)
    want = list(whole)
    first = make()
    first.set_epoch(epoch)
    it = iter(first)
    got = [next(it) for _ in range(head)]
    state = first.state_dict()
    it.close()
    again = make()
    again.load_state_dict(state)
    again.set_epoch(epoch)
    return want, got, list(again)
