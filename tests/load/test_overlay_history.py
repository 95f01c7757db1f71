"""Overlays with history windows (issue 40): a batch row gets the entries of its window's own
(last) frame, `batch.fields[<kind>]` holding B entries; the loader's promises hold on real
packs (exact len, every sample once in eval over ranks and workers, the same plan and order
as history alone, identical batches after a mid-epoch resume). A filter with windows:
tests/load/test_overlay_history_required.py."""
from __future__ import annotations

import json

import pytest
import torch

from carla_wds.load import CARLAWebData, History

from ..helpers import all_keys
from ..overlaykit import overlay_entries
from .test_overlay_loader import KINDS, SIZE
from .test_overlay_loader import packs  # noqa: F401 - a fixture


def _loader(packs, **kw) -> CARLAWebData:  # noqa: F811
    kw = {"batch_size": 3, "image_size": SIZE, "seed": 7, "history": 2, **kw}
    return CARLAWebData(str(packs / "shards"), overlays=[str(packs / k) for k in KINDS], **kw)


def _rows(batches, tables) -> list[tuple]:
    """(key, window's frame keys, entries) of every valid row; each batch's entries are one per
    row and those of the row's own frame."""
    out = []
    for b in batches:
        assert all(len(b.fields[k]) == len(b.keys) for k in KINDS)
        for i, key in enumerate(b.keys):
            got = tuple(json.dumps(b.fields[k][i], sort_keys=True) for k in KINDS)
            if not b.valid[i]:
                assert got == ("null",) * len(KINDS)
                continue
            assert b.frame_keys[i][-1] == key
            assert got == tuple(json.dumps(t[key], sort_keys=True) for t in tables)
            out.append((key, tuple(b.frame_keys[i]), got))
    return out


@pytest.fixture(scope="module")
def tables(packs):  # noqa: F811
    return [overlay_entries(packs / k) for k in KINDS]


def test_eval_serves_every_sample_once_over_two_ranks_and_two_workers(packs,  # noqa: F811
                                                                      tables):
    ranks = [_loader(packs, mode="eval", rank=r, world_size=2, num_workers=2) for r in (0, 1)]
    served = [list(d) for d in ranks]
    assert [len(s) for s in served] == [len(d) for d in ranks] and len(ranks[0]) == len(ranks[1])
    rows = _rows(served[0] + served[1], tables)
    assert sorted(k for k, *_ in rows) == sorted(all_keys(packs / "shards"))
    assert any(e[0] != "null" for *_, e in rows) and any(e[0] == "null" for *_, e in rows)
    assert any(f[0] != "" for _, f, _ in rows)   # windows reach earlier frames


def test_train_keeps_the_plan_of_history_alone(packs, tables):  # noqa: F811
    data = _loader(packs, num_workers=2)
    batches = list(data)
    assert len(batches) == len(data)
    plain = CARLAWebData(str(packs / "shards"), batch_size=3, image_size=SIZE, seed=7,
                         history=History(2), num_workers=2)
    want = [b for b in plain]
    rows = _rows(batches, tables)
    assert [k for k, *_ in rows] == [k for b in want for k, ok in zip(b.keys, b.valid) if ok]
    for got, same in zip(batches, want):
        assert torch.equal(got.images, same.images) and got.frame_keys == same.frame_keys


@pytest.mark.parametrize("workers", [0, 2])
def test_a_mid_epoch_resume_gives_the_rest_of_the_epoch(packs, tables, workers):  # noqa: F811
    whole = _loader(packs, num_workers=workers)
    whole.set_epoch(1)
    want = list(whole)
    first = _loader(packs, num_workers=workers)
    first.set_epoch(1)
    it = iter(first)
    head = [next(it) for _ in range(3)]
    state = first.state_dict()
    it.close()
    again = _loader(packs, num_workers=workers)
    again.load_state_dict(state)
    again.set_epoch(1)
    rest = list(again)
    assert len(head) + len(rest) == len(want)
    assert _rows(head + rest, tables) == _rows(want, tables)
    assert all(torch.equal(a.images, b.images) for a, b in zip(head + rest, want))

