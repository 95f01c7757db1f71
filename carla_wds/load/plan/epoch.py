"""Epoch planning: which samples each (rank, worker) reads, and how many batches it yields.

Pure functions of the manifest's shard counts and a few integers, so every rank computes the
same plan without talking to the others, and `len()` is O(1). This is where the seed's confusion
about `with_epoch`, nodesplitter and workersplitter is replaced by arithmetic:

* train: the epoch's shard order is one global permutation; its concatenated sample stream is cut
  into `world_size` equal contiguous ranges of `len * batch_size` samples, each cut again into
  contiguous per-worker ranges of whole batches. Equal batch counts on every rank by construction.
* eval: the stream is cut into near-equal rank ranges that cover every sample exactly once;
  every rank yields `ceil(ceil(N / R) / B)` batches and pads with `valid=False`.
* resampled (the seed's way): each worker draws whole shards with replacement.

Train coverage. The cuts fall at sample positions, not at shard boundaries, so a worker may start
and end mid-shard (a segment's `start` is skipped by the reader without decoding). Since
`(N // R) // B == N // (R * B)`, the unseen samples of an epoch are exactly `N % (R * B)`: fewer
than one global batch, the least that equal full batches without repeats allow (with N = 211,
R = 2, B = 16: 19 unseen; with 189 shards of 1,000, R = 8, B = 32: 72 of 189,000, where the old
documented bound `R * (B + largest shard)` allowed 8,256). The unseen samples are the tail of the
epoch's shard order, so which ones they are changes with the epoch. Why one contiguous range per
(rank, worker) rather than striding samples across ranks and workers: each worker reads its shards
whole and in order, with at most two partial ones (its first and last), so reads stay sequential
and a shard is opened by several workers only where their ranges meet inside it; the shuffle
buffer then mixes within the worker's run, and the epoch's shard order mixes across workers.

Batches interleave across DataLoader workers round-robin, so global batch `b` of a rank comes
from logical worker `b % W`. After resuming at batch `k`, physical worker `i` plays logical
worker `(i + k) % W`, so the round-robin continues exactly where it stopped.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ...rng import derive_seed, numpy_rng

Segment = tuple[int, int, int]   # (shard index, first sample, stop sample) within that shard
Read = tuple[int, int, int, int]   # (shard, first sample read, first sample served, stop)


@dataclass(frozen=True)
class WorkerPlan:
    logical_worker: int
    n_batches: int          # batches this worker yields in the whole epoch
    n_real: int             # real samples among its n_batches * batch_size (eval pads the rest)
    segments: tuple[Segment, ...]
    skip_batches: int = 0   # batches already consumed before a resume
    resampled: bool = False
    # history windows: the samples before the first segment that its first windows reach
    # back to (oldest first), read but not served; see `context_before`
    context: tuple[Segment, ...] = ()

    # per segment, the context read just before it (plan_stream's plans, whose segments
    # are scattered samples: a mix, a resumed rest); when given, `context` is not used
    contexts: tuple[tuple[Segment, ...], ...] = ()
    # stratified batches (strata.py): per mix entry, (samples of it in each batch, its
    # segments, their contexts), read as separate streams; `segments` is then empty
    strata: tuple[tuple[int, tuple[Segment, ...], tuple[tuple[Segment, ...], ...]], ...] = ()

    def reads(self) -> list[Read]:
        """The segments with their context in front, a context or segment that goes on where
        the read before stopped folded into it, so that no shard is opened twice in a row."""
        reads: list[Read] = []
        for i, (shard, start, stop) in enumerate(self.segments):
            before = self.contexts[i] if self.contexts else self.context if i == 0 else ()
            for s, lo, hi in before:
                _append(reads, (s, lo, hi, hi))
            _append(reads, (shard, start, start, stop))
        return reads


def _append(reads: list[Read], read: Read) -> None:
    """Add `read`, folded into the last one where it goes on in the same shard and the
    folded read still serves one run (context, then served samples)."""
    if reads:
        shard, lo, first, stop = reads[-1]
        pure_context = first == stop
        if shard == read[0] and stop == read[1] and (pure_context or read[1] == read[2]):
            reads[-1] = (shard, lo, read[2] if pure_context else first, read[3])
            return
    reads.append(read)


def batches_per_rank(counts: list[int], batch_size: int, world_size: int, mode: str,
                     batches_per_epoch: int | None = None) -> int:
    """The exact number of batches each rank yields in one epoch."""
    if batches_per_epoch is not None:
        return batches_per_epoch
    total = sum(counts)
    if mode == "eval":
        return math.ceil(math.ceil(total / world_size) / batch_size)
    return (total // world_size) // batch_size


def shard_order(n_shards: int, seed: int, epoch: int, shuffle: bool,
                chains: list[list[int]] | None = None) -> list[int]:
    """The epoch's shard order. With `chains` (history windows: runs of shards a route links,
    sequence.chains) the runs are permuted, each kept whole and in pack order, so the frames
    before a shard's first sample are read just before it."""
    if not shuffle:
        return list(range(n_shards))
    rng = numpy_rng(derive_seed(seed, epoch, "shards"))
    if chains is None:
        return [int(i) for i in rng.permutation(n_shards)]
    return [s for run in rng.permutation(len(chains)) for s in chains[int(run)]]


