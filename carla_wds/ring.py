"""Shared-memory rings that carry batch images from DataLoader workers to the main process.

A fresh shared-memory block per batch costs its page faults every time: 60 ms for a 50 MB
batch here, a third of a JPEG batch's decode time, paid by the worker; copying each batch out
of a reused block instead cost the main process 30-45 ms a batch, a sixth of a core taken from
two workers (docs/benchmarks.md). So each worker decodes into one of a few slots of a mapping
made once, before the workers fork, and the main process hands the slot itself out as the
batch's images, zero-copy:

    worker:  slot, images = ring.acquire(worker) -> decode into images -> yield RingItem
    main:    batch = ring.take(item)              -> batch.images is a view of the slot

A slot is busy from `acquire` until the last reference to those images is gone (a finalizer
on the view frees it), so a batch you keep is never overwritten. When all of a worker's slots
are held, `acquire` returns None and that batch gets a shared-memory block of its own: keeping
every batch of an epoch (list(data)) works, slower, and never blocks a worker.

Each busy flag has one writer per transition (the worker sets it, the finalizer clears it),
and the worker writes a slot only after it saw the flag clear.
"""
from __future__ import annotations

import mmap
import multiprocessing
import weakref
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import torch

from .batch import CARLABatch


@dataclass
class RingItem:
    """What a worker yields: the batch's other fields (`parts`), and the slot that holds its
    images (the main process maps the slot itself; nothing image-sized is pickled).

    The fields travel as numpy arrays, pickled by value (about 2 KB): a torch tensor would go
    through a shared-memory file of its own and a socket round trip to the worker for its
    descriptor, seven of them per batch.
    """
    parts: dict[str, Any]     # field name -> value, tensors as numpy arrays
    worker: int
    slot: int

    @classmethod
    def of(cls, batch: CARLABatch, worker: int, slot: int) -> "RingItem":
        """batch: its images already in the slot; they are left out."""
        return cls({f.name: _as_numpy(getattr(batch, f.name)) for f in fields(batch)
                    if f.name != "images"}, worker, slot)

    def pin_memory(self) -> "RingItem":
        return self   # DataLoader(pin_memory=True) calls this; BatchRing.take pins the batch


def _as_numpy(value: Any) -> Any:
    return value.numpy() if isinstance(value, torch.Tensor) else value


class BatchRing:
    def __init__(self, num_workers: int, slots: int, shape: tuple[int, ...],
                 context: multiprocessing.context.BaseContext) -> None:
        if context.get_start_method() != "fork":
            raise ValueError("BatchRing needs forked workers (it shares an anonymous mapping)")
        self.shape, self.slots = tuple(shape), slots
        self.nbytes = int(np.prod(shape))
        n = num_workers * slots
        # MAP_SHARED | MAP_ANONYMOUS, inherited by forked workers; nothing is touched (or
        # zeroed) until a slot is first written, unlike a torch shared-memory tensor.
        self._map = mmap.mmap(-1, n * self.nbytes + n)
        self.blocks = torch.frombuffer(self._map, dtype=torch.uint8, count=n * self.nbytes
                                       ).view(num_workers, slots, *shape)
        self.busy = np.frombuffer(self._map, np.uint8, count=n, offset=n * self.nbytes
                                  ).reshape(num_workers, slots)

    def acquire(self, worker: int) -> tuple[int, torch.Tensor] | None:
        """Worker side: a slot whose images nobody holds, marked busy; None if all are held."""
        free = np.flatnonzero(self.busy[worker] == 0)
        if not len(free):
            return None
        slot = int(free[0])
        self.busy[worker, slot] = 1
        return slot, self.blocks[worker, slot]

    def take(self, item: RingItem, pin_memory: bool = False) -> CARLABatch:
        """Main side: the batch with its images; a view of the slot, or a pinned copy."""
        offset = (item.worker * self.slots + item.slot) * self.nbytes
        view = np.frombuffer(self._map, np.uint8, count=self.nbytes, offset=offset)
        if pin_memory:   # the pinned copy is the batch's own; the slot is free at once
            images = torch.empty(self.shape, dtype=torch.uint8, pin_memory=True)
            images.copy_(torch.from_numpy(view.reshape(self.shape)))
            self._free(item.worker, item.slot)
        else:
            # torch keeps the reshaped array, which keeps `view`: when the batch's images
            # (and every view of them) are gone, `view` goes and the finalizer frees the slot.
            weakref.finalize(view, self._free, item.worker, item.slot)
            images = torch.from_numpy(view.reshape(self.shape))
        batch = CARLABatch(images=images.permute(0, 1, 4, 2, 3),
                           **{name: torch.from_numpy(v) if isinstance(v, np.ndarray) else v
                              for name, v in item.parts.items()})
        return batch.pin_memory() if pin_memory else batch

    def _free(self, worker: int, slot: int) -> None:
        self.busy[worker, slot] = 0
