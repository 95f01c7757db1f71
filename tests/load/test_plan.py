"""Epoch planning and the pipeline stages, on plain lists (no shards, no torch workers)."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from carla_wds.load.plan import epoch as plan
from carla_wds.load.decode import stages

COUNTS = [7, 7, 3, 7, 1, 7, 5]   # uneven shards, like a real pack's tail shards


def _positions(counts, seg_list):
    """Global (shard, index) pairs covered by a list of segments."""
    return [(s, i) for s, lo, hi in seg_list for i in range(lo, hi)]


@pytest.mark.parametrize("world,workers,batch", list(itertools.product((1, 2, 3), (0, 1, 2, 3), (2, 5))))
def test_train_plan_exact_and_disjoint(world, workers, batch):
    n = plan.batches_per_rank(COUNTS, batch, world, "train")
    seen = []
    for rank in range(world):
        plans = [plan.plan_worker(COUNTS, rank=rank, world_size=world, worker=w,
                                  num_workers=workers, batch_size=batch, mode="train", seed=3,
                                  epoch=1) for w in range(max(1, workers))]
        assert sum(p.n_batches for p in plans) == n
        for p in plans:
            covered = _positions(COUNTS, p.segments)
            assert len(covered) == p.n_batches * batch == p.n_real
            seen += covered
    assert len(seen) == len(set(seen)), "a sample planned twice in one epoch"
    unseen = sum(COUNTS) - len(seen)
    # fewer than one global batch: the least that equal full batches without repeats allow
    assert unseen == sum(COUNTS) % (world * batch) < world * batch



def _train_plans(counts, world, workers, batch, seed=0, epoch=0):
    """[(rank, plan)] of every (rank, physical worker) of one train epoch."""
    return [(rank, plan.plan_worker(counts, rank=rank, world_size=world, worker=w,
                                    num_workers=workers, batch_size=batch, mode="train",
                                    seed=seed, epoch=epoch))
            for rank in range(world) for w in range(max(1, workers))]


def _stream_range(order, counts, segments) -> range:
    """The positions of segments in the epoch's concatenated stream; fails unless they form
    one contiguous run (the read-locality promise of plan.py)."""
    offset = dict(zip(order, itertools.accumulate([0] + [counts[s] for s in order])))
    spans = [(offset[s] + lo, offset[s] + hi) for s, lo, hi in segments]
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:])), f"not contiguous: {spans}"
    return range(spans[0][0], spans[-1][1]) if spans else range(0)


def _check_train_epoch(counts, world, workers, batch, seed=0, epoch=0) -> int:
    """Asserts the train guarantees of one epoch's plan; returns the unseen count."""
    n = plan.batches_per_rank(counts, batch, world, "train")
    order = plan.shard_order(len(counts), seed, epoch, True)
    covered, per_rank = [], [0] * world
    for rank, p in _train_plans(counts, world, workers, batch, seed, epoch):
        assert p.n_real == p.n_batches * batch   # full batches only, no padding in train
        run = _stream_range(order, counts, p.segments)
        assert len(run) == p.n_real
        per_rank[rank] += p.n_batches
        if run:   # a worker with no batch (more workers than batches) reads nothing
            covered.append(run)
    assert per_rank == [n] * world
    covered.sort(key=lambda r: r.start)
    # the runs tile the stream's head without gaps or overlaps: no sample twice
    assert [r.start for r in covered[1:]] == [r.stop for r in covered[:-1]]
    assert covered[0].start == 0
    return sum(counts) - covered[-1].stop


def test_train_plan_property_random_shard_sizes():
    """Random shard sizes (tail shards, a shard bigger than a rank's share, many tiny ones):
    unseen is always sum % (world * batch), so < world * batch, with exact equal counts."""
    rng = np.random.default_rng(20240613)
    checked = 0
    while checked < 300:
        counts = [int(c) for c in rng.integers(1, rng.choice([4, 30, 200]), rng.integers(1, 15))]
        world, workers = int(rng.integers(1, 9)), int(rng.integers(0, 5))
        batch = int(rng.integers(1, 17))
        if plan.batches_per_rank(counts, batch, world, "train") < 1:
            continue   # the loader refuses this (no full batch per rank)
        unseen = _check_train_epoch(counts, world, workers, batch, seed=checked, epoch=checked % 3)
        assert unseen == sum(counts) % (world * batch) < world * batch, (counts, world, batch)
        checked += 1


@pytest.mark.parametrize("counts,world,workers,batch,unseen", [
    ([211], 2, 2, 16, 19),                # the case, in one shard that ranks split
    ([64, 64, 64, 19], 2, 3, 16, 19),     # the same 211 in shards of 64
    ([1000] * 189, 8, 4, 32, 72),         # TCP scale: 189K samples, 8 GPUs
])
def test_train_coverage_figures(counts, world, workers, batch, unseen):
    assert _check_train_epoch(counts, world, workers, batch, seed=1, epoch=2) == unseen


