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

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...rng import derive_seed, numpy_rng
from .epoch import (Segment, WorkerPlan, batches_per_rank, consumed_batches, context_before,
                   plan_worker, previous_shards, shard_order, worker_batches)
from ..decode.stages import shuffle, take
from .strata import plan_strata

Chains = list[list[int]] | None


@dataclass(frozen=True)
class Reshape:
    """Where the run stopped, in the split it was planned for. `base`: the planner of the
    epoch itself where it has one (a mix, mix.py), else the plain epoch of plan.py."""
    world_size: int
    num_workers: int
    consumed: int          # batches each of its ranks had consumed
    shuffle_buffer: int
    base: Any = field(default=None, compare=False)

    def worker_plan(self, counts: list[int], **where: Any) -> WorkerPlan:
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
                       epoch: int, chains: Chains = None) -> np.ndarray:
    """Stream positions (in the epoch's shard order) the old ranks' consumed batches held,
    sorted; a position twice where a mix served its sample twice."""
    order = shard_order(len(counts), seed, epoch, True, chains)
    offsets = _offsets(counts, order)
    start_of = {s: int(offsets[i]) for i, s in enumerate(order)}
    done = consumed_batches(old.consumed, old.num_workers)
    out: list[int] = []
    for rank in range(old.world_size):
        for w in range(max(1, old.num_workers)):
            if not done[w]:
                continue
            where = dict(rank=rank, world_size=old.world_size, worker=w,
                         num_workers=old.num_workers, batch_size=batch_size, seed=seed,
                         epoch=epoch)
            plan = (old.base.worker_plan(counts, chains=chains, **where) if old.base else
                    plan_worker(counts, mode="train", chains=chains, **where))
            rng = numpy_rng(derive_seed(seed, epoch, rank, w, "buffer"))
            stream = take(shuffle(_positions(plan.segments, start_of), old.shuffle_buffer,
                                  rng), plan.n_real)
            out += list(take(stream, done[w] * batch_size))
    return np.asarray(sorted(out), np.int64)


def _minus(full: np.ndarray, used: np.ndarray) -> np.ndarray:
    """`full` (positions, repeats allowed) less `used`, each as often as it is left; sorted."""
    values, drawn = np.unique(full, return_counts=True)
    taken, times = np.unique(used, return_counts=True)
    drawn[np.searchsorted(values, taken)] -= times
    return np.repeat(values, drawn)


def remaining(counts: list[int], old: Reshape, batch_size: int, seed: int, epoch: int,
              chains: Chains = None) -> np.ndarray:
    """The epoch's positions no old rank consumed, in the epoch's order (a mix's drawn
    positions less the consumed ones, each as often as it is left)."""
    full = (old.base.stream(counts, seed, epoch, chains) if old.base
            else np.arange(sum(counts), dtype=np.int64))
    return _minus(full, consumed_positions(counts, old, batch_size, seed, epoch, chains))


def _stratified(old: Reshape) -> bool:
    return old.base is not None and old.base.spec.stratify


