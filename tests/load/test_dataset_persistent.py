"""CARLAWebData(persistent_workers=True): the same batches as fresh workers, from the same
worker processes, across epochs, resumes and early stops."""
from __future__ import annotations

import pytest
import torch

from carla_wds import CARLABatch, CARLAWebData

from ..helpers import SIZE, all_keys, child_pids


@pytest.fixture(scope="module")
def shards(zoo):
    return zoo()   # shared, read-only (conftest.zoo)


def _same(got: list[CARLABatch], want: list[CARLABatch]) -> None:
    assert [b.keys for b in got] == [b.keys for b in want]
    for a, b in zip(got, want):
        assert torch.equal(a.images, b.images) and torch.equal(a.waypoints, b.waypoints)
        assert torch.equal(a.valid, b.valid)


def _workers() -> set[int]:
    """Child pids, less those alive when the test began (a spawn starts a resource tracker,
    and an earlier test in this process, in whatever order -n gives, may have left one)."""
    return set(child_pids()) - _BEFORE


_BEFORE: set[int] = set()


@pytest.fixture(autouse=True)
def _children_before() -> None:
    global _BEFORE
    _BEFORE = set(child_pids())


def _epochs(data: CARLAWebData, epochs: range) -> tuple[list[list[CARLABatch]], list[set[int]]]:
    """Each epoch's batches, and the worker pids alive during it."""
    out, pids = [], []
    for epoch in epochs:
        data.set_epoch(epoch)
        batches = []
        for batch in data:
            if not batches:
                pids.append(_workers())
            batches.append(batch)
        out.append(batches)
    return out, pids


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_persistent_workers_give_fresh_workers_batches_from_the_same_processes(shards, workers):
    kw = dict(batch_size=4, num_workers=workers, seed=7, augment=True, rank=1, world_size=2,
              image_size=SIZE)
    fresh, fresh_pids = _epochs(CARLAWebData(str(shards), **kw), range(3))
    data = CARLAWebData(str(shards), persistent_workers=True, **kw)
    kept, kept_pids = _epochs(data, range(3))
    for got, want in zip(kept, fresh):
        _same(got, want)
    assert [b.keys for b in kept[0]] != [b.keys for b in kept[1]]   # the epoch reached them
    assert len(kept_pids[0]) == workers and kept_pids[0] == kept_pids[1] == kept_pids[2]
    assert len({frozenset(p) for p in fresh_pids}) == 3              # fresh ones fork each pass
    data.close()
    assert not _workers() & kept_pids[0]


def test_persistent_eval_every_sample_exactly_once_each_pass(shards):
    keys = []
    for rank in range(2):
        data = CARLAWebData(str(shards), batch_size=4, mode="eval", num_workers=2, rank=rank,
                            world_size=2, image_size=SIZE, persistent_workers=True)
        first, second = list(data), list(data)
        _same(second, first)
        keys += [k for b in first for k, v in zip(b.keys, b.valid.tolist()) if v]
    assert sorted(keys) == sorted(all_keys(shards))


@pytest.mark.parametrize("k", [0, 2, 5])
def test_persistent_resume_and_early_stop(shards, k):
    """A pass stopped after k batches drops its workers (their prefetched slots are
    unaccounted for); the state taken there resumes exactly, in a fresh loader and in the same
    one, and the pass after is whole again from kept workers."""
    kw = dict(batch_size=4, num_workers=2, seed=9, augment=True, image_size=SIZE,
              persistent_workers=True)
    reference = CARLAWebData(str(shards), **kw)
    reference.set_epoch(1)
    whole = list(reference)
    data = CARLAWebData(str(shards), **kw)
    data.set_epoch(1)
    it = iter(data)
    for _ in range(k):
        next(it)
    state = data.state_dict()
    del it                                    # an early stop: those workers are shut down
    resumed = CARLAWebData(str(shards), **kw)
    resumed.load_state_dict(state)
    resumed.set_epoch(1)
    _same(list(resumed), whole[k:])
    _same(list(data), whole[k:])              # the same object goes on where it stopped
    pids = _workers()
    data.set_epoch(1)
    outside = data.stats["batches_outside_ring"]
    _same(list(data), whole)                  # a finished epoch restarts whole
    assert _workers() == pids         # from the workers of the pass before
    # holding every batch, as many fit in the ring as in the reference's fresh one: no slot
    # is left taken by the batches above, the early stop's prefetched ones included
    assert (data.stats["batches_outside_ring"] - outside
            == reference.stats["batches_outside_ring"] > 0)


def test_persistent_workers_without_workers_is_a_no_op(shards):
    data = CARLAWebData(str(shards), batch_size=4, image_size=SIZE, persistent_workers=True)
    assert not data.persistent_workers
    assert len(list(data)) == len(data) == len(list(data))


def test_a_pass_stopped_at_len_keeps_its_workers(shards):
    """Lightning stops after exactly len() batches, without asking for one more: that pass
    is whole, and its workers are kept."""
    data = CARLAWebData(str(shards), batch_size=4, num_workers=2, image_size=SIZE,
                        persistent_workers=True)
    want = list(CARLAWebData(str(shards), batch_size=4, num_workers=2, image_size=SIZE))
    it = iter(data)
    got = [next(it) for _ in range(len(data))]
    pids = _workers()
    it.close()
    _same(got, want)
    _same(list(data), want)
    assert _workers() == pids                  # the same workers serve the next pass


def test_close_during_a_pass_and_changed_settings_fork_anew(shards):
    data = CARLAWebData(str(shards), batch_size=4, num_workers=1, image_size=SIZE,
                        persistent_workers=True)
    it = iter(data)
    next(it)
    first = _workers()
    data.close()
    rest = list(it)                            # the pass itself still ends whole...
    assert len(rest) == len(data) - 1         # ...but keeps no workers:
    list(data)
    second = _workers()
    assert second and not second & first      # the next pass forks new ones
    data.image_size = (16, 24)                 # the kept workers were forked for SIZE
    batches = list(data)
    assert batches[0].images.shape[-2:] == (16, 24) and not _workers() & second


def test_persistent_spawned_workers(shards):
    """Spawned workers get the per-pass values as a pickled shared block, not a copy."""
    import multiprocessing
    kw = dict(batch_size=4, num_workers=1, seed=2, image_size=SIZE)
    fresh, _ = _epochs(CARLAWebData(str(shards), **kw), range(2))
    start_method = multiprocessing.get_start_method()
    multiprocessing.set_start_method("spawn", force=True)   # the loader takes the default
    try:
        data = CARLAWebData(str(shards), persistent_workers=True, **kw)
    finally:
        multiprocessing.set_start_method(start_method, force=True)
    kept, pids = _epochs(data, range(2))
    for got, want in zip(kept, fresh):
        _same(got, want)
    assert pids[0] and pids[0] == pids[1]   # (with the tracker the first spawn starts)
