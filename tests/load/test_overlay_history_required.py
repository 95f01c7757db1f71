"""The overlay filter with history windows (issue 40): `Overlays(required=True)` decides on
each window's own (current) frame, and the window still reaches back over the frames the
filter left out: a kept sample's window is the one history alone gives it. On real packs
(garage + two overlay packs): exact len(), every kept sample once in eval over 2 ranks x 2
workers, each window equal to history alone's, identical batches after a mid-epoch resume;
and through an adapter, and over a mix (the triples)."""
from __future__ import annotations

import json

import pytest
import torch

from carla_wds.load import CARLAWebData, Overlays

from ..overlaykit import overlay_entries, resumed_epoch
from .test_overlay_loader import KINDS, SIZE
from .test_overlay_loader import packs  # noqa: F401 - a fixture
from .test_overlay_mix import packs as mixed  # noqa: F401 - a fixture

K = 2


def _loader(packs, **kw) -> CARLAWebData:  # noqa: F811
    kw = {"batch_size": 3, "seed": 7, "history": K, **kw}
    kw.setdefault("image_size", None if "adapter" in kw else SIZE)
    return CARLAWebData(str(packs / "shards"), overlays=Overlays(
        [str(packs / k) for k in KINDS], required=True), **kw)


@pytest.fixture(scope="module")
def kept(packs):  # noqa: F811
    """The keys with an entry in every overlay: the filter's."""
    tables = [overlay_entries(packs / k) for k in KINDS]
    return sorted(k for k in tables[0] if all(t[k] is not None for t in tables))


@pytest.fixture(scope="module")
def alone(packs):  # noqa: F811
    """key -> (frame keys, frame_valid, images) of its window under history alone (eval)."""
    data = CARLAWebData(str(packs / "shards"), batch_size=3, image_size=SIZE, history=K,
                        mode="eval")
    return {key: (b.frame_keys[i], b.frame_valid[i].clone(), b.images[i].clone())
            for b in data for i, key in enumerate(b.keys) if b.valid[i]}


def _windows(batches) -> dict[str, tuple]:
    out = {}
    for b in batches:
        for i, key in enumerate(b.keys):
            if b.valid[i]:
                assert key not in out   # once
                assert all(b.fields[k][i] is not None for k in KINDS)   # the filter's own
                out[key] = (b.frame_keys[i], b.frame_valid[i], b.images[i])
    return out


def test_eval_serves_every_kept_window_once_as_history_alone_gives_it(packs, kept,  # noqa: F811
                                                                      alone):
    assert 0 < len(kept) < len(alone)   # the filter leaves samples out
    ranks = [_loader(packs, mode="eval", rank=r, world_size=2, num_workers=2) for r in (0, 1)]
    served = [list(d) for d in ranks]
    assert [len(s) for s in served] == [len(d) for d in ranks]
    per_rank = -(-len(kept) // 2)   # eval: ceil(ceil(N / R) / B) batches on every rank
    assert len(ranks[0]) == len(ranks[1]) == -(-per_rank // 3)
    got = _windows(served[0] + served[1])
    assert sorted(got) == kept
    for key, (frames, valid, images) in got.items():
        want = alone[key]
        assert frames == want[0] and torch.equal(valid, want[1]), key
        assert torch.equal(images, want[2]), key
    # windows reach frames the filter left out
    assert any(f and f not in kept for frames, _, _ in got.values() for f in frames[:-1])


@pytest.mark.parametrize("workers", [0, 2])
def test_a_mid_epoch_resume_gives_the_rest_of_the_epoch(packs, kept, alone,  # noqa: F811
                                                        workers):
    want, head, rest = resumed_epoch(lambda: _loader(packs, num_workers=workers), head=1)
    assert len(want) == len(_loader(packs)) == len(head) + len(rest)
    assert [b.frame_keys for b in head + rest] == [b.frame_keys for b in want]
    assert all(torch.equal(a.images, b.images) for a, b in zip(head + rest, want))
    windows = _windows(want)
    assert set(windows) <= set(kept) and len(windows) == len(want) * 3
    assert all(v[0] == alone[k][0] for k, v in windows.items())


@pytest.mark.parametrize("workers", [0, 2])
def test_through_an_adapter_each_row_is_a_kept_window(packs, kept, workers):  # noqa: F811
    data = _loader(packs, adapter="garage", mode="eval", num_workers=workers)
    batches = list(data)
    assert len(batches) == len(data)
    keys = [k for b in batches for k, ok in zip(b["key"], b["valid"].tolist()) if ok]
    assert sorted(keys) == kept
    for b in batches:
        n = len(b["key"])
        assert b["frame_valid"].shape == (n, K + 1)
        assert all(v.shape[:2] == (n, K + 1) for v in b.values()
                   if isinstance(v, torch.Tensor) and v.dim() > 1)
        assert all(len(b["overlays"][k]) == n for k in KINDS)


def _seen(sample: dict, rng) -> dict:
    """A user's function: the overlay entries its frame's sample holds."""
    return {"seen": json.dumps([sample["fields"].get(k) for k in KINDS], sort_keys=True)}


def test_a_function_sees_the_entries_at_the_windows_own_frame_only(packs, kept):  # noqa: F811
    tables = [overlay_entries(packs / k) for k in KINDS]
    batches = list(_loader(packs, adapter=_seen, image_size=SIZE, mode="eval"))
    rows = earlier = 0
    for b in batches:
        for r, key in enumerate(b["key"]):
            if not b["valid"][r]:
                continue
            rows += 1
            want = json.dumps([t[key] for t in tables], sort_keys=True)
            assert b["seen"][r][-1] == want
            assert json.dumps([b["overlays"][k][r] for k in KINDS], sort_keys=True) == want
            # an earlier frame's sample holds none (a missing step is a copy of the next real
            # frame, the window's own at the latest: masked by frame_valid)
            ok = b["frame_valid"][r].tolist()
            assert all(s == json.dumps([None] * len(KINDS))
                       for s, v in zip(b["seen"][r][:-1], ok[:-1]) if v)
            earlier += sum(ok[:-1])
    assert rows == len(kept) and earlier > 0


def test_with_a_mix_each_kept_window_is_the_mix_alones(mixed):  # noqa: F811
    """The triple mix x filter x history: pack a and c of test_overlay_mix, both with every
    kind; eval serves each kept sample once, its window the one the mix alone gives it."""
    a, _, c = mixed
    mix = {"entries": [{"source": str(p / "shards"), "weight": 1} for p in (a, c)]}
    kw = dict(mix=mix, batch_size=3, image_size=SIZE, history=K, mode="eval")
    alone = {k: fk for b in CARLAWebData(**kw)
             for k, fk, ok in zip(b.keys, b.frame_keys, b.valid.tolist()) if ok}
    tables = {k: t for p in (a, c) for t in [[overlay_entries(p / kind) for kind in KINDS]]
              for k in t[0]}
    kept = sorted(k for k, t in tables.items() if all(e[k] is not None for e in t))
    data = CARLAWebData(**kw, num_workers=2, overlays=Overlays(
        [str(p / kind) for p in (a, c) for kind in KINDS], required=True))
    batches = list(data)
    assert len(batches) == len(data) == -(-len(kept) // 3)
    rows = {k: fk for b in batches for k, fk, ok in zip(b.keys, b.frame_keys, b.valid.tolist())
            if ok}
    assert sorted(rows) == kept and all(rows[k] == alone[k] for k in rows)
