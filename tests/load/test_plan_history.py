"""plan.py with history windows: chains keep linked shards together; context reads."""
from __future__ import annotations

from carla_wds.load.plan.epoch import WorkerPlan, context_before, plan_worker, previous_shards, shard_order


def test_chains_are_permuted_whole_and_in_pack_order():
    runs = [[0, 1, 2], [3], [4, 5], [6]]
    for epoch in range(5):
        order = shard_order(7, 1, epoch, True, runs)
        assert sorted(order) == list(range(7))
        for run in runs:
            at = order.index(run[0])
            assert order[at:at + len(run)] == run
    assert len({tuple(shard_order(7, 1, e, True, runs)) for e in range(5)}) > 1


def test_context_reaches_back_through_the_chain():
    counts = [5, 5, 5, 5]
    previous = previous_shards([[0, 1, 2], [3]])
    assert previous == [None, 0, 1, None]
    assert context_before(2, 3, 2, counts, previous) == ((2, 1, 3),)
    assert context_before(2, 1, 8, counts, previous) == ((0, 3, 5), (1, 0, 5), (2, 0, 1))
    assert context_before(3, 2, 8, counts, previous) == ((3, 0, 2),)   # the chain's start
    assert context_before(1, 0, 0, counts, previous) == ()


def test_reads_fold_the_first_shards_own_context_into_its_read():
    plan = WorkerPlan(0, 1, 4, ((1, 2, 5), (2, 0, 3)), context=((0, 4, 5), (1, 0, 2)))
    assert plan.reads() == [(0, 4, 5, 5), (1, 0, 2, 5), (2, 0, 0, 3)]


def test_a_worker_plan_gets_context_only_before_its_first_segment():
    counts = [6, 6, 6]
    runs = [[0, 1, 2]]
    plans = [plan_worker(counts, rank=0, world_size=1, worker=w, num_workers=2, batch_size=3,
                         mode="train", seed=0, epoch=0, chains=runs, context=4) for w in (0, 1)]
    assert plans[0].context == ()   # the epoch's first sample: nothing before it
    first = plans[1].segments[0]
    assert first == (1, 3, 6) and plans[1].context == ((0, 5, 6), (1, 0, 3))
    # without history the plan is what it always was
    assert plan_worker(counts, rank=0, world_size=1, worker=1, num_workers=2, batch_size=3,
                       mode="train", seed=0, epoch=0).context == ()
