"""Shared-memory rings that carry batch images from DataLoader workers to the main process.

A fresh shared-memory block per batch costs its page faults every time: 60 ms for a 50 MB
batch here, a third of a JPEG batch's decode time, paid by the worker (docs/benchmarks.md).
Each worker instead decodes into one of `slots` blocks made once, before the workers start,
and the main process copies the images out (into huge-page memory, ~15 ms) and frees the slot.

    worker:  slot, images = ring.acquire(worker) -> decode into images -> yield RingItem
    main:    batch = ring.take(item)              -> copies the images out, frees the slot

A worker waits for a free slot, so at most `slots` of its batches are in flight. It cannot
deadlock: the main process takes batches in order, so when it waits for a worker's next batch,
every earlier batch of that worker has been taken and its slot freed.
"""
from __future__ import annotations

import mmap
import multiprocessing
from dataclasses import dataclass, replace

import numpy as np
import torch

from .batch import CARLABatch


@dataclass
class RingItem:
    """What a worker yields: the batch without its images, and the slot that holds them (the
    main process reads the slot through its own mapping; nothing image-sized is pickled)."""
    batch: CARLABatch
    worker: int
    slot: int

    def pin_memory(self) -> "RingItem":
        # DataLoader(pin_memory=True) calls this; the images are pinned in BatchRing.take.
        return replace(self, batch=self.batch.pin_memory())


class BatchRing:
    def __init__(self, num_workers: int, slots: int, shape: tuple[int, ...],
                 context: multiprocessing.context.BaseContext) -> None:
        if context.get_start_method() != "fork":
            raise ValueError("BatchRing needs forked workers (it shares an anonymous mapping)")
        self.shape, self.slots = tuple(shape), slots
        # MAP_SHARED | MAP_ANONYMOUS, inherited by forked workers: nothing is touched (or
        # zeroed) until a slot is first written, unlike a torch shared-memory tensor.
        self._map = mmap.mmap(-1, num_workers * slots * int(np.prod(shape)))
        self.blocks = torch.frombuffer(self._map, dtype=torch.uint8).view(
            num_workers, slots, *shape)
        self.reset(context)

    def reset(self, context: multiprocessing.context.BaseContext) -> None:
        """Fresh semaphores for a new set of workers (an interrupted epoch's may be spent)."""
        self.free = [context.Semaphore(self.slots) for _ in range(self.blocks.shape[0])]
        self._next = [0] * self.blocks.shape[0]

    def acquire(self, worker: int) -> tuple[int, torch.Tensor]:
        """Worker side: the next slot in turn, once the main process has freed it."""
        self.free[worker].acquire()
        slot = self._next[worker]
        self._next[worker] = (slot + 1) % self.slots
        return slot, self.blocks[worker, slot]

    def take(self, item: RingItem, pin_memory: bool = False) -> CARLABatch:
        """Main side: the batch with images of its own (pinned if asked); frees the slot."""
        if pin_memory:
            own = torch.empty(self.shape, dtype=torch.uint8, pin_memory=True)
        else:   # numpy asks for huge pages: a third of the page-fault cost of torch.empty
            own = torch.from_numpy(np.empty(self.shape, np.uint8))
        own.copy_(self.blocks[item.worker, item.slot])
        self.free[item.worker].release()
        return replace(item.batch, images=own.permute(0, 1, 4, 2, 3))
