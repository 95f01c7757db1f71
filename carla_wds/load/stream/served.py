"""What one worker serves of its reads, still encoded: the samples read in plan order (with
their history windows) through the seeded shuffle buffer. reshape.py replays the same buffer
on sample positions, so the draws here must depend on the count of samples only.

The stages on that encoded stream are Epoch.encoded, which the front door builds
(front.stream_stages): a reader (ReadShards here, or overlay.ReadJoined), history.Windows
with history windows, Shuffle in train mode. The worker's stream starts at a source stage:
ReadPlan (the plan's reads), Resampled (shards drawn with replacement: batches_per_epoch) or
strata.Stratified (a stratified mix: a stream per entry).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Iterator

from ...rng import derive_seed, numpy_rng
from . import shardio
from ..decode import stages
from .pipeline import At, fold
from ..plan.epoch import Read, resampled_reads


@dataclass(frozen=True)
class Serving:
    """What the encoded stages are told: the pass's Epoch, the logical worker, and with
    stratified batches the mix entry, whose stream has a shuffle buffer of its own."""
    e: Any
    worker: int
    entry: int | None = None
    buffer: int | None = None


def served(e: Any, logical_worker: int, reads: Iterable[Read], entry: int | None = None,
           buffer: int | None = None) -> Iterator[dict[str, Any]]:
    """`e`: the pass's workers.Epoch. `entry`: a stratified mix's entry (strata.py), whose
    stream has a shuffle buffer of its own, of `buffer` samples."""
    return fold(reads, e.encoded, Serving(e, logical_worker, entry, buffer))


@dataclass(frozen=True)
class ReadShards:
    """Reads -> raw samples, those before a read's first served one marked as context."""
    def __call__(self, reads: Iterable[Read], at: Serving) -> Iterator[dict[str, Any]]:
        e = at.e
        return shardio.read_with_context(reads, list(e.shards), e.on_error, e.cache_dir,
                                         e.verify, e.remote, e.cache_limit_bytes)


@dataclass(frozen=True)
class Shuffle:
    """Buffered shuffle of encoded samples (train mode), seeded per (epoch, rank, worker,
    entry)."""
    def __call__(self, raw: Iterable[dict], at: Serving) -> Iterator[dict[str, Any]]:
        e = at.e
        tag = () if at.entry is None else (at.entry,)
        rng = numpy_rng(derive_seed(e.seed, e.epoch, e.rank, at.worker, "buffer", *tag))
        return stages.shuffle(raw, e.shuffle_buffer if at.buffer is None else at.buffer, rng)


@dataclass(frozen=True)
class ReadPlan:
    """Source: the samples of the plan's reads, served."""
    def __call__(self, _: Any, at: At) -> Iterator[dict[str, Any]]:
        assert not (at.plan.strata or at.plan.resampled), "planned by another source"
        return served(at.e, at.worker, at.plan.reads())


@dataclass(frozen=True)
class Resampled:
    """Source: endless whole shards drawn with replacement (batches_per_epoch), served; the
    Cut stage takes the plan's count of them."""
    def __call__(self, _: Any, at: At) -> Iterator[dict[str, Any]]:
        e = at.e
        assert at.plan.resampled, "planned by another source"
        chains = [list(c) for c in e.chains or ()] or None
        reads = resampled_reads([s.samples for s in e.shards], e.seed, e.epoch, e.rank,
                                at.worker, chains, e.context)
        return served(e, at.worker, reads)
