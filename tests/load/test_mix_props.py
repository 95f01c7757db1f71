"""Properties of the mix plan over many seeded random specs (issue 29; load/plan/mix.py): shares,
repeat, count, filters, determinism across processes, and resume at every batch."""
from __future__ import annotations

import hashlib
import itertools
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from carla_wds import CARLAWebData
from carla_wds.load.plan.mix import MixPlanner, mix_spec

from ..helpers import SIZE

SPEEDS = ("stopped", "slow", "fast")
TOWNS = ("Town01", "Town02")


def shard_docs(rng: np.random.Generator, n_shards: int) -> list[dict]:
    """Manifest shard records with random bucket runs (what MixPlanner reads)."""
    docs = []
    for i in range(n_shards):
        n = int(rng.integers(3, 12))
        speed = rng.choice(SPEEDS, n)
        town = TOWNS[i % 2]
        docs.append({"name": f"s{i}.tar", "samples": n,
                     "buckets": {"speed": [[str(v), 1] for v in speed],
                                 "town": [[town, n]]}})
    return docs


def random_spec(rng: np.random.Generator) -> dict:
    entries = []
    for _ in range(int(rng.integers(1, 4))):
        way = rng.choice(["weight", "repeat", "count"])
        value = {"weight": float(rng.uniform(0.1, 3)), "repeat": int(rng.integers(1, 3)),
                 "count": int(rng.integers(1, 30))}[way]
        entry = {"source": str(rng.choice(["a", "b"])), way: value}
        if rng.random() < 0.6:
            entry["where"] = {"speed": list(rng.choice(SPEEDS, 2, replace=False))}
        entries.append(entry)
    if not any("weight" in e for e in entries):
        entries.append({"source": "a", "weight": 1.0})
    return {"entries": entries, "epoch_size": int(rng.integers(20, 120)),
            "schedule": [{"from_epoch": 2, "weights": [float(rng.uniform(0.1, 3))
                                                       if "weight" in e else None
                                                       for e in entries]}]}


def labels(docs: list[dict], name: str) -> list[str]:
    return [v for d in docs for v, n in d["buckets"][name] for _ in range(n)]


@pytest.mark.parametrize("case", range(40))
def test_shares_repeat_count_and_filters_hold_for_random_specs(case):
    rng = np.random.default_rng(case)
    docs = {"a": shard_docs(rng, 5), "b": shard_docs(rng, 3)}
    start = {"a": 0, "b": sum(d["samples"] for d in docs["a"])}
    spec = mix_spec(random_spec(rng))
    planner = MixPlanner.of(spec, docs)
    for i, e in enumerate(spec.entries):   # filters select exactly the matching samples
        speed = labels(docs[e.source], "speed")
        want = [start[e.source] + j for j, v in enumerate(speed)
                if all(v in vals for k, vals in e.where if k == "speed")]
        assert planner.candidates[i].tolist() == want
    for epoch in range(4):
        sizes = planner.sizes(epoch)
        weights = spec.weights(epoch)
        w_total = sum(w for w in weights if w is not None)
        for i, e in enumerate(spec.entries):
            if e.repeat is not None:
                assert sizes[i] == e.repeat * len(planner.candidates[i])
            elif e.count is not None:
                assert sizes[i] == e.count
            else:   # a share of epoch_size, within rounding
                assert abs(sizes[i] - weights[i] / w_total * spec.epoch_size) < 1
        assert sum(s for s, w in zip(sizes, weights) if w is not None) == spec.epoch_size
        drawn = planner.entry_samples(11, epoch)
        for i, d in enumerate(drawn):
            cands = planner.candidates[i]
            assert len(d) == sizes[i] and set(d.tolist()) <= set(cands.tolist())
            # whole copies of the candidates, then distinct draws: no sample more than
            # ceil(n / candidates) times, and at least floor(n / candidates)
            times = Counter(d.tolist())
            full = sizes[i] // len(cands)
            assert all(full <= times.get(int(c), 0) <= full + 1 for c in cands)


