"""Overlays with a mix (issue 40): `CARLAWebData(mix=..., overlays=[...])` takes the overlays
of every mixed pack in one list, each joined to the pack its manifest names; a pack without
an overlay of a kind serves None for it, and `Overlays(required=True)` needs every kind for
every pack (else refused at construction, in one line) and draws the mix among the kept
samples. The loader's promises hold on real packs: exact len, every sample once in eval over
2 ranks x 2 workers, the mix alone's plan, identical batches after a mid-epoch resume, and
each row's entries its own sample's (two packs whose keys differ, compared by key)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from carla_wds.load import CARLAWebData, Overlays
from carla_wds.pack import PackOptions, pack
from carla_wds.pack.overlay import pack_overlay
from carla_wds.pack.synth import synth_dataset
from carla_wds.pack.synth.overlays import synth_overlay

from ..helpers import all_keys, built_once
from ..overlaykit import entry_tables, resumed_epoch

KINDS = ("simlingo_commentary", "drivelm")
SIZE = (16, 24)
NONE = json.dumps([None] * len(KINDS))


def _pack(root: Path, top: str, episodes: int, seed: int, kinds: tuple[str, ...]) -> None:
    """A garage pack at root/shards whose keys start with `top` (the dataset folder, renamed:
    two packs of one synth would share keys), with an overlay pack per kind at root/<kind>."""
    routes = synth_dataset(root / "data", "garage", episodes=episodes, frames=12, seed=seed,
                           image_size=(24, 32), progress=False)
    (first,) = {r.relative_to(root / "data").parts[0] for r in routes}
    shutil.move(root / "data" / first, root / "data" / top)
    routes = [root / "data" / top / r.relative_to(root / "data" / first) for r in routes]
    pack(root / "data", root / "shards", PackOptions.of(layout="garage", max_samples=5,
                                                        all_frames=True, progress=False))
    for i, kind in enumerate(kinds):
        synth_overlay(root / f"{kind}_tree", kind, routes, root / "data", coverage=0.7,
                      seed=seed + i)
        pack_overlay(root / f"{kind}_tree", root / "shards", root / kind, kind)


@pytest.fixture(scope="module")
def packs(tmp_path_factory) -> tuple[Path, Path, Path]:
    """Pack a with both kinds, b with the first only, c with both (a mix of a and c can
    filter); every key differs across them."""
    def build() -> Path:   # once per session: test_overlay_history_required reads them too
        root = tmp_path_factory.mktemp("ovl_mix")
        _pack(root / "a", "a_dataset", 2, 11, KINDS)
        _pack(root / "b", "b_dataset", 3, 12, KINDS[:1])
        _pack(root / "c", "c_dataset", 2, 13, KINDS)
        return root
    root = built_once(("ovl_mix", str(tmp_path_factory.getbasetemp())), build, "overlay packs")
    return root / "a", root / "b", root / "c"


@pytest.fixture(scope="module")
def tables(packs) -> dict[str, str]:
    """key -> the JSON of its entries ([kind entries], None for a kind its pack lacks)."""
    return entry_tables(packs, KINDS)


def _mix(*roots: Path, epoch_size: int = 30) -> dict:
    return {"epoch_size": epoch_size,
            "entries": [{"source": str(r / "shards"), "weight": 1} for r in roots]}


def _overlays(*roots: Path) -> list[str]:
    return [str(r / k) for r in roots for k in KINDS if (r / k).is_dir()]


def _loader(packs, **kw) -> CARLAWebData:
    a, b, _ = packs
    kw = {"batch_size": 3, "image_size": SIZE, "seed": 9, "mix": _mix(a, b),
          "overlays": _overlays(a, b), **kw}
    return CARLAWebData(**kw)


def _rows(batches, tables) -> list[tuple[str, str]]:
    """(key, entries) of every valid row, each checked against its own sample's entries."""
    out = []
    for b in batches:
        for i, (key, ok) in enumerate(zip(b.keys, b.valid.tolist())):
            got = json.dumps([b.fields[k][i] for k in KINDS], sort_keys=True)
            assert got == (tables[key] if ok else NONE)
            if ok:
                out.append((key, got))
    return out


def test_eval_serves_every_sample_once_over_two_ranks_and_two_workers(packs, tables):
    a, b, _ = packs
    ranks = [_loader(packs, mode="eval", rank=r, world_size=2, num_workers=2, batch_size=4)
             for r in (0, 1)]
    served = [list(d) for d in ranks]
    assert [len(s) for s in served] == [len(d) for d in ranks] and len(ranks[0]) == len(ranks[1])
    rows = _rows(served[0] + served[1], tables)
    assert sorted(k for k, _ in rows) == sorted(all_keys(a / "shards") + all_keys(b / "shards"))
    b_keys = set(all_keys(b / "shards"))
    assert all(json.loads(e)[1] is None for k, e in rows if k in b_keys)   # b has no drivelm
    assert any(json.loads(e)[0] is not None for k, e in rows if k in b_keys)
    assert any(json.loads(e)[1] is not None for k, e in rows if k not in b_keys)


