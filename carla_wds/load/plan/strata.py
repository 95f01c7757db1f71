"""Stratified batches (issue 29): every global batch holds each mix entry's share exactly.

A global batch is `world_size x batch_size` samples (G). Entry i gets `g_i` of them, its share
of the epoch's samples rounded by largest remainders (so the g_i add up to G), in every global
batch; the epoch has `total // G` global batches and entry i serves g_i of each.

Which ranks hold an entry's g_i samples: the G slots of a global batch are dealt to the
entries evenly spread (entry i's k-th slot at (k + 1/2) / g_i of the way), and rank r takes
slots [r*B, (r+1)*B): `q[i, r]` samples of entry i in each of its batches, the same in every
batch. So each rank's batches have one fixed composition, and the ranks' compositions add up
to the global one exactly.

Reads stay sequential: each entry's drawn samples, in the epoch's shard order, are cut into
contiguous ranges per rank (`nb * q[i, r]` samples) and per worker (its batches x q[i, r]),
as plan.py cuts a plain epoch. A worker reads its entries' ranges as separate streams, each
through its own shuffle buffer (the buffer size split between them), and fills every batch
with q[i, r] samples from entry i's stream, entry after entry. Resume skips whole batches of
that interleaved stream, so it is (plan, position) as for any epoch.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, Iterable, Iterator

import numpy as np

from .epoch import WorkerPlan, consumed_batches, worker_batches
from ..stream.served import served


def rank_quotas(quotas: list[int], world_size: int, batch_size: int) -> np.ndarray:
    """q[i, r]: samples of entry i in each batch of rank r (rows add up to quotas[i], columns
    to batch_size)."""
    slots = sorted(((k + 0.5) / g, i) for i, g in enumerate(quotas) for k in range(g))
    owner = np.asarray([i for _, i in slots], np.int64).reshape(world_size, batch_size)
    return np.stack([(owner == i).sum(axis=1) for i in range(len(quotas))])


def plan_strata(streams: list[np.ndarray], quotas: list[int], counts: list[int], *,
                rank: int, world_size: int, worker: int, num_workers: int, batch_size: int,
                resume_batches: int = 0, cut: Any) -> WorkerPlan:
    """The plan of one worker: its batch count and, per entry, the contiguous range of that
    entry's stream (positions, increasing) it reads. `cut(positions)` -> (segments, contexts)
    in the epoch's shard order (reshape.py)."""
    w_count = max(1, num_workers)
    logical = (worker + resume_batches) % w_count
    # global batches: as many as every entry's stream fills (each rank yields nb batches)
    nb = min((len(s) // g for s, g in zip(streams, quotas) if g), default=0)
    q = rank_quotas(quotas, world_size, batch_size)
    per_worker = worker_batches(nb, w_count)
    strata = []
    for i, stream in enumerate(streams):
        mine = q[i, rank]
        first = int(q[i, :rank].sum()) * nb + sum(per_worker[:logical]) * mine
        segments, contexts = cut(stream[first:first + per_worker[logical] * mine])
        strata.append((int(mine), tuple(segments), contexts))
    return WorkerPlan(logical, per_worker[logical], per_worker[logical] * batch_size, (),
                      consumed_batches(resume_batches, w_count)[logical],
                      strata=tuple(strata))


def interleave(streams: list[Iterable[Any]], quotas: list[int], n_batches: int
               ) -> Iterator[Any]:
    """`n_batches` batches' samples, each batch quotas[i] samples of streams[i], in order."""
    its = [iter(s) for s in streams]
    for _ in range(n_batches):
        for it, q in zip(its, quotas):
            for _ in range(q):
                yield next(it)


def stratified(plan: WorkerPlan, serve: Any, buffer: int) -> Iterator[Any]:
    """A worker's samples of a stratified plan in batch order: each entry's segments read as
    one stream through its own share of the shuffle buffer (`serve(reads, entry, buffer)`),
    interleaved batch by batch."""
    share = -(-buffer // max(1, len(plan.strata)))
    streams = [serve(WorkerPlan(0, 0, 0, segments, contexts=contexts).reads(), i, share)
               for i, (_, segments, contexts) in enumerate(plan.strata)]
    return interleave(streams, [q for q, _, _ in plan.strata], plan.n_batches)


@dataclass(frozen=True)
class Stratified:
    """Source (pipeline.py) of a stratified mix's plan: its entries' streams, served
    (served.py) and interleaved batch by batch."""
    def __call__(self, _: Any, at: Any) -> Iterator[Any]:
        assert at.plan.strata, "planned by another source"
        return stratified(at.plan, partial(served, at.e, at.worker), at.e.shuffle_buffer)
