"""Shared-memory rings that carry batch images from DataLoader workers to the main process.

A fresh shared-memory block per batch costs its page faults every time: 60 ms for a 50 MB
batch here, a third of a JPEG batch's decode time, paid by the worker; copying each batch out
of a reused block instead cost the main process 30-45 ms a batch, a sixth of a core taken from
two workers (docs/benchmarks.md). So each worker decodes into one of a few slots of a mapping
made once, before the workers fork, and the main process hands the slot itself out as the
batch's images, zero-copy:

    worker:  images = ring.alloc(shape) -> decode into images -> yield ring.item(batch)
    main:    batch = ring.take(item)    -> batch.images is a view of the slot

A slot is busy from `acquire` until the last reference to those images is gone (a finalizer
on the view frees it), so a batch you keep is never overwritten. When all slots are held,
`acquire` returns None and that batch gets a shared-memory block of its own: keeping every
batch of an epoch (list(data)) works, slower, and never blocks a worker.

The workers share one pool of slots under a lock. Each slot costs a worker 12,800 page
faults (30-170 ms here) the first time that worker writes it, whoever wrote it before, so a
worker takes back a free slot of its own first, then a fresh one, and another worker's only
when neither is free. Over an epoch each worker then writes 2-3 slots (docs/benchmarks.md);
taking its own slot first and then simply the lowest free one, each of two workers wrote all
5 slots in use on a long epoch. The main process clears a busy flag with one store, and only
a worker that saw it clear sets it. Only the process that made the ring frees or reclaims
slots: forked workers inherit its finalizers with its heap.
"""
from __future__ import annotations

import mmap
import multiprocessing
import os
import weakref
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import torch

from ..decode.batch import CARLABatch, shared_block


@dataclass
class RingItem:
    """What a worker yields: the batch's other fields (`parts`), and the slot that holds its
    images (the main process maps the slot itself; nothing image-sized is pickled).

    The label fields travel as numpy arrays, pickled by value (about 2 KB): a torch tensor
    would go through a shared-memory file of its own and a socket round trip to the worker for
    its descriptor, seven of them per batch. A large extra field (a batch's float32 depth maps
    are MBs) stays a tensor and goes through shared memory instead: one copy, not the four of
    pickling it through the pipe (docs/benchmarks.md, issue 14's 2-worker figures).
    """
    parts: dict[str, Any]     # field name -> value, tensors as numpy arrays
    slot: int

    @classmethod
    def of(cls, batch: CARLABatch, slot: int) -> "RingItem":
        """batch: its images already in the slot; they are left out."""
        return cls({f.name: _as_numpy(getattr(batch, f.name)) for f in fields(batch)
                    if f.name != "images"}, slot)


SHARED_BYTES = 256 << 10   # a field this large crosses to the main process in shared memory


def _as_numpy(value: Any) -> Any:
    if isinstance(value, dict):   # the measurements record: name -> tensor
        return {k: _as_numpy(v) for k, v in value.items()}
    if isinstance(value, torch.Tensor) and value.nbytes < SHARED_BYTES:
        return value.numpy()
    return value


def _as_torch(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _as_torch(v) for k, v in value.items()}
    return torch.from_numpy(value) if isinstance(value, np.ndarray) else value


