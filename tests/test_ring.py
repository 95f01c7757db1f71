"""BatchRing in one process: slots in turn, freed by take(), copies that own their memory."""
from __future__ import annotations

import multiprocessing

import numpy as np
import pytest
import torch

from carla_wds.batch import BatchBuffer
from carla_wds.ring import BatchRing, RingItem

SHAPE = (2, 1, 4, 6, 3)   # batch, cameras, H, W, channels


def test_slots_in_turn_and_take_copies_and_frees():
    ring = BatchRing(1, 2, SHAPE, multiprocessing.get_context("fork"))
    items = []
    for value in (7, 9):
        slot, images = ring.acquire(0)
        images.fill_(value)
        buf = BatchBuffer(2, 1, (4, 6), 4, images=images)
        items.append(RingItem(buf.batch(), 0, slot))
    assert [i.slot for i in items] == [0, 1]
    assert not ring.free[0].acquire(block=False)    # both slots are in flight
    batch = ring.take(items[0])
    slot, images = ring.acquire(0)                  # slot 0 again, freed by take
    images.fill_(1)
    assert slot == 0 and batch.images.shape == (2, 1, 3, 4, 6)
    assert bool((batch.images == 7).all())          # the taken copy kept its pixels
    assert np.shares_memory(images.numpy(), ring.blocks[0, 0].numpy())


def test_ring_refuses_spawned_workers():
    with pytest.raises(ValueError, match="fork"):
        BatchRing(1, 2, SHAPE, multiprocessing.get_context("spawn"))