PLAN_SCRIPT = """
import hashlib, json, sys
import numpy as np
sys.path.insert(0, {root!r})
from carla_wds.load.plan.mix import MixPlanner, mix_spec
from tests.load.test_mix_props import random_spec, shard_docs
out = []
for case in range(10):
    rng = np.random.default_rng(case)
    docs = {{"a": shard_docs(rng, 5), "b": shard_docs(rng, 3)}}
    planner = MixPlanner.of(mix_spec(random_spec(rng)), docs)
    counts = [d["samples"] for d in docs["a"] + docs["b"]]
    out.append(planner.stream(counts, 5, 3).tolist())
print(hashlib.sha256(json.dumps(out).encode()).hexdigest())
"""


def test_the_same_spec_and_seed_give_the_same_plan_in_any_process():
    root = str(Path(__file__).resolve().parents[2])
    digests = set()
    for hash_seed in ("0", "1", "random"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        done = subprocess.run([sys.executable, "-c", PLAN_SCRIPT.format(root=root)], env=env,
                              capture_output=True, text=True, check=True, cwd=root)
        digests.add(done.stdout.strip())
    assert len(digests) == 1 and len(digests.pop()) == 64


@pytest.fixture(scope="module")
def pack(zoo) -> Path:
    return zoo(episodes=2, frames=24, max_samples=8)   # shared, read-only (conftest.zoo)


def keys_of(data, k=None):
    it = iter(data)
    out = [list(b.keys) for b in (itertools.islice(it, k) if k is not None else it)]
    it.close()
    return out


@pytest.mark.parametrize("stratify", [False, True])
def test_resume_at_every_batch_gives_the_rest_of_the_uninterrupted_run(pack, stratify):
    spec = {"entries": [{"source": str(pack), "where": {"speed": ["stopped", "slow"]},
                         "weight": 1},
                        {"source": str(pack), "weight": 2}],
            "epoch_size": 36, "stratify": stratify}

    def loader(state=None):
        data = CARLAWebData(mix=spec, batch_size=4, image_size=SIZE, seed=2, shuffle_buffer=6)
        data.set_epoch(1)
        if state is not None:
            data.load_state_dict(state)
        return data

    whole = keys_of(loader())
    assert len(whole) == 9
    for k in range(len(whole)):   # (at its end, a loaded state starts the epoch again)
        first = loader()
        head = keys_of(first, k)
        assert head + keys_of(loader(first.state_dict())) == whole, k


def test_resume_at_every_batch_in_another_split_serves_the_rest_of_the_draw(pack):
    spec = {"entries": [{"source": str(pack), "weight": 1}], "epoch_size": 40}

    def loaders(world, state=None):
        out = []
        for rank in range(world):
            data = CARLAWebData(mix=spec, batch_size=4, image_size=SIZE, seed=2, rank=rank,
                                world_size=world, shuffle_buffer=6)
            data.set_epoch(1)
            if state is not None:
                data.load_state_dict(state)
            out.append(data)
        return out

    n = len(loaders(2)[0])
    planned = Counter(planned_keys(pack, loaders(1)[0]))
    for k in range(n):   # (a state saved at the epoch's end starts the next pass whole)
        served, state = Counter(), None
        for data in loaders(2):
            served.update(key for batch in keys_of(data, k) for key in batch)
            state = state or data.state_dict()
        rest = Counter(key for d in loaders(1, state) for b in d for key in b.keys)
        # no sample more often than the epoch drew it; fewer than one new global batch
        # (4 samples) of the draw left unserved
        assert not (served + rest) - planned, k
        assert sum(planned.values()) - sum((served + rest).values()) < 4, k


def planned_keys(pack: Path, data) -> list[str]:
    from ..helpers import all_keys
    keys = all_keys(pack)
    return [keys[int(p)] for p in data._mixer.epoch_samples(2, data.epoch)]
