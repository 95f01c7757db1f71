"""What one worker serves of its reads, still encoded: the samples read in plan order (with
their history windows) through the seeded shuffle buffer. reshape.py replays the same buffer
on sample positions, so the draws here must depend on the count of samples only."""
from __future__ import annotations

from typing import Any, Iterable, Iterator

from ..rng import derive_seed, numpy_rng
from . import history, shardio, stages
from .plan import Read


def served(e: Any, logical_worker: int, reads: Iterable[Read], entry: int | None = None,
           buffer: int | None = None) -> Iterator[dict[str, Any]]:
    """`e`: the pass's workers.Epoch. `entry`: a stratified mix's entry (strata.py), whose
    stream has a shuffle buffer of its own, of `buffer` samples."""
    read = shardio.read_with_context if e.overlay is None else e.overlay.read   # overlay.py
    raw = read(reads, list(e.shards), e.on_error, e.cache_dir, e.verify, e.remote,
               e.cache_limit_bytes)
    if e.history:
        raw = history.windows(raw, e.history, e.history_stride * e.frame_step, e.frame_step)
    if e.mode == "train":   # buffered shuffle of encoded samples
        tag = () if entry is None else (entry,)
        rng = numpy_rng(derive_seed(e.seed, e.epoch, e.rank, logical_worker, "buffer", *tag))
        raw = stages.shuffle(raw, e.shuffle_buffer if buffer is None else buffer, rng)
    return raw
