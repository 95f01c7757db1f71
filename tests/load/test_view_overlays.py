"""Overlays over a mix of packs of different layouts (issue 40): a tcp pack and a garage pack,
served in their common view (load/stream/common_view.py), each with its own overlay packs
(load/stream/overlay_mix.py joins each overlay to the base it names). Checked on real packs:
eval over 2 ranks x 2 workers serves every sample once, each row with its own sample's overlay
entries (None for a kind its pack has none of), in the view's one camera and label frame;
train resumes mid-epoch to identical batches; with history, the entries are the current
frame's. And view options on a mix of alike packs are refused, not ignored."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from carla_wds.load import CARLAWebData, History
from carla_wds.pack import PackOptions, pack
from carla_wds.pack.overlay import pack_overlay
from carla_wds.pack.synth import synth_dataset
from carla_wds.pack.synth.overlays import synth_overlay

from ..helpers import all_keys
from ..overlaykit import entry_tables, resumed_epoch
from .test_overlay_mix import KINDS, _pack

SIZE = (16, 24)
NONE = json.dumps([None] * len(KINDS))


def _tcp(root: Path, seed: int) -> None:
    """A tcp pack at root/shards (its keys name its towns: none is a garage key) with the
    first kind's overlay."""
    routes = synth_dataset(root / "data", "tcp", episodes=2, frames=12, seed=seed,
                           image_size=(24, 32), progress=False)
    pack(root / "data", root / "shards", PackOptions.of(layout="tcp", max_samples=5,
                                                        progress=False))
    synth_overlay(root / "tree", KINDS[0], routes, root / "data", coverage=0.7, seed=seed)
    pack_overlay(root / "tree", root / "shards", root / KINDS[0], KINDS[0])


@pytest.fixture(scope="module")
def packs(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("view_ovl")
    _tcp(root / "t", 21)
    _pack(root / "g", "g_dataset", 2, 22, KINDS)
    return root / "t", root / "g"


@pytest.fixture(scope="module")
def tables(packs) -> dict[str, str]:
    """key -> the JSON of its entries ([kind entries], None for a kind its pack lacks)."""
    return entry_tables(packs, KINDS)


def _loader(packs, **kw) -> CARLAWebData:
    mix = {"entries": [{"source": str(p / "shards"), "weight": 1} for p in packs]}
    overlays = [str(p / k) for p in packs for k in KINDS if (p / k).is_dir()]
    return CARLAWebData(mix=mix, overlays=kw.pop("overlays", overlays), batch_size=3,
                        image_size=SIZE, cameras=["front"], seed=5, **kw)


def _rows(batches, tables) -> list[tuple[str, str]]:
    out = []
    for b in batches:
        for i, (key, ok) in enumerate(zip(b.keys, b.valid.tolist())):
            got = json.dumps([b.fields[k][i] for k in KINDS], sort_keys=True)
            assert got == (tables[key] if ok else NONE), key
            if ok:
                out.append((key, got))
    return out


def test_eval_serves_each_sample_once_with_its_own_entries_in_the_view(packs, tables):
    ranks = [_loader(packs, mode="eval", rank=r, world_size=2, num_workers=2) for r in (0, 1)]
    served = [list(d) for d in ranks]
    assert [len(s) for s in served] == [len(d) for d in ranks] and len(ranks[0]) == len(ranks[1])
    rows = _rows(served[0] + served[1], tables)
    keys = sorted(k for p in packs for k in all_keys(p / "shards"))
    assert sorted(k for k, _ in rows) == keys
    assert ranks[0].spec.cameras == ("front",)
    tcp = set(all_keys(packs[0] / "shards"))
    assert all(json.loads(e)[1] is None for k, e in rows if k in tcp)   # tcp has no drivelm
    assert any(json.loads(e)[0] is not None for k, e in rows if k in tcp)
    assert any(json.loads(e)[1] is not None for k, e in rows if k not in tcp)
    assert all(b.images.shape[1:3] == (1, 3) for b in served[0])


def test_train_resumes_mid_epoch_to_identical_batches(packs, tables):
    want, head, rest = resumed_epoch(lambda: _loader(packs, num_workers=2), 2)
    assert len(head) + len(rest) == len(want) > 2
    assert _rows(head + rest, tables) == _rows(want, tables)
    assert all(torch.equal(x.images, y.images) for x, y in zip(head + rest, want))


def test_with_history_the_entries_are_the_current_frames(packs, tables):
    data = _loader(packs, mode="eval", history=History(1, stride="0.5s"))
    batches = list(data)
    assert len(batches) == len(data)
    rows = _rows(batches, tables)
    assert sorted(k for k, _ in rows) == sorted(k for p in packs for k in all_keys(p / "shards"))
    assert all(b.frame_valid.shape[1] == 2 for b in batches)


def test_view_options_on_alike_packs_are_refused_not_ignored(packs):
    g = packs[1]
    for spec, said in (({"view": {"pred_len": 2}}, "view"),
                       ({"entries_cameras": {"rgb": "front"}}, "cameras")):
        entries = [{"source": str(g / "shards"), "weight": 1,
                    **({"cameras": spec["entries_cameras"]} if "entries_cameras" in spec
                       else {})}] * 2
        mix = {"entries": entries, **({"view": spec["view"]} if "view" in spec else {})}
        with pytest.raises(ValueError) as exc:
            CARLAWebData(mix=mix, batch_size=3, image_size=SIZE)
        msg = str(exc.value)
        assert "\n" not in msg and "Fix:" in msg and said in msg, msg