def test_train_workers_start_and_end_mid_shard():
    """One shard bigger than everything: only sample-granular cuts can share it out."""
    plans = [p for _, p in _train_plans([100], world=3, workers=2, batch=4)]
    assert [p.segments for p in plans] == [((0, 0, 16),), ((0, 16, 32),), ((0, 32, 48),),
                                          ((0, 48, 64),), ((0, 64, 80),), ((0, 80, 96),)]


def test_train_plan_deterministic_and_reordered_per_epoch():
    args = ([9, 4, 12, 7, 3, 11], 2, 3, 4)
    same = [p.segments for _, p in _train_plans(*args, seed=5, epoch=1)]
    assert same == [p.segments for _, p in _train_plans(*args, seed=5, epoch=1)]
    assert same != [p.segments for _, p in _train_plans(*args, seed=5, epoch=2)]
    assert same != [p.segments for _, p in _train_plans(*args, seed=6, epoch=1)]

@pytest.mark.parametrize("world,workers,batch", list(itertools.product((1, 2, 3), (0, 1, 3), (2, 4))))
def test_eval_plan_covers_every_sample_once(world, workers, batch):
    n = plan.batches_per_rank(COUNTS, batch, world, "eval")
    seen = []
    for rank in range(world):
        plans = [plan.plan_worker(COUNTS, rank=rank, world_size=world, worker=w,
                                  num_workers=workers, batch_size=batch, mode="eval", seed=0,
                                  epoch=0) for w in range(max(1, workers))]
        assert sum(p.n_batches for p in plans) == n == math.ceil(math.ceil(sum(COUNTS) / world) / batch)
        seen += [pos for p in plans for pos in _positions(COUNTS, p.segments)]
    assert sorted(seen) == sorted((s, i) for s, c in enumerate(COUNTS) for i in range(c))


def test_shard_order_depends_on_seed_and_epoch_only():
    a = plan.shard_order(50, seed=1, epoch=0, shuffle=True)
    assert a == plan.shard_order(50, seed=1, epoch=0, shuffle=True)
    assert a != plan.shard_order(50, seed=1, epoch=1, shuffle=True)
    assert a != plan.shard_order(50, seed=2, epoch=0, shuffle=True)
    assert sorted(a) == list(range(50))


@pytest.mark.parametrize("workers", [1, 2, 3, 4])
def test_resume_rotation_continues_round_robin(workers):
    """After k batches, physical worker i plays logical (i + k) % W and skips what it made."""
    total = 11
    per = plan.worker_batches(total, workers)
    order = [b % workers for b in range(total)]     # logical worker of each global batch
    for k in range(total):
        done = plan.consumed_batches(k, workers)
        assert done == [order[:k].count(w) for w in range(workers)]
        rotated = [(i + k) % workers for i in range(workers)]
        remaining = {w: per[w] - done[w] for w in range(workers)}
        # round-robin over physical workers, skipping exhausted ones, as the DataLoader does
        seq, left = [], dict(remaining)
        while any(left.values()):
            for w in rotated:
                if left[w]:
                    seq.append(w)
                    left[w] -= 1
        assert seq == order[k:]


def test_resampled_plan_counts():
    p = plan.plan_worker(COUNTS, rank=1, world_size=2, worker=1, num_workers=3, batch_size=4,
                         mode="train", seed=0, epoch=0, batches_per_epoch=10)
    assert p.resampled and p.n_batches == plan.worker_batches(10, 3)[1]
    draws = list(itertools.islice(plan.resampled_shards(len(COUNTS), 0, 0, 1, 1), 200))
    assert set(draws) == set(range(len(COUNTS)))   # with replacement, all shards appear


def test_shuffle_is_a_permutation_and_deterministic():
    items = [{"__key__": str(i)} for i in range(100)]
    out = list(stages.shuffle(items, 16, np.random.default_rng(0)))
    again = list(stages.shuffle(items, 16, np.random.default_rng(0)))
    assert out == again and sorted(o["__key__"] for o in out) == sorted(str(i) for i in range(100))
    assert out != items
    assert list(stages.shuffle(items, 1, np.random.default_rng(0))) == items


def test_skip_and_take():
    assert list(stages.skip(range(10), 3)) == list(range(3, 10))
    assert list(stages.skip(range(2), 5)) == []
    assert list(stages.take(range(10), 4)) == [0, 1, 2, 3]


def test_group_gives_exactly_n_batches_padded_with_none():
    items = [{"__key__": f"k{i}"} for i in range(4)]
    groups = list(stages.group(items, 3, 3))
    assert [[g and g["__key__"] for g in batch] for batch in groups] == [
        ["k0", "k1", "k2"], ["k3", None, None], [None, None, None]]
    assert len(list(stages.group(range(100), 3, 2))) == 2   # never more than asked
