"""Which shared-memory ring a pass's workers write their batches into, and how the main
process receives what they yield.

A pass of CARLABatches gets the image ring (ring.py: the images in a slot, the labels pickled);
a pass with a sample_transform (adapter=NAME) gets the dict ring (dictring.py: every stacked
key in a slot). Both need forked workers, which inherit the mapping; without workers, or with
another start method, each batch takes torch's usual way. A ring outlives its pass as the
spare, for the next pass of the same shape. With pin_memory, `receive` copies a batch from its
slot straight into pinned memory (in the pin thread with workers: pinning.py).
"""
from __future__ import annotations

import multiprocessing
from typing import Any, Union

from . import dictring
from ..decode.batch import CARLABatch
from .dictring import DictRing, SlotBatch
from .ring import BatchRing, RingItem
from ..decode.model_batch import ModelBatch

Ring = Union[BatchRing, DictRing]


def lend(spare: Ring | None, num_workers: int, prefetch_factor: int,
         context: multiprocessing.context.BaseContext, e: Any) -> Ring | None:
    """The ring for the pass `e` (an Epoch): `spare` if it fits, else a new one; None when
    its workers would not share a mapping."""
    if e.sample_transform is not None:
        return _dict_ring(spare, num_workers, prefetch_factor, context)
    if not num_workers or context.get_start_method() != "fork":
        return None
    # per worker: the batch in use, prefetch_factor queued, and the one being made; only slots
    # ever written cost memory
    slots = prefetch_factor + 2
    shape = (e.batch_size * (e.history + 1), len(e.spec.cameras), *e.image_size, 3)
    if isinstance(spare, BatchRing) and spare.shape == shape:
        return spare
    return BatchRing(num_workers * slots, shape, context)


def _dict_ring(spare: Ring | None, num_workers: int, prefetch_factor: int,
               context: multiprocessing.context.BaseContext) -> DictRing | None:
    """Slots for each worker as for images; without workers, 3 in-process slots (the batch in
    use, the one a caller keeps for a step, e.g. a copy to the GPU in flight, the next)."""
    if num_workers and context.get_start_method() != "fork":
        return None
    workers, slots = (num_workers, prefetch_factor + 2) if num_workers else (1, 3)
    if isinstance(spare, DictRing) and spare.shape[:2] == (workers, slots) and \
            spare.in_process == (not num_workers):
        return spare
    try:
        return DictRing(workers, slots, context if num_workers else None, dictring.SLOT_BYTES)
    except (OSError, ValueError, OverflowError):   # no room for the virtual mapping
        return None


def receive(item: Any, ring: Ring | None, pin_memory: bool
            ) -> tuple[CARLABatch | ModelBatch, bool]:
    """A worker's batch as the caller gets it (pinned with pin_memory), and whether it came
    outside the ring, for stats["batches_outside_ring"]: every slot was held, or a stack was
    larger than what was left of its slot (it took torch's shared memory, or at 0 workers
    private memory). Without a ring nothing is outside it."""
    if isinstance(item, RingItem):
        return ring.take(item, pin_memory), False
    if isinstance(item, SlotBatch):
        return ModelBatch(ring.take(item, pin_memory), item.errors), item.spilled
    # torch's way: the DataLoader itself is told pin_memory=False (workers.py pins)
    return (item.pin_memory() if pin_memory else item), ring is not None
