"""pin_memory=True (load/transport/pinning.py, issue 44), on real shards and real worker processes.

- Without CUDA it warns once, as torch's DataLoader does, and the batches load unpinned: the
  plain loader and adapter="tcp", at 0 and 2 workers (they raised "no NVIDIA driver" before).
- With workers, each batch is pinned in a background thread ahead of the training thread.
  Pinning is stood in for on this CPU-only machine (`available` and `Tensor.pin_memory`, a
  copy), which runs the thread's logic: order kept, a worker's error raised with its message,
  no thread left after a break, a del or an error, and a resume state that counts what the
  caller got, not what the thread took ahead.
- stats["batches_outside_ring"] counts a batch too large for its dict-ring slot.
"""
from __future__ import annotations

import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from carla_wds.load import CARLAWebData
from carla_wds.load.transport import dictring, pinning, rings

from ..helpers import SIZE, make_pack

NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="pins for real where CUDA is")


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> Path:
    return make_pack(tmp_path_factory.mktemp("pin"), episodes=2, frames=24)


@pytest.fixture(scope="module")
def roach(tmp_path_factory) -> Path:
    """What adapter="tcp" reads: tcp_roach routes with their supervision."""
    return make_pack(tmp_path_factory.mktemp("pin_tcp"), layout="tcp_roach", episodes=1,
                     frames=14, allow_pickle_input=True)


@pytest.fixture
def stand_in(monkeypatch) -> list[str]:
    """Pinning as if CUDA were here: a copy, recording which thread made it."""
    threads: list[str] = []

    def pin(t: torch.Tensor) -> torch.Tensor:
        threads.append(threading.current_thread().name)
        return t.clone()
    monkeypatch.setattr(pinning, "available", lambda: True)
    monkeypatch.setattr(torch.Tensor, "pin_memory", pin)
    return threads


def pin_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == pinning.THREAD_NAME]


def keys_of(batches) -> list[list[str]]:
    return [list(b["key"]) if isinstance(b, dict) else list(b.keys) for b in batches]


@NO_CUDA
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("adapter", [None, "tcp"])
def test_without_cuda_pin_memory_warns_once_and_loads_unpinned(shards, roach, adapter, workers):
    source, kw = (roach, dict(adapter="tcp")) if adapter else (shards, dict(image_size=SIZE))
    want = [keys_of(CARLAWebData(str(source), batch_size=4, num_workers=workers, mode="eval",
                                 **kw))]
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")   # every warning, not the first per place
        data = CARLAWebData(str(source), batch_size=4, num_workers=workers, mode="eval",
                            pin_memory=True, **kw)
        got = [keys_of(data), keys_of(data)]   # two passes, one warning
    ours = [w for w in seen if "pin_memory=True, but CUDA is not available" in str(w.message)]
    assert len(ours) == 1 and ours[0].category is UserWarning
    assert ours[0].filename == __file__   # it points at the caller's line
    assert got == want * 2 and not pin_threads()


@pytest.mark.parametrize("workers", [0, 2])
def test_pinned_ahead_in_a_thread_with_workers_in_order(shards, stand_in, workers):
    want = list(CARLAWebData(str(shards), batch_size=4, num_workers=workers,
                             image_size=SIZE, seed=3))
    data = CARLAWebData(str(shards), batch_size=4, num_workers=workers, image_size=SIZE,
                        seed=3, pin_memory=True)
    got = list(data)
    assert keys_of(got) == keys_of(want)
    for a, b in zip(got, want):
        assert torch.equal(a.images, b.images) and torch.equal(a.waypoints, b.waypoints)
    # with workers the training thread never pins: it finds the batch pinned (without
    # workers the batch is made in the training thread, and pinned there, as torch does)
    assert set(stand_in) == ({pinning.THREAD_NAME} if workers else {"MainThread"})
    assert data.stats["batches_outside_ring"] == 0 and not pin_threads()


def test_adapter_batches_are_pinned_in_the_thread_too(roach, stand_in):
    want = keys_of(CARLAWebData(str(roach), batch_size=2, num_workers=2, adapter="tcp"))
    got = CARLAWebData(str(roach), batch_size=2, num_workers=2, adapter="tcp", pin_memory=True)
    assert keys_of(got) == want
    assert set(stand_in) == {pinning.THREAD_NAME} and not pin_threads()