def context_before(shard: int, start: int, need: int, counts: list[int],
                   previous: list[int | None]) -> tuple[Segment, ...]:
    """The `need` samples before sample `start` of `shard` (fewer at a chain's start), going
    back through `previous[s]`, the shard whose route shard s continues (or None); oldest
    first. A window stage drops those of other routes."""
    reads: list[Segment] = []
    while need > 0:
        lo = max(0, start - need)
        if lo < start:
            reads.append((shard, lo, start))
            need -= start - lo
        if need == 0 or previous[shard] is None:
            break
        shard = previous[shard]
        start = counts[shard]
    return tuple(reversed(reads))


def _slice(order: list[int], counts: list[int], start: int, stop: int) -> list[Segment]:
    """Positions [start, stop) of the concatenated stream of `order` -> per-shard segments."""
    segments, pos = [], 0
    for shard in order:
        lo, hi = max(start, pos), min(stop, pos + counts[shard])
        if lo < hi:
            segments.append((shard, lo - pos, hi - pos))
        pos += counts[shard]
        if pos >= stop:
            break
    return segments


def worker_batches(n_batches: int, num_workers: int) -> list[int]:
    """Batches per logical worker: worker w gets global batches w, w + W, w + 2W, ..."""
    w = max(1, num_workers)
    return [n_batches // w + (i < n_batches % w) for i in range(w)]


def consumed_batches(k: int, num_workers: int) -> list[int]:
    """How many of the first k global batches each logical worker produced."""
    return worker_batches(k, num_workers)


def plan_worker(counts: list[int], *, rank: int, world_size: int, worker: int, num_workers: int,
                batch_size: int, mode: str, seed: int, epoch: int, resume_batches: int = 0,
                batches_per_epoch: int | None = None, shuffle: bool = True,
                chains: list[list[int]] | None = None, context: int = 0) -> WorkerPlan:
    """The plan of physical DataLoader worker `worker` (0 when num_workers == 0).

    History windows pass the pack's `chains` and `context`, the samples a window reaches back:
    the worker then also reads that many samples before its first one (its other segments
    follow their chain predecessors in the order, so their context is read already)."""
    w_count = max(1, num_workers)
    logical = (worker + resume_batches) % w_count
    n_batches = batches_per_rank(counts, batch_size, world_size, mode, batches_per_epoch)
    per_worker = worker_batches(n_batches, w_count)
    skip = consumed_batches(resume_batches, w_count)[logical]
    if batches_per_epoch is not None:
        return WorkerPlan(logical, per_worker[logical], per_worker[logical] * batch_size, (),
                          skip, resampled=True)
    order = shard_order(len(counts), seed, epoch, shuffle and mode == "train", chains)
    rank_start, rank_len = _rank_range(sum(counts), rank, world_size, n_batches * batch_size, mode)
    first = sum(per_worker[:logical]) * batch_size
    n_real = max(0, min(per_worker[logical] * batch_size, rank_len - first))
    start = rank_start + first
    segments = tuple(_slice(order, counts, start, start + n_real))
    before = ()
    if context and segments:
        before = context_before(segments[0][0], segments[0][1], context, counts,
                                previous_shards(chains or [[i] for i in range(len(counts))]))
    return WorkerPlan(logical, per_worker[logical], n_real, segments, skip, context=before)


def previous_shards(chains: list[list[int]]) -> list[int | None]:
    """Per shard, the shard whose route it continues (its predecessor in its chain)."""
    previous: list[int | None] = [None] * sum(len(c) for c in chains)
    for run in chains:
        for a, b in zip(run, run[1:]):
            previous[b] = a
    return previous


def _rank_range(total: int, rank: int, world_size: int, capacity: int,
                mode: str) -> tuple[int, int]:
    """(start, length) of this rank's contiguous share of the epoch's sample stream."""
    if mode == "eval":
        start = rank * total // world_size
        return start, (rank + 1) * total // world_size - start
    return rank * capacity, capacity


def resampled_shards(n_shards: int, seed: int, epoch: int, rank: int, logical_worker: int):
    """An endless stream of shard indices drawn with replacement (the seed's `resampled=True`)."""
    rng = numpy_rng(derive_seed(seed, epoch, rank, logical_worker, "resample"))
    while True:
        yield int(rng.integers(n_shards))


def resampled_reads(counts: list[int], seed: int, epoch: int, rank: int, logical_worker: int,
                    chains: list[list[int]] | None = None, context: int = 0):
    """Whole shards drawn with replacement, as Reads; with history windows each drawn shard
    is preceded by its context (the tail of the shards its first route continues)."""
    previous = previous_shards(chains or [[i] for i in range(len(counts))])
    for s in resampled_shards(len(counts), seed, epoch, rank, logical_worker):
        plan = WorkerPlan(0, 0, 0, ((s, 0, counts[s]),),
                          context=context_before(s, 0, context, counts, previous))
        yield from plan.reads()


@dataclass(frozen=True)
class EpochPlanner:
    """plan_worker as an epoch's planner (workers.Epoch.planner), beside a mix's (mix.py) and
    a resumed rest's (reshape.py), which plan with the same worker_plan(counts, **where)."""
    mode: str
    batches_per_epoch: int | None = None

    def worker_plan(self, counts: list[int], **where) -> WorkerPlan:
        return plan_worker(counts, mode=self.mode, batches_per_epoch=self.batches_per_epoch,
                           **where)
