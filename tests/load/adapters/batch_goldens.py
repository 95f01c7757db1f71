"""Shared by the model-ready adapters' golden tests: read a tools/golden batches npz,
re-create and pack the synth routes it was made from (their hash must match), serve the
shards with an adapter, and compare a collated value with the golden key by key (the npz
layout tools/golden/batches.py writes)."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from carla_wds.load import CARLAWebData
from carla_wds.pack import PackOptions, pack
from carla_wds.pack.synth import synth_dataset
from tools.golden.common import tree_sha256

from ...helpers import built_once


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


def shared_golden_shards(tmp_path_factory, meta: dict, edit: Callable[[Path], None] | None = None,
                         **pack_options) -> Path:
    """golden_shards(meta, edit, **pack_options), written once a session and shared by the
    modules that ask for the same (the model tests and test_raw_images); read-only, the
    routes beside them too (shards.parent / "raw"): a test that changes them copies them
    first. Every call checks that no file changed since they were written."""
    def build() -> Path:
        root = tmp_path_factory.mktemp(f"golden_{meta['synth']['layout']}")
        golden_shards(meta, root, edit, **pack_options)
        return root
    key = ("golden", str(tmp_path_factory.getbasetemp()), meta["raw_sha256"],
           json.dumps(meta["synth"], sort_keys=True),
           edit and f"{edit.__module__}.{edit.__qualname__}", tuple(sorted(pack_options.items())))
    return built_once(key, build, "golden shards") / "shards"


def sample_id(key: str) -> str:
    """A sample key ("town__route__0007") as the golden's "town/route/7"."""
    route, frame = key.rsplit("__", 1)
    return f"{route.replace('__', '/')}/{int(frame)}"


def row_sha256(row: np.ndarray) -> str:
    """The golden's digest of an image row: sha256 of its little-endian float32 bytes."""
    return hashlib.sha256(np.ascontiguousarray(row, "<f4").tobytes()).hexdigest()


def served(meta: dict, shards: Path, adapter: str) -> tuple[CARLAWebData, list[dict]]:
    """The shards served with adapter in eval mode at the golden's batch size: the loader
    and its batches (their count is the golden's; the extra keys are valid and key)."""
    data = CARLAWebData(str(shards), batch_size=meta["batch_size"], mode="eval",
                        adapter=adapter)
    assert data.adapter.extra_keys == ("valid", "key") and data.adapter.float32_keys == ()
    batches = list(data)
    assert len(batches) == len(meta["structure"])
    return data, batches


def structure_of(value) -> dict:
    """A collated value's structure entry as the golden records it."""
    if isinstance(value, list):
        return {"kind": "list", "items": [structure_of(v) for v in value]}
    assert isinstance(value, torch.Tensor), type(value)
    return {"kind": "tensor", "dtype": str(value.dtype).replace("torch.", ""),
            "shape": list(value.shape)}


def compare_value(name: str, ours, arrays: dict, where: str, atol: float) -> None:
    """A collated value against the golden's `name` (lists item by item): images by each
    row's sha256, integers and booleans exactly, floats within rtol 1e-6 and atol."""
    if isinstance(ours, list):
        for i, item in enumerate(ours):
            compare_value(f"{name}/{i}", item, arrays, where, atol)
        return
    arr = ours.numpy()
    if f"{name}#sha256" in arrays:
        got = [row_sha256(r) for r in arr]
        assert got == arrays[f"{name}#sha256"].tolist(), f"{name}: image bytes differ ({where})"
        return
    want = arrays[name]
    assert arr.dtype == want.dtype and arr.shape == want.shape, name
    if arr.dtype.kind in "iub":
        np.testing.assert_array_equal(arr, want, err_msg=name)
    else:
        np.testing.assert_allclose(arr, want, rtol=1e-6, atol=atol, err_msg=name)


def first_rows(value, n: int | None):
    """The first n rows of a collated value (lists item by item; None: all)."""
    return [first_rows(v, n) for v in value] if isinstance(value, list) else value[:n]


def check_batch(b: int, batch: dict, golden: tuple[dict, dict], extra_keys: tuple,
                atol: float, n: int | None = None) -> None:
    """Batch b: exactly their keys in their order, then extra_keys; every key's structure
    and values (its first n rows) equal to the golden's batch b."""
    meta, arrays = golden
    assert list(batch) == meta["keys"] + list(extra_keys)
    for key in meta["keys"]:
        rows = first_rows(batch[key], n)
        assert structure_of(rows) == meta["structure"][b][key], f"batch {b} {key}"
        compare_value(f"b{b}/{key}", rows, arrays, f"batch {b}", atol)
