"""BatchRing in one process: busy slots, zero-copy batches, freed when the images are gone."""
from __future__ import annotations

import gc
import multiprocessing

import numpy as np
import pytest
import torch

from carla_wds.load.decode.batch import BatchBuffer
from carla_wds.load.transport.ring import BatchRing, RingItem

SHAPE = (2, 1, 4, 6, 3)   # batch, cameras, H, W, channels


def _fill(ring: BatchRing, value: int) -> RingItem | None:
    got = ring.acquire()
    if got is None:
        return None
    slot, images = got
    images.fill_(value)
    return RingItem.of(BatchBuffer(2, 1, (4, 6), 4, alloc=lambda shape: images).batch(), slot)


def test_slots_stay_busy_while_their_images_live():
    ring = BatchRing(2, SHAPE, multiprocessing.get_context("fork"))
    first = ring.take(_fill(ring, 7))
    second = ring.take(_fill(ring, 9))
    assert _fill(ring, 1) is None                   # both held: the worker must go elsewhere
    assert first.images.shape == (2, 1, 3, 4, 6) and bool((first.images == 7).all())
    assert np.shares_memory(first.images.numpy(), ring.blocks[0].numpy())   # zero-copy
    crop = first.images[0, 0, :, 1:3]               # a view outlives the batch object
    del first
    gc.collect()
    assert _fill(ring, 1) is None and bool((crop == 7).all())
    del crop
    gc.collect()
    third = ring.take(_fill(ring, 5))               # slot 0 again, now that nothing holds it
    assert bool((third.images == 5).all()) and bool((second.images == 9).all())
    assert ring.busy.tolist() == [1, 1]
    del second, third
    gc.collect()
    assert ring.busy.tolist() == [0, 0]


def test_ring_refuses_spawned_workers():
    with pytest.raises(ValueError, match="fork"):
        BatchRing(2, SHAPE, multiprocessing.get_context("spawn"))


def test_ring_items_travel_as_plain_arrays():
    """What the worker queues holds no tensor (torch would pass each through a shared-memory
    file and a socket); the main process gets the same batch back."""
    from multiprocessing.reduction import ForkingPickler

    torch.multiprocessing.get_sharing_strategy()   # registers torch's reductions
    ring = BatchRing(2, SHAPE, multiprocessing.get_context("fork"))
    got = ring.acquire()
    buf = BatchBuffer(2, 1, (4, 6), 4, alloc=lambda shape: got[1])
    buf.set(0, "k0", {"speed": 3.5, "target_point": [1, 2], "target_command": np.eye(6)[2],
                      "waypoints": np.arange(8).reshape(4, 2), "waypoints_diff": np.ones((4, 2))})
    sent = buf.batch()
    item = RingItem.of(sent, got[0])
    assert not any(isinstance(v, torch.Tensor) for v in item.parts.values())
    back = ring.take(ForkingPickler.loads(ForkingPickler.dumps(item)))
    for name in ("speed", "target_point", "command", "waypoints", "waypoints_diff", "valid"):
        assert torch.equal(getattr(back, name), getattr(sent, name)), name
    assert back.keys == ["k0", ""] and back.valid.tolist() == [True, False]


def _cycle(ring: BatchRing, me: int, rounds: int, written, clashes) -> None:
    """A worker's life in the ring: decode into a slot, and the main process drops that
    batch once the worker has decoded the next one (so it holds at most two slots)."""
    held: list[tuple[int, torch.Tensor]] = []
    for _ in range(rounds):
        got = ring.acquire()
        if got is None:   # the lock past its timeout: a block of its own, outside the ring
            continue
        slot, images = got
        flat = images.view(-1)
        flat[:64] = me
        written[me] |= 1 << slot
        held.append((slot, flat))
        if len(held) == 2:
            slot, flat = held.pop(0)
            if int(flat[0]) != me or int(flat[63]) != me:   # written while this one held it
                clashes.value += 1
            ring.busy[slot] = 0   # the main process's store in _free


def test_each_worker_writes_only_the_slots_it_cycles_through():
    """A slot costs a worker 12,800 page faults the first time it writes it, whoever wrote
    it before, so memory and faults follow the slots each worker ever writes: two workers
    that each hold two slots at a time, in a ring of four, write two slots each, however
    their turns interleave, and never one the other holds."""
    ctx = multiprocessing.get_context("fork")
    ring = BatchRing(4, SHAPE, ctx)
    written, clashes = ctx.Array("q", [0, 0]), ctx.Value("i", 0, lock=True)
    workers = [ctx.Process(target=_cycle, args=(ring, me, 2000, written, clashes))
               for me in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
        assert w.exitcode == 0
    slots = [{s for s in range(4) if mask >> s & 1} for mask in written]
    assert [len(s) for s in slots] == [2, 2] and not slots[0] & slots[1]
    assert clashes.value == 0


def _hammer(ring: BatchRing, me: int, rounds: int, clashes) -> None:
    for _ in range(rounds):
        got = ring.acquire()
        if got is None:
            continue
        slot, images = got
        flat = images.view(-1)
        flat[:64] = me
        for _ in range(50):   # hold it a while; nobody else may write it meanwhile
            if int(flat[0]) != me or int(flat[63]) != me:
                clashes.value += 1
                break
        ring.busy[slot] = 0   # the main process's store in _free (a no-op in workers)


def test_no_two_workers_ever_hold_one_slot():
    """Forked workers racing for few slots: each slot has one writer at a time."""
    ctx = multiprocessing.get_context("fork")
    ring = BatchRing(2, SHAPE, ctx)
    clashes = ctx.Value("i", 0, lock=True)
    workers = [ctx.Process(target=_hammer, args=(ring, me + 1, 3000, clashes))
               for me in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
        assert w.exitcode == 0
    assert clashes.value == 0 and ring.busy.tolist() == [0, 0]


def test_reclaim_frees_undelivered_slots_and_renews_the_lock():
    ring = BatchRing(3, SHAPE, multiprocessing.get_context("fork"))
    held = ring.take(_fill(ring, 4))     # a batch the caller still holds
    _fill(ring, 5)                       # prefetched by a worker, never taken: an early stop
    assert ring._lock.acquire(timeout=1)  # and a worker killed inside acquire kept the lock
    ring.reclaim()
    assert ring.busy.tolist() == [1, 0, 0] and bool((held.images == 4).all())
    assert ring.acquire(timeout=0.01)[0] == 1
    del held
    gc.collect()
    assert ring.busy.tolist() == [0, 1, 0]


def _collect_in_worker(ring: BatchRing, slot: int) -> None:
    ring._free(slot)             # what an inherited finalizer does in a worker's collection
    assert ring.reclaim() is False


def test_a_worker_never_frees_the_main_process_slots():
    """Forked workers inherit the finalizers of batches the main process holds (or has not
    collected yet); running them there must not free the slot under the main process."""
    ctx = multiprocessing.get_context("fork")
    ring = BatchRing(2, SHAPE, ctx)
    held = ring.take(_fill(ring, 3))
    _fill(ring, 4)               # prefetched, not taken: only the main process may reclaim it
    worker = ctx.Process(target=_collect_in_worker, args=(ring, 0))
    worker.start()
    worker.join(30)
    assert worker.exitcode == 0 and ring.busy.tolist() == [1, 1]
    assert _fill(ring, 5) is None and bool((held.images == 3).all())