def test_no_thread_is_left_after_a_break_a_del_or_a_whole_pass(shards, stand_in):
    data = CARLAWebData(str(shards), batch_size=2, num_workers=2, image_size=SIZE,
                        pin_memory=True, persistent_workers=True)
    for _ in data:
        assert len(pin_threads()) == 1
        break
    assert not pin_threads()
    it = iter(data)
    next(it), next(it)
    del it
    assert not pin_threads()
    assert len(list(data)) == len(data) - 3 and not pin_threads()   # the rest of the epoch
    data.close()


def _raising(sample: dict, rng: np.random.Generator) -> dict:
    if sample["key"] == _BAD[0]:
        raise ValueError(f"boom in the transform at {sample['key']}")
    return {"speed": float(sample["speed"])}


_BAD: list[str] = []


def test_a_worker_error_reaches_the_caller_with_its_message(shards, stand_in):
    keys = [k for b in CARLAWebData(str(shards), batch_size=2, num_workers=2, mode="eval",
                                    sample_transform=_transform) for k in b["key"]]
    _BAD[:] = [keys[9]]   # in the 5th batch; the forked workers read it
    data = CARLAWebData(str(shards), batch_size=2, num_workers=2, mode="eval",
                        pin_memory=True, sample_transform=_raising)
    got = []
    with pytest.raises(ValueError, match=f"boom in the transform at {keys[9]}"):
        for batch in data:
            got.append(batch["key"])
    assert 0 < len(got) < len(data) and not pin_threads()
    assert [k for b in got for k in b] == keys[:2 * len(got)]   # those before it, in order


def _transform(sample: dict, rng: np.random.Generator) -> dict:
    img = torch.from_numpy(sample["images"][0].transpose(2, 0, 1).copy()).float() / 255
    return {"image": img, "speed": float(sample["speed"])}


def test_resume_counts_what_the_caller_got_not_what_was_pinned_ahead(shards, stand_in,
                                                                      monkeypatch):
    made = []   # batches the pin thread received from the workers

    def counted(*args, **kw):
        made.append(1)
        return receive(*args, **kw)
    receive = rings.receive
    monkeypatch.setattr(rings, "receive", counted)
    whole = keys_of(CARLAWebData(str(shards), batch_size=2, num_workers=2, image_size=SIZE,
                                 seed=5))
    data = CARLAWebData(str(shards), batch_size=2, num_workers=2, image_size=SIZE, seed=5,
                        pin_memory=True)
    it, got = iter(data), []
    for _ in range(3):
        got += keys_of([next(it)])
    deadline = time.monotonic() + 120
    while len(made) < 3 + 2:   # one pinned batch queued, one more waiting to be queued
        assert time.monotonic() < deadline, f"the pin thread made {len(made)} batches"
        time.sleep(0.01)
    state = data.state_dict()
    del it
    assert state["consumed"] == 3 == data.stats["batches"]
    rest = CARLAWebData(str(shards), batch_size=2, num_workers=2, image_size=SIZE, seed=5)
    rest.load_state_dict(state)
    assert got + keys_of(rest) == whole


@pytest.mark.parametrize("workers", [0, 2])
def test_a_batch_larger_than_its_slot_counts_as_outside_the_ring(shards, monkeypatch,
                                                                 workers):
    # a batch's "image" stack is 3 x 36,864 bytes: a 64 KiB slot holds its other keys only
    kw = dict(batch_size=3, num_workers=workers, mode="eval", sample_transform=_transform)
    fits = CARLAWebData(str(shards), **kw)
    want = [(b["key"], b["image"].clone()) for b in fits]   # copies: no slot stays held
    assert fits.stats["batches_outside_ring"] == 0
    monkeypatch.setattr(dictring, "SLOT_BYTES", 64 << 10)
    data = CARLAWebData(str(shards), **kw)
    got = [(b["key"], b["image"].clone()) for b in data]
    assert data.stats["batches_outside_ring"] == len(data) == len(got) > 0
    for (keys, image), (want_keys, want_image) in zip(got, want):
        assert keys == want_keys and torch.equal(image, want_image)
