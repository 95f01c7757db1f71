"""Reused shared-memory slots that carry a sample_transform's batch dicts (adapter=NAME) from
the DataLoader workers to the main process.

torch's default collate, in a worker, stacks each key into a fresh shared-memory block, and the
DataLoader sends each block's file descriptor over a socket: 23 blocks per TCP batch, each a
shm file, its page faults (2.76 MB of float32 image per TCP sample, written once and faulted
in every batch), a connect and a recvmsg. That cost 3-4 ms per sample at 1 and 2 workers, as
much as the whole decode (docs/benchmarks.md, issue 26). So, as the image ring (ring.py) does
for CARLABatch images, each worker collates into one of a few slots of a mapping made once,
before the workers fork, and the main process hands out views of the slot, zero-copy:

    worker:  data = ring.collate(rows)  -> torch's collate, each stack written into a slot
             yield ring.item(ModelBatch(data))   -> SlotBatch: the slot, and where each key is
    main:    data = ring.take(item)     -> the same dict; its tensors are views of the slot

The batch is torch's `default_collate` of the same rows, value for value and dtype for dtype
(it is torch's own `collate` with only the tensor case's memory changed); small tensors (the
scalars collate makes) travel pickled by value. A slot is busy until the last view of it is
gone (a finalizer frees it); when a worker's slots are all held, that batch takes torch's
usual way. Each worker owns its slots, so no lock is needed: the main process clears a busy
flag, the worker sets it. The mapping is virtual (MAP_NORESERVE): a slot's pages cost memory
only once written, and stay written for the next batch, and the next pass.
"""
from __future__ import annotations

import logging
import mmap
import multiprocessing
import os
import weakref
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch.utils.data import default_collate, get_worker_info
from torch.utils.data._utils.collate import collate, default_collate_fn_map

from ..decode.model_batch import ModelBatch, pinned

log = logging.getLogger(__name__)
SLOT_BYTES = 512 << 20   # a slot's capacity; a larger batch takes torch's way (counted)
ALIGN = 64               # each key's offset in its slot
SMALL_BYTES = 256 << 10  # a tensor outside the slot this small is pickled by value
_NORESERVE = getattr(mmap, "MAP_NORESERVE", 0x4000)   # Linux's value; mmap lacks the name


@dataclass(frozen=True)
class InSlot:
    """Where one key's tensor lies in its batch's slot."""
    offset: int
    dtype: torch.dtype
    shape: tuple[int, ...]


@dataclass(frozen=True)
class ByValue:
    """A small tensor sent pickled, as numpy."""
    array: np.ndarray


@dataclass
class SlotBatch:
    """What a worker yields: the dict with its tensors replaced by InSlot/ByValue, and the slot."""
    parts: Any
    slot: int
    used: int                 # bytes of the slot the batch fills
    errors: list[str] = field(default_factory=list)
    spilled: bool = False     # a stack did not fit in the slot: it took torch's way