def remaining_strata(counts: list[int], old: Reshape, batch_size: int, seed: int, epoch: int,
                     chains: Chains = None) -> list[np.ndarray]:
    """A stratified mix's rest: per entry, its drawn positions no old rank consumed. Each old
    worker had served q[i, r] samples of entry i per batch, from that entry's own stream
    through its own share of the buffer (strata.py): replayed on positions here."""
    order = shard_order(len(counts), seed, epoch, True, chains)
    offsets = _offsets(counts, order)
    start_of = {s: int(offsets[i]) for i, s in enumerate(order)}
    done = consumed_batches(old.consumed, old.num_workers)
    g = batch_size * old.world_size
    used: list[list[int]] = [[] for _ in old.base.spec.entries]
    for rank in range(old.world_size):
        for w in range(max(1, old.num_workers)):
            plan = old.base.worker_plan(counts, rank=rank, world_size=old.world_size, worker=w,
                                        num_workers=old.num_workers, batch_size=batch_size,
                                        seed=seed, epoch=epoch, chains=chains)
            share = -(-old.shuffle_buffer // max(1, len(plan.strata)))
            for i, (q, segments, _) in enumerate(plan.strata):
                rng = numpy_rng(derive_seed(seed, epoch, rank, w, "buffer", i))
                used[i] += take(shuffle(_positions(segments, start_of), share, rng),
                                done[w] * q)
    return [_minus(s, np.asarray(u, np.int64)) for s, u in
            zip(old.base.entry_streams(counts, seed, epoch, chains, g), used)]


def batches_after(counts: list[int], old: Reshape, batch_size: int, world_size: int,
                  seed: int, epoch: int, chains: Chains = None) -> int:
    """Batches each new rank yields in the rest of the epoch."""
    if _stratified(old):   # as many global batches as every entry's rest fills
        rest = remaining_strata(counts, old, batch_size, seed, epoch, chains)
        quotas = old.base.quotas(epoch, batch_size * world_size)
        return min((len(r) // q for r, q in zip(rest, quotas) if q), default=0)
    left = len(remaining(counts, old, batch_size, seed, epoch, chains))
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


def _contexts(segments: list[Segment], need: int, counts: list[int], chains: Chains
              ) -> tuple[tuple[Segment, ...], ...]:
    """Per segment, the samples before it that its history windows reach and that the reads
    before it do not hold: a segment right after one of its shard reads only the gap between
    them (the frames before that are in the window stage's memory already)."""
    previous = previous_shards(chains or [[i] for i in range(len(counts))])
    out, last = [], None
    for shard, start, stop in segments:
        if last is not None and last[0] == shard:
            gap = max(0, min(need, start - last[2]))
            out.append(((shard, start - gap, start),) if gap else ())
        else:
            out.append(context_before(shard, start, need, counts, previous))
        last = (shard, start, stop)
    return tuple(out)


def plan_stream(stream: np.ndarray, counts: list[int], *, rank: int, world_size: int,
                worker: int, num_workers: int, batch_size: int, seed: int, epoch: int,
                resume_batches: int = 0, chains: Chains = None, context: int = 0
                ) -> WorkerPlan:
    """plan.plan_worker's cut for an epoch given as stream positions (increasing, in the
    epoch's shard order; repeats allowed): equal whole-batch ranges per rank and worker.
    With history windows (`context` samples, the pack's `chains`) every segment gets the
    context it needs read in front of it."""
    w_count = max(1, num_workers)
    logical = (worker + resume_batches) % w_count
    n_batches = batches_per_rank([len(stream)], batch_size, world_size, "train")
    per_worker = worker_batches(n_batches, w_count)
    first = rank * n_batches * batch_size + sum(per_worker[:logical]) * batch_size
    mine = stream[first:first + per_worker[logical] * batch_size]
    segments, contexts = cut_stream(mine, counts, seed, epoch, chains, context)
    return WorkerPlan(logical, per_worker[logical], len(mine), segments,
                      consumed_batches(resume_batches, w_count)[logical], contexts=contexts)


def cut_stream(positions: np.ndarray, counts: list[int], seed: int, epoch: int,
               chains: Chains = None, context: int = 0
               ) -> tuple[tuple[Segment, ...], tuple[tuple[Segment, ...], ...]]:
    """Stream positions (increasing) -> the segments that read them and, with history
    windows, each segment's context."""
    segments = _segments(positions, counts, shard_order(len(counts), seed, epoch, True, chains))
    return tuple(segments), _contexts(segments, context, counts, chains) if context else ()


def plan_reshaped(counts: list[int], old: Reshape, **where: Any) -> WorkerPlan:
    """plan.plan_worker for the rest of an epoch begun in the `old` split."""
    seed, epoch, chains = where.pop("seed"), where.pop("epoch"), where.get("chains")
    if _stratified(old):   # each entry's rest, in the new split's batch quotas
        rest = remaining_strata(counts, old, where["batch_size"], seed, epoch, chains)
        quotas = old.base.quotas(epoch, where["batch_size"] * where["world_size"])
        context = where.pop("context", 0)
        where.pop("chains", None)
        return plan_strata(rest, quotas, counts, **where, cut=lambda p: cut_stream(
            p, counts, seed, epoch, chains, context))
    rest = remaining(counts, old, where["batch_size"], seed, epoch, chains)
    return plan_stream(rest, counts, seed=seed, epoch=epoch, **where)
