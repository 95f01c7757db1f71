"""Overlays with an adapter (issue 40): a model adapter's dict, or your function's, carries the
overlay entries under batch["overlays"][<kind>], one parsed JSON value or None per row (None
for padding rows), the row's own sample's; your function also sees them in
sample["fields"][<kind>]. The loader's promises hold on real packs: exact len, every sample
once in eval over 2 ranks x 2 workers, identical batches after a mid-epoch resume."""
from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
import torch

from carla_wds.load import CARLAWebData, Overlays

from ..helpers import all_keys
from ..overlaykit import overlay_entries, resumed_epoch
from .test_overlay_loader import KINDS, SIZE
from .test_overlay_loader import packs  # noqa: F401 - a fixture


def mine(sample: dict, rng: np.random.Generator) -> dict:
    """A user's adapter: what it saw of the overlays, beside a plain tensor and a draw."""
    return {"speed": torch.tensor(sample["speed"]), "draw": float(rng.random()),
            "seen": json.dumps([sample["fields"].get(k) for k in KINDS], sort_keys=True)}


ADAPTERS = {"garage": "garage", "mine": mine}


def _loader(packs, adapter: str, **kw) -> CARLAWebData:  # noqa: F811
    kw = {"batch_size": 3, "seed": 5, **kw}
    if adapter == "mine":
        kw["image_size"] = SIZE
    return CARLAWebData(str(packs / "shards"), adapter=ADAPTERS[adapter],
                        overlays=[str(packs / k) for k in KINDS], **kw)


@pytest.fixture(scope="module")
def tables(packs):  # noqa: F811
    return [overlay_entries(packs / k) for k in KINDS]


def _rows(batches: list[dict], tables) -> list[tuple[str, str]]:
    """(key, entries) of every valid row; each entry is the row's own sample's, padding's
    None, and a function's own view of them equals the dict's."""
    out = []
    for b in batches:
        assert set(b["overlays"]) == set(KINDS)
        assert all(len(b["overlays"][k]) == len(b["key"]) for k in KINDS)
        for i, (key, ok) in enumerate(zip(b["key"], b["valid"].tolist())):
            got = json.dumps([b["overlays"][k][i] for k in KINDS], sort_keys=True)
            if not ok:
                assert got == json.dumps([None] * len(KINDS))
                continue
            assert got == json.dumps([t[key] for t in tables], sort_keys=True)
            if "seen" in b:
                assert b["seen"][i] == got
            out.append((key, got))
    return out


def _same(a: Any, b: Any) -> bool:
    """Equal batch dicts: tensors by value, through dicts and lists."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
def test_eval_serves_every_sample_once_over_two_ranks_and_two_workers(packs, tables,  # noqa: F811
                                                                      adapter):
    ranks = [_loader(packs, adapter, mode="eval", rank=r, world_size=2, num_workers=2,
                     batch_size=5)
             for r in (0, 1)]
    served = [list(d) for d in ranks]
    assert [len(s) for s in served] == [len(d) for d in ranks] and len(ranks[0]) == len(ranks[1])
    rows = _rows(served[0] + served[1], tables)
    assert sorted(k for k, _ in rows) == sorted(all_keys(packs / "shards"))
    assert any(e != json.dumps([None] * len(KINDS)) for _, e in rows)
    assert not all(b["valid"].all() for s in served for b in s)   # padding rows were seen


@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
def test_train_keeps_the_adapter_alones_batches(packs, tables, adapter):  # noqa: F811
    data = _loader(packs, adapter, num_workers=2)
    batches = list(data)
    assert len(batches) == len(data)
    kw = {"image_size": SIZE} if adapter == "mine" else {}
    plain = list(CARLAWebData(str(packs / "shards"), batch_size=3, seed=5, num_workers=2,
                              adapter=ADAPTERS[adapter], **kw))
    _rows(batches, tables)
    for got, want in zip(batches, plain):
        # the same batches but for what the overlays add ("seen": the function's view of them)
        mine_only = ("overlays", "seen")
        assert _same({k: v for k, v in got.items() if k not in mine_only},
                     {k: v for k, v in want.items() if k not in mine_only})


@pytest.mark.parametrize("adapter, workers", [("garage", 0), ("mine", 2)])
def test_a_mid_epoch_resume_gives_the_rest_of_the_epoch(packs, tables, adapter,  # noqa: F811
                                                        workers):
    want, head, rest = resumed_epoch(lambda: _loader(packs, adapter, num_workers=workers), 2)
    assert len(head) + len(rest) == len(want) == len(_loader(packs, adapter))
    assert _rows(head + rest, tables) == _rows(want, tables)
    assert all(_same(a, b) for a, b in zip(head + rest, want))


def test_a_filter_with_an_adapter_serves_only_rows_with_entries(packs, tables):  # noqa: F811
    data = CARLAWebData(str(packs / "shards"), batch_size=3, seed=5, mode="eval", adapter=mine,
                        image_size=SIZE, overlays=Overlays([str(packs / k) for k in KINDS],
                                                           required=True))
    rows = _rows(list(data), tables)
    want = [k for k in all_keys(packs / "shards") if all(t[k] is not None for t in tables)]
    assert sorted(k for k, _ in rows) == sorted(want) and len(want) < len(tables[0])


def test_an_adapter_returning_overlays_is_refused_in_one_line(packs):  # noqa: F811
    data = CARLAWebData(str(packs / "shards"), batch_size=2, image_size=SIZE,
                        adapter=lambda s, rng: {"overlays": 1},
                        overlays=[str(packs / KINDS[0])])
    with pytest.raises(ValueError) as exc:
        next(iter(data))
    assert "\n" not in str(exc.value) and "overlays" in str(exc.value)
