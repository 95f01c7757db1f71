"""Resume after the number of ranks or workers changed (issue 29): the rest of the epoch.

A loader state says where one rank stopped: `consumed` batches of an epoch planned for
`world_size` ranks of `num_workers` workers each (plan.py). Every rank consumes the same
number of batches, so one rank's state says where all of them stopped. Which samples those
were is a pure function of the plan: each old worker read its planned range through the
seeded shuffle buffer, whose draws depend on the count of samples only, never on their
bytes; replaying that on sample positions (no shard read) gives the consumed set exactly.

The rest of the epoch is every sample of the epoch's shard order that no old rank consumed,
in that order: the samples the old split left unseen included. It is cut into equal
whole-batch ranges for the new ranks and workers as plan.plan_worker cuts a whole epoch, so
every rank yields the same number of batches, no sample is served twice in the epoch, and
fewer than one global batch of the new split (new world_size x batch_size) stays unseen.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..rng import derive_seed, numpy_rng
from .plan import (Segment, WorkerPlan, batches_per_rank, consumed_batches, plan_worker,
                   shard_order, worker_batches)
from .stages import shuffle, take


@dataclass(frozen=True)
class Reshape:
    """Where the run stopped, in the split it was planned for."""
    world_size: int
    num_workers: int
    consumed: int          # batches each of its ranks had consumed
    shuffle_buffer: int

    def worker_plan(self, counts: list[int], **where: int) -> WorkerPlan:
        return plan_reshaped(counts, self, **where)

    def doc(self) -> dict[str, int]:
        return {"world_size": self.world_size, "num_workers": self.num_workers,
                "consumed": self.consumed, "shuffle_buffer": self.shuffle_buffer}


def _offsets(counts: list[int], order: list[int]) -> np.ndarray:
    """Stream position of each shard's first sample, in `order`."""
    return np.concatenate([[0], np.cumsum([counts[s] for s in order])])


def _positions(segments: tuple[Segment, ...], start_of: dict[int, int]) -> list[int]:
    return [start_of[s] + i for s, lo, hi in segments for i in range(lo, hi)]


def consumed_positions(counts: list[int], old: Reshape, batch_size: int, seed: int,
                       epoch: int) -> np.ndarray:
    """Stream positions (in the epoch's shard order) the old ranks' consumed batches held."""
    order = shard_order(len(counts), seed, epoch, True)
    offsets = _offsets(counts, order)
    start_of = {s: int(offsets[i]) for i, s in enumerate(order)}
    done = consumed_batches(old.consumed, old.num_workers)
    out: list[int] = []
    for rank in range(old.world_size):
        for w in range(max(1, old.num_workers)):
            if not done[w]:
                continue
            plan = plan_worker(counts, rank=rank, world_size=old.world_size, worker=w,
                               num_workers=old.num_workers, batch_size=batch_size,
                               mode="train", seed=seed, epoch=epoch)
            rng = numpy_rng(derive_seed(seed, epoch, rank, w, "buffer"))
            stream = take(shuffle(_positions(plan.segments, start_of), old.shuffle_buffer,
                                  rng), plan.n_real)
            out += list(take(stream, done[w] * batch_size))
    return np.asarray(sorted(out), np.int64)


def remaining(counts: list[int], old: Reshape, batch_size: int, seed: int, epoch: int
              ) -> np.ndarray:
    """The epoch's positions no old rank consumed, in the epoch's order."""
    keep = np.ones(sum(counts), bool)
    keep[consumed_positions(counts, old, batch_size, seed, epoch)] = False
    return np.flatnonzero(keep)


def batches_after(counts: list[int], old: Reshape, batch_size: int, world_size: int,
                  seed: int, epoch: int) -> int:
    """Batches each new rank yields in the rest of the epoch."""
    left = len(remaining(counts, old, batch_size, seed, epoch))
    return batches_per_rank([left], batch_size, world_size, "train")


def _segments(positions: np.ndarray, counts: list[int], order: list[int]) -> list[Segment]:
    """Stream positions (increasing) -> (shard, first, stop) runs within shards."""
    offsets = _offsets(counts, order)
    slot = np.searchsorted(offsets, positions, side="right") - 1
    local = positions - offsets[slot]
    breaks = np.flatnonzero((np.diff(slot) != 0) | (np.diff(local) != 1)) + 1
    return [(order[int(slot[a])], int(local[a]), int(local[b - 1]) + 1)
            for a, b in zip(np.r_[0, breaks], np.r_[breaks, len(positions)])
            if b > a]


def plan_stream(stream: np.ndarray, counts: list[int], *, rank: int, world_size: int,
                worker: int, num_workers: int, batch_size: int, seed: int, epoch: int,
                resume_batches: int = 0) -> WorkerPlan:
    """plan.plan_worker's cut for an epoch given as stream positions (increasing, in the
    epoch's shard order; repeats allowed): equal whole-batch ranges per rank and worker."""
    w_count = max(1, num_workers)
    logical = (worker + resume_batches) % w_count
    n_batches = batches_per_rank([len(stream)], batch_size, world_size, "train")
    per_worker = worker_batches(n_batches, w_count)
    first = rank * n_batches * batch_size + sum(per_worker[:logical]) * batch_size
    mine = stream[first:first + per_worker[logical] * batch_size]
    order = shard_order(len(counts), seed, epoch, True)
    return WorkerPlan(logical, per_worker[logical], len(mine),
                      tuple(_segments(mine, counts, order)),
                      consumed_batches(resume_batches, w_count)[logical])


def plan_reshaped(counts: list[int], old: Reshape, **where: int) -> WorkerPlan:
    """plan.plan_worker for the rest of an epoch begun in the `old` split."""
    return plan_stream(remaining(counts, old, where["batch_size"], where["seed"],
                                 where["epoch"]), counts, **where)
