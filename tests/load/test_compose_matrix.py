"""Every pair and triple of the loader's features composes (issue 40), in one matrix: mix,
history windows, overlays, a model adapter by name ("garage") and your function as the
adapter; and each of those with overlays again with the overlay filter
(`Overlays(required=True)`, batch 1: "every sample" is then every kept one); and a stratified
mix with history, overlays and either adapter. For each combination construction either
raises one line naming both features and the reason, or the loader keeps its promises on real
packs (two tiny garage packs with two overlay packs each, keys distinct across them):
- eval over 2 ranks x 2 workers: exact len(), equal batch counts, every sample exactly once;
  each row's window ends at its own frame, its overlay entries its own sample's;
- train over 2 ranks x 2 workers: exact len(), equal batch counts, no sample twice;
- a mid-epoch resume (state after 1 batch, a fresh loader) gives the same remaining batches,
  byte for byte;
- a resume on another world size (2 ranks x 2 workers -> 1 x 0) serves the rest of the epoch:
  len() batches, no sample twice over the epoch, fewer than one new global batch unseen
  (stratified: fewer than one per mix entry).

The only combination that cannot be built is a model adapter with your function: both are the
one per-sample transform (`adapter=`), so `sample_transform=fn` beside `adapter="garage"` is
refused at construction."""
from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from carla_wds.load import CARLAWebData, Overlays

from ..helpers import all_keys
from ..overlaykit import overlay_entries
from .test_digests import _hash_into
from .test_overlay_mix import KINDS, _pack

FEATURES = ("mix", "history", "overlays", "adapter", "fn")
COMBOS = [c for n in (2, 3, 4, 5) for c in itertools.combinations(FEATURES, n)]
REFUSED = {"adapter", "fn"}   # one per-sample transform: both given is refused
# the overlay filter (Overlays(required=True)) with each combination of overlays that builds
COMBOS += [c + ("required",) for c in COMBOS if "overlays" in c and not REFUSED <= set(c)]
# a stratified mix (each global batch holds the entries' shares) with every other feature
COMBOS += [("mix", "history", "overlays", t, "stratify") for t in ("adapter", "fn")]
K, BATCH, SIZE, HEAD = 1, 3, (24, 32), 1


def batch_size(combo: tuple[str, ...]) -> int:
    """1 with the filter: it keeps about half of a pack's samples, still two batches a rank."""
    return 1 if "required" in combo else BATCH


@pytest.fixture(scope="module")
def packs(tmp_path_factory) -> tuple[Path, Path]:
    """Two garage packs (keys a_dataset/..., b_dataset/...), each with both overlay kinds."""
    root = tmp_path_factory.mktemp("compose")
    _pack(root / "a", "a_dataset", 3, 25, KINDS)   # 4 samples with both kinds
    _pack(root / "b", "b_dataset", 2, 22, KINDS)
    sizes = [len(all_keys(root / p / "shards")) for p in "ab"]
    # a alone fills whole global batches; a mix of both leaves eval padding and a train tail
    assert sizes[0] % (2 * BATCH) == 0 and sum(sizes) % (2 * BATCH) != 0, sizes
    return root / "a", root / "b"


@pytest.fixture(scope="module")
def tables(packs) -> dict[str, str]:
    """key -> the JSON of its overlay entries, one per kind."""
    out = {}
    for p in packs:
        have = [overlay_entries(p / k) for k in KINDS]
        out.update({key: json.dumps([t[key] for t in have], sort_keys=True)
                    for key in all_keys(p / "shards")})
    return out


def fn(sample: dict, rng: np.random.Generator) -> dict:
    """A user's adapter: a label, a draw, and what it saw of the overlays."""
    return {"speed": torch.tensor(sample["speed"]), "draw": float(rng.random()),
            "seen": json.dumps([sample.get("fields", {}).get(k) for k in KINDS])}


def make(packs, combo: tuple[str, ...], **kw: Any) -> CARLAWebData:
    a, b = packs
    used = (a, b) if "mix" in combo else (a,)
    kw = {"batch_size": batch_size(combo), "seed": 3, "shuffle_buffer": 8, **kw}
    if "mix" in combo:   # every sample once: a repeated once, b's weight its whole pack
        kw["mix"] = {"entries": [{"source": str(a / "shards"), "repeat": 1},
                                 {"source": str(b / "shards"), "weight": 1}],
                     "stratify": "stratify" in combo}
    if "history" in combo:
        kw["history"] = K
    if "overlays" in combo:
        kw["overlays"] = Overlays([str(p / k) for p in used for k in KINDS],
                                  required="required" in combo)
    if "adapter" in combo:
        kw["adapter"] = "garage"
    if "fn" in combo:   # beside a named adapter, through the old keyword: both transforms
        kw["sample_transform" if "adapter" in combo else "adapter"] = fn
    if "adapter" not in combo:
        kw["image_size"] = SIZE
    data = CARLAWebData(None if "mix" in combo else str(a / "shards"), **kw)
    data.set_epoch(1)
    return data