def test_train_keeps_the_plan_of_the_mix_alone(packs, tables):
    data = _loader(packs, num_workers=2)
    batches = list(data)
    assert len(batches) == len(data) == 30 // 3
    a, b, _ = packs
    plain = list(CARLAWebData(mix=_mix(a, b), batch_size=3, image_size=SIZE, seed=9,
                              num_workers=2))
    assert [k for k, _ in _rows(batches, tables)] == [k for p in plain for k in p.keys]
    assert all(torch.equal(x.images, y.images) for x, y in zip(batches, plain))


@pytest.mark.parametrize("workers", [0, 2])
def test_a_mid_epoch_resume_gives_the_rest_of_the_epoch(packs, tables, workers):
    want, head, rest = resumed_epoch(lambda: _loader(packs, num_workers=workers), 4)
    assert len(head) + len(rest) == len(want)
    assert _rows(head + rest, tables) == _rows(want, tables)
    assert all(torch.equal(x.images, y.images) for x, y in zip(head + rest, want))


def test_required_draws_the_mix_among_the_kept_samples(packs, tables):
    a, _, c = packs
    kw = dict(mix=_mix(a, c, epoch_size=24), batch_size=4, image_size=SIZE, seed=9,
              overlays=Overlays(_overlays(a, c), required=True))
    data = CARLAWebData(**kw, num_workers=2)
    rows = _rows(list(data), tables)
    assert len(rows) == 24 and len(data) == 6
    assert all(None not in json.loads(e) for _, e in rows)
    kept = sorted(k for p in (a, c) for k in all_keys(p / "shards")
                  if None not in json.loads(tables[k]))
    assert len(kept) < len(all_keys(a / "shards")) + len(all_keys(c / "shards"))
    evals = [CARLAWebData(**{**kw, "mode": "eval"}, rank=r, world_size=2) for r in (0, 1)]
    assert sorted(k for d in evals for k, _ in _rows(list(d), tables)) == kept


def test_a_pack_without_a_kind_is_refused_with_required_in_one_line(packs):
    with pytest.raises(ValueError) as exc:
        _loader(packs, overlays=Overlays(_overlays(*packs[:2]), required=True))
    msg = str(exc.value)
    assert "\n" not in msg and "mix source" in msg and str(packs[1] / "shards") in msg
    assert "drivelm" in msg and "required=True" in msg and "Fix:" in msg


def test_an_overlay_of_a_pack_not_mixed_is_refused_in_one_line(packs):
    a, b, c = packs
    with pytest.raises(ValueError) as exc:
        _loader(packs, overlays=_overlays(a, c))
    msg = str(exc.value)
    assert "\n" not in msg and "not in the mix" in msg and str(c) in msg and "Fix:" in msg


def test_two_overlays_of_one_kind_for_one_pack_are_refused(packs):
    a, b, _ = packs
    with pytest.raises(ValueError, match="both give kind"):
        _loader(packs, overlays=_overlays(a, b) + [str(a / KINDS[0])])


def test_with_an_adapter_too_each_row_gets_its_own_entries(packs, tables):
    def mine(sample: dict, rng: np.random.Generator) -> dict:
        return {"speed": torch.tensor(sample["speed"])}

    data = _loader(packs, adapter=mine, mode="eval", num_workers=2, batch_size=4)
    seen = 0
    for batch in data:
        for i, (key, ok) in enumerate(zip(batch["key"], batch["valid"].tolist())):
            got = json.dumps([batch["overlays"][k][i] for k in KINDS], sort_keys=True)
            assert got == (tables[key] if ok else NONE)
            seen += ok
    assert seen == len(tables) - len(all_keys(packs[2] / "shards"))


def test_with_history_too_a_row_gets_its_own_frames_entries(packs, tables):
    a, b, _ = packs
    ranks = [_loader(packs, mode="eval", rank=r, world_size=2, num_workers=2, history=1)
             for r in (0, 1)]
    served = [list(d) for d in ranks]
    assert [len(s) for s in served] == [len(d) for d in ranks]
    batches = served[0] + served[1]
    assert all(f[-1] == k for x in batches for f, k, ok in zip(x.frame_keys, x.keys, x.valid)
               if ok)
    rows = _rows(batches, tables)
    assert sorted(k for k, _ in rows) == sorted(all_keys(a / "shards") + all_keys(b / "shards"))