class _Bump:
    """A worker's slot being filled: each stacked key at the next aligned offset."""

    def __init__(self, block: torch.Tensor) -> None:
        self.block, self.used, self.spilled = block, 0, False

    def tensor_fn(self, batch: list[torch.Tensor], *, collate_fn_map=None) -> torch.Tensor:
        """torch's collate_tensor_fn, with the stack written into the slot when it fits."""
        elem = batch[0]
        nbytes = elem.element_size() * elem.numel() * len(batch)
        if (elem.layout != torch.strided or elem.device.type != "cpu"
                or any(x.shape != elem.shape or x.dtype != elem.dtype or x.requires_grad
                       for x in batch)
                or self.used + nbytes > self.block.numel()):
            # torch's own case: its errors for unequal shapes, nested/sparse, autograd (out=
            # refuses it), or a full slot (the batch then counts as outside the ring)
            self.spilled |= self.used + nbytes > self.block.numel()
            return default_collate_fn_map[torch.Tensor](batch, collate_fn_map=collate_fn_map)
        start = self.used
        self.used = -(-(start + nbytes) // ALIGN) * ALIGN
        out = self.block[start:start + nbytes].view(elem.dtype).view(len(batch), *elem.shape)
        return torch.stack(batch, 0, out=out)


class DictRing:
    """`slots` slots per worker for `workers` workers; made in the main process, pre-fork.
    Without a context, one worker's slots in private memory, for a pass without workers: its
    batches are made in the main process, which then reuses written pages too."""

    def __init__(self, workers: int, slots: int,
                 context: multiprocessing.context.BaseContext | None,
                 slot_bytes: int = SLOT_BYTES) -> None:
        if context is not None and context.get_start_method() != "fork":
            raise ValueError("DictRing needs forked workers (it shares an anonymous mapping)")
        self.workers, self.slots, self.slot_bytes = workers, slots, slot_bytes
        self.in_process = context is None
        n = workers * slots
        share = mmap.MAP_PRIVATE if self.in_process else mmap.MAP_SHARED
        self._map = mmap.mmap(-1, n * slot_bytes + n, flags=share | _NORESERVE)
        if self.in_process and hasattr(mmap, "MADV_HUGEPAGE"):
            # private memory may take huge pages: a slot's first write then costs a few
            # faults, not one per 4 KB (shared memory's do not here: shmem_enabled=never)
            self._map.madvise(mmap.MADV_HUGEPAGE)
        self.blocks = torch.frombuffer(self._map, dtype=torch.uint8, count=n * slot_bytes)
        self.busy = np.frombuffer(self._map, np.uint8, count=n, offset=n * slot_bytes)
        self.owner = os.getpid()   # only its finalizers free slots (forked copies run too)
        self._held: set[int] = set()
        self._current: _Bump | None = None   # worker side: the slot of the batch in collate
        self._slot = -1

    @property
    def shape(self) -> tuple[int, int, int]:
        return self.workers, self.slots, self.slot_bytes

    # --- worker side
    def _acquire(self) -> int | None:
        info = get_worker_info()
        worker = 0 if self.in_process and info is None else info.id if info else None
        if worker is None or worker >= self.workers:
            return None
        mine = range(worker * self.slots, (worker + 1) * self.slots)
        slot = next((s for s in mine if not self.busy[s]), None)
        if slot is not None:
            self.busy[slot] = 1
        return slot

    def collate(self, rows: list[Any]) -> Any:
        """default_collate(rows), its stacks written into a free slot of this worker."""
        slot = self._acquire()
        if slot is None:
            self._current, self._slot = None, -1
            return default_collate(rows)
        self._slot = slot
        bump = _Bump(self.blocks[slot * self.slot_bytes:(slot + 1) * self.slot_bytes])
        fns = {**default_collate_fn_map, torch.Tensor: bump.tensor_fn}
        data = collate(rows, collate_fn_map=fns)
        self._current = bump
        return data

    def item(self, batch: ModelBatch) -> SlotBatch | ModelBatch:
        """A collated batch as it crosses: a SlotBatch when `collate` wrote it into a slot."""
        bump, slot, self._current, self._slot = self._current, self._slot, None, -1
        if bump is None or slot < 0:
            return batch
        base = bump.block.data_ptr()
        parts = _parts(batch.data, base, bump.block.numel())
        return SlotBatch(parts, slot, bump.used, list(batch.errors), bump.spilled)

    # --- main side
    def take(self, item: SlotBatch, pin_memory: bool = False) -> dict[str, Any]:
        """The batch dict; its stacked tensors are views of the slot (or pinned copies)."""
        view = np.frombuffer(self._map, np.uint8, count=max(item.used, 1),
                             offset=item.slot * self.slot_bytes)
        data = _rebuild(item.parts, view)
        if pin_memory:   # pinned copies are the batch's own: the slot is free at once
            data = pinned(data)
            self.busy[item.slot] = 0
            return data
        # every view keeps `view` (numpy's base): when the last is gone, the slot is free
        self._held.add(item.slot)
        weakref.finalize(view, self._free, item.slot)
        return data

    def reclaim(self) -> bool:
        """Once a pass's workers have exited: free the slots of batches that never reached the
        caller. False (and nothing done) outside the process that made the ring."""
        if os.getpid() != self.owner:
            return False
        for slot in np.flatnonzero(self.busy):
            if int(slot) not in self._held:
                self.busy[slot] = 0
        return True

    def _free(self, slot: int) -> None:
        if os.getpid() != self.owner:
            return
        self._held.discard(slot)
        self.busy[slot] = 0


def _parts(value: Any, base: int, size: int) -> Any:
    """value with each tensor stacked into the slot as InSlot, small others as ByValue."""
    if isinstance(value, torch.Tensor):
        offset = value.data_ptr() - base
        if 0 <= offset < size and value.is_contiguous() and value.storage_offset() >= 0:
            return InSlot(offset, value.dtype, tuple(value.shape))
        if value.nbytes < SMALL_BYTES and value.layout == torch.strided and \
                value.dtype != torch.bfloat16 and not value.requires_grad:
            return ByValue(value.numpy())
        return value   # torch's own way (shared memory)
    if isinstance(value, dict):
        return type(value)((k, _parts(v, base, size)) for k, v in value.items())
    if isinstance(value, list):
        return [_parts(v, base, size) for v in value]
    if isinstance(value, tuple):   # a namedtuple's fields by position, as collate made it
        items = [_parts(v, base, size) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    return value


def _rebuild(value: Any, view: np.ndarray) -> Any:
    if isinstance(value, InSlot):
        n = int(np.prod(value.shape, dtype=np.int64)) * _itemsize(value.dtype)
        raw = torch.from_numpy(view[value.offset:value.offset + n])
        return raw.view(value.dtype).view(value.shape)
    if isinstance(value, ByValue):
        return torch.from_numpy(value.array)
    if isinstance(value, dict):
        return type(value)((k, _rebuild(v, view)) for k, v in value.items())
    if isinstance(value, list):
        return [_rebuild(v, view) for v in value]
    if isinstance(value, tuple):
        items = [_rebuild(v, view) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    return value


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()