class BatchRing:
    """`slots` image blocks of `shape`, shared by all workers of one pass."""

    def __init__(self, slots: int, shape: tuple[int, ...],
                 context: multiprocessing.context.BaseContext) -> None:
        if context.get_start_method() != "fork":
            raise ValueError("BatchRing needs forked workers (it shares an anonymous mapping)")
        self.shape, self.slots = tuple(shape), slots
        self.nbytes = int(np.prod(shape))
        # MAP_SHARED | MAP_ANONYMOUS, inherited by forked workers; nothing is touched (or
        # zeroed) until a slot is first written, unlike a torch shared-memory tensor.
        images = slots * self.nbytes
        self._map = mmap.mmap(-1, images + 8 * slots)
        self.blocks = torch.frombuffer(self._map, dtype=torch.uint8, count=images
                                       ).view(slots, *shape)
        # per slot, the pid of the worker that last took it (0: none this pass), then its
        # busy flag
        self.writer = np.frombuffer(self._map, np.int32, count=slots, offset=images)
        self.busy = np.frombuffer(self._map, np.uint8, count=slots, offset=images + 4 * slots)
        self._context, self._lock = context, context.Lock()
        self._held: set[int] = set()   # main side: slots whose images a batch still holds
        # Workers inherit the main process's finalizers and generators with its heap; a
        # garbage collection there must not free the main process's slots.
        self.owner = os.getpid()

    def acquire(self, timeout: float = 1.0) -> tuple[int, torch.Tensor] | None:
        """Worker side: a slot whose images nobody holds, marked busy: the lowest of those
        this process took before, else of those nobody took this pass, else of all; None if
        all are held (or the lock stays taken, say by a worker killed inside it)."""
        if not self._lock.acquire(timeout=timeout):
            return None
        try:
            free = np.flatnonzero(self.busy == 0)
            if not len(free):
                return None
            me = os.getpid()
            slot = int(min(free, key=lambda s: (self.writer[s] != me, self.writer[s] != 0, s)))
            self.busy[slot] = 1
            self.writer[slot] = me
        finally:
            self._lock.release()
        return slot, self.blocks[slot]

    def alloc(self, shape: tuple[int, ...]) -> torch.Tensor:
        """Worker side, a batch.Alloc: a free slot's block, or when every slot is
        held a shared-memory block of the batch's own."""
        if tuple(shape) != self.shape:
            raise ValueError(f"a batch of shape {tuple(shape)} in a ring of {self.shape}")
        got = self.acquire()
        return shared_block(shape) if got is None else got[1]

    def item(self, batch: CARLABatch) -> RingItem | CARLABatch:
        """Worker side: what to send for a batch decoded into `alloc`'s memory; a RingItem
        when its images lie in a slot, which their address tells."""
        offset = batch.images.data_ptr() - self.blocks.data_ptr()
        if not 0 <= offset < self.slots * self.nbytes or offset % self.nbytes:
            return batch
        return RingItem.of(batch, offset // self.nbytes)

    def take(self, item: RingItem, pin_memory: bool = False) -> CARLABatch:
        """Main side: the batch with its images; a view of the slot, or a pinned copy."""
        view = np.frombuffer(self._map, np.uint8, count=self.nbytes,
                             offset=item.slot * self.nbytes)
        if pin_memory:   # the pinned copy is the batch's own; the slot is free at once
            images = torch.from_numpy(view.reshape(self.shape)).pin_memory()
            self._free(item.slot)
        else:
            # torch keeps the reshaped array, which keeps `view`: when the batch's images
            # (and every view of them) are gone, `view` goes and the finalizer frees the slot.
            self._held.add(item.slot)
            weakref.finalize(view, self._free, item.slot)
            images = torch.from_numpy(view.reshape(self.shape))
        batch = CARLABatch(images=images.permute(0, 1, 4, 2, 3),
                           **{name: _as_torch(v) for name, v in item.parts.items()})
        return batch.pin_memory() if pin_memory else batch

    def reclaim(self) -> bool:
        """Main side, once a pass's workers have exited: free the slots they took for batches
        that never reached a caller (prefetched past an early stop), and renew the lock,
        which a worker killed inside `acquire` would keep taken. False (and nothing done)
        outside the process that made the ring."""
        if os.getpid() != self.owner:
            return False
        for slot in np.flatnonzero(self.busy):
            if int(slot) not in self._held:
                self.busy[slot] = 0
        self.writer[:] = 0   # the next pass's workers share the written slots anew
        self._lock = self._context.Lock()
        return True

    def _free(self, slot: int) -> None:
        if os.getpid() != self.owner:
            return   # a copy of the main process's finalizer, run by a worker's collection
        self._held.discard(slot)
        self.busy[slot] = 0   # one store; acquire's lock orders the 0 -> 1 transitions
