"""A mix with stratified batches, with history windows, and resumed in another split
(issue 29; load/plan/strata.py, load/plan/mix.py, load/plan/reshape.py)."""
from __future__ import annotations

import itertools
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from carla_wds import CARLAWebData
from carla_wds.load.plan.strata import rank_quotas

from ..helpers import SIZE, all_keys
from .test_history import expected_window, route_frames


@pytest.fixture(scope="module")
def pack(zoo) -> Path:
    return zoo(episodes=4, frames=30, max_samples=9)   # shared, read-only (conftest.zoo)


def towns(pack: Path) -> dict[str, str]:
    runs = [v for s in json.loads((pack / "manifest.json").read_text())["shards"]
            for v, n in s["buckets"]["town"] for _ in range(n)]
    return dict(zip(all_keys(pack), runs))


def two_entries(pack: Path, **spec) -> dict:
    """Entry 0: the first town's samples, weight 3; entry 1: the other towns', weight 1."""
    names = sorted(set(towns(pack).values()))
    return {"entries": [{"source": str(pack), "where": {"town": names[:1]}, "weight": 3},
                        {"source": str(pack), "where": {"town": names[1:]}, "weight": 1}],
            **spec}


def loaders(spec, world, workers, state=None, epoch=1, **kw):
    out = []
    for rank in range(world):
        data = CARLAWebData(mix=spec, batch_size=4, num_workers=workers, rank=rank,
                            world_size=world, image_size=SIZE, seed=7, shuffle_buffer=8, **kw)
        data.set_epoch(epoch)
        if state is not None:
            data.load_state_dict(state)
        out.append(data)
    return out


def test_rank_quotas_add_up_both_ways():
    for quotas, world, batch in [([6, 2], 2, 4), ([5, 2, 1], 2, 4), ([1, 1, 1, 5], 4, 2),
                                 ([8, 0], 2, 4), ([3, 3, 2], 1, 8)]:
        q = rank_quotas(quotas, world, batch)
        assert q.sum(axis=1).tolist() == quotas and q.sum(axis=0).tolist() == [batch] * world
    # spread evenly: each rank holds its share of every entry, within one
    assert rank_quotas([6, 2], 2, 4).tolist() == [[3, 3], [1, 1]]


@pytest.mark.parametrize("world,workers", [(2, 2), (1, 0), (3, 1)])
def test_every_global_batch_holds_each_entrys_share_exactly(pack, world, workers):
    spec = two_entries(pack, epoch_size=48, stratify=True)
    first = sorted(set(towns(pack).values()))[0]
    town = towns(pack)
    per_rank = [list(d) for d in loaders(spec, world, workers)]
    n = {len(b) for b in per_rank}
    assert len(n) == 1
    n_batches = n.pop()
    g = 4 * world   # the global batch
    assert n_batches == 48 // g == len(loaders(spec, world, workers)[0])
    quota = round(0.75 * g)   # entry 0's share of 3/4, rounded by largest remainders
    for t in range(n_batches):
        keys = [k for r in range(world) for k in per_rank[r][t].keys]
        assert sum(town[k] == first for k in keys) == quota, (t, keys)


def test_a_stratified_mix_resumes_at_its_position(pack):
    spec = two_entries(pack, epoch_size=40, stratify=True)
    whole = [b.keys for b in loaders(spec, 1, 2)[0]]
    first = loaders(spec, 1, 2)[0]
    it = iter(first)
    head = [b.keys for b in itertools.islice(it, 3)]
    it.close()
    rest = [b.keys for b in loaders(spec, 1, 2, state=first.state_dict())[0]]
    assert head + rest == whole


@pytest.mark.parametrize("old,new", [((2, 2), (1, 2)), ((1, 2), (2, 1)), ((1, 2), (1, 3))])
def test_a_stratified_mix_resumed_in_another_split(pack, old, new):
    spec = two_entries(pack, epoch_size=48, stratify=True)
    first = sorted(set(towns(pack).values()))[0]
    town = towns(pack)
    served, state = Counter(), None
    for data in loaders(spec, *old):
        it = iter(data)
        served.update(k for b in itertools.islice(it, 2) for k in b.keys)
        it.close()
        state = state or data.state_dict()
    per_rank = [list(d) for d in loaders(spec, *new, state=state)]
    assert len({len(b) for b in per_rank}) == 1
    rest = Counter(k for batches in per_rank for b in batches for k in b.keys)
    assert not (served + rest) - drawn(loaders(spec, *old)[0])
    g = 4 * new[0]
    for t in range(len(per_rank[0])):   # the new global batches keep the shares exactly
        keys = [k for r in range(new[0]) for k in per_rank[r][t].keys]
        assert sum(town[k] == first for k in keys) == round(0.75 * g)


def test_a_mix_serves_history_windows_of_the_routes_frames(pack):
    routes = route_frames(all_keys(pack))
    spec = two_entries(pack, epoch_size=40)
    n = 0
    for b in loaders(spec, 1, 2, history=2, history_stride=2)[0]:
        for i, key in enumerate(b.keys):
            want = expected_window(key, routes, 2, 2)
            assert b.frame_keys[i] == want
            assert b.frame_valid[i].tolist() == [k != "" for k in want]
            n += 1
    assert n == 40


def drawn(data) -> Counter:
    keys = all_keys(Path(data.mix.sources()[0]))
    g = data.batch_size * data.world_size
    return Counter(keys[int(p)] for p in data._mixer.epoch_samples(7, data.epoch, g))


@pytest.mark.parametrize("old,new,history", [((2, 2), (1, 2), 0), ((1, 2), (2, 1), 0),
                                             ((1, 2), (1, 3), 0), ((2, 1), (1, 1), 1)])
def test_a_mix_resumed_in_another_split_serves_the_rest_of_its_draw(pack, old, new, history):
    spec = two_entries(pack, epoch_size=44)
    served, state = Counter(), None
    for data in loaders(spec, *old, history=history):
        it = iter(data)
        served.update(k for b in itertools.islice(it, 2) for k in b.keys)
        it.close()
        state = state or data.state_dict()
    rest_loaders = loaders(spec, *new, state=state, history=history)
    lens = {len(d) for d in rest_loaders}
    rest = Counter(k for d in rest_loaders for b in d for k in b.keys)
    plan = drawn(rest_loaders[0])
    # equal batches per rank; together no sample more often than the epoch drew it; fewer
    # than one global batch of the new split left unserved
    assert len(lens) == 1 and sum(rest.values()) == lens.pop() * 4 * new[0]
    assert not (served + rest) - plan
    assert 0 <= sum(plan.values()) - sum((served + rest).values()) < 4 * new[0]


def test_batches_per_epoch_with_a_mix_points_to_epoch_size(pack):
    with pytest.raises(ValueError, match="epoch_size"):
        loaders(two_entries(pack), 1, 0, batches_per_epoch=3)