def _get(batch: Any, name: str) -> Any:
    return batch[name] if isinstance(batch, dict) else getattr(batch, name)


def rows(batch: Any, tables: dict[str, str], combo: tuple[str, ...]) -> list[str]:
    """The keys of a batch's valid rows; each row's window ends at its own frame, and its
    overlay entries (and what a function saw of them) are its own sample's."""
    keys, valid = _get(batch, "key" if isinstance(batch, dict) else "keys"), _get(batch, "valid")
    out = []
    for i, (key, ok) in enumerate(zip(keys, valid.tolist())):
        if not ok:
            continue
        out.append(key)
        if "history" in combo:
            frames = _get(batch, "frame_keys")[i]
            assert len(frames) == K + 1 and frames[-1] == key
        if "overlays" in combo:
            given = batch["overlays"] if isinstance(batch, dict) else batch.fields
            assert json.dumps([given[k][i] for k in KINDS], sort_keys=True) == tables[key]
        if "overlays" in combo and "fn" in combo:
            seen = batch["seen"][i]
            assert json.loads(seen[-1] if "history" in combo else seen) == \
                json.loads(tables[key])
            if "history" in combo and batch["frame_valid"][i][0]:   # an earlier frame: None
                assert json.loads(seen[0]) == [None] * len(KINDS)
    return out


def digest(batch: Any) -> str:
    h = hashlib.sha256()
    _hash_into(h, batch)
    return h.hexdigest()


def _id(combo: tuple[str, ...]) -> str:
    return "+".join(combo)


@pytest.mark.parametrize("combo", COMBOS, ids=_id)
def test_each_combination_is_refused_in_one_line_or_keeps_every_promise(packs, tables, combo):
    num_workers = 2
    if REFUSED <= set(combo):
        with pytest.raises(ValueError) as exc, pytest.deprecated_call():
            make(packs, combo, num_workers=num_workers)
        msg = str(exc.value)
        assert "\n" not in msg and "adapter=" in msg and "sample_transform=" in msg
        return
    everything = sorted(all_keys(packs[0] / "shards") +
                        (all_keys(packs[1] / "shards") if "mix" in combo else []))
    if "required" in combo:   # the samples with an entry of every kind
        everything = [k for k in everything if None not in json.loads(tables[k])]
    batch = batch_size(combo)
    # eval: every sample once over 2 ranks x 2 workers, equal batch counts
    evals = [make(packs, combo, mode="eval", rank=r, world_size=2, num_workers=num_workers)
             for r in (0, 1)]
    served = [list(d) for d in evals]
    assert [len(s) for s in served] == [len(d) for d in evals] and len(evals[0]) == len(evals[1])
    assert len(evals[0]) == -(-len(everything) // (2 * batch))   # the padding: < a batch a rank
    assert sorted(k for s in served for b in s for k in rows(b, tables, combo)) == everything
    # train: exact len, equal counts, no sample twice
    trains = [make(packs, combo, rank=r, world_size=2, num_workers=num_workers) for r in (0, 1)]
    whole = [list(d) for d in trains]
    assert [len(w) for w in whole] == [len(d) for d in trains] and len(whole[0]) == len(whole[1])
    assert len(whole[0]) > HEAD
    keys = [k for w in whole for b in w for k in rows(b, tables, combo)]
    assert len(keys) == len(set(keys)) == 2 * len(whole[0]) * batch
    # a mid-epoch resume on rank 0: the same remaining batches
    first = make(packs, combo, rank=0, world_size=2, num_workers=num_workers)
    it = iter(first)
    head = [next(it) for _ in range(HEAD)]
    state = first.state_dict()
    it.close()
    again = make(packs, combo, rank=0, world_size=2, num_workers=num_workers)
    again.load_state_dict(state)
    rest = list(again)
    assert len(head) + len(rest) == len(whole[0])
    want = [digest(b) for b in whole[0]]
    assert [digest(b) for b in head + rest] == want and len(set(want)) == len(want)
    # resume on another world size: every rank consumed HEAD batches (rank 1's are the first
    # of its epoch); one rank serves the rest
    done = [k for b in head + whole[1][:HEAD] for k in rows(b, tables, combo)]
    alone = make(packs, combo, world_size=1, rank=0, num_workers=0)
    alone.load_state_dict(state)
    after = list(alone)
    assert len(after) == len(alone)
    later = [k for b in after for k in rows(b, tables, combo)]
    assert len(later) == len(alone) * batch
    assert len(set(done + later)) == len(done + later)
    # unseen: the new split's remainder; stratified, each entry's leftover (docs/loading.md)
    assert 0 <= len(everything) - len(done) - len(later) < batch * (
        2 if "stratify" in combo else 1)
