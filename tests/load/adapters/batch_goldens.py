"""Shared by the model-ready adapters' golden tests: read a tools/golden batches npz, and
re-create and pack the synth routes it was made from (their hash must match)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import numpy as np

from carla_wds.pack import PackOptions, pack
from carla_wds.pack.synth import synth_dataset
from tools.golden.common import tree_sha256


def read_golden(path: Path) -> tuple[dict, dict[str, np.ndarray]]:
    """(meta, arrays) of a batches npz, loaded without pickles."""
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    return json.loads(str(arrays.pop("#meta"))), arrays


def golden_shards(meta: dict, root: Path, edit: Callable[[Path], None] | None = None,
                  **pack_options) -> Path:
    """The golden's synth routes written again under root/raw (and edited as the golden's
    generator edits them, if it does; hash checked) and packed."""
    synth = meta["synth"]
    synth_dataset(root / "raw", synth["layout"], episodes=synth["episodes"],
                  frames=synth["frames"], seed=synth["seed"],
                  image_size=tuple(synth["image_size"]), progress=False)
    if edit is not None:
        edit(root / "raw")
    assert tree_sha256(root / "raw") == meta["raw_sha256"], (
        f"synth no longer writes the golden's routes; regenerate: {meta['regenerate']}")
    pack(root / "raw", root / "shards",
         PackOptions(layout=synth["layout"], progress=False, **pack_options))
    return root / "shards"
