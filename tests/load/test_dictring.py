"""The dict ring (load/transport/dictring.py): a sample_transform's batches cross from the workers in
reused shared-memory slots, and are default_collate's batches value for value."""
from __future__ import annotations

import collections
import gc
import multiprocessing

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, default_collate

from carla_wds.load import CARLAWebData
from carla_wds.load.transport.dictring import DictRing, SlotBatch
from carla_wds.load.decode.model_batch import ModelBatch

from ..helpers import make_pack

Pair = collections.namedtuple("Pair", "a b")


def rows_for(i: int) -> list[dict]:
    """Rows with every kind default_collate handles: nested dicts, lists, tuples, namedtuples,
    Python and numpy scalars, numpy arrays of several dtypes, tensors, str, zero-size arrays."""
    rng = np.random.default_rng(i)
    return [{"img": torch.from_numpy(rng.random((3, 8, 5), dtype=np.float32)),
             "half": rng.random((4,)).astype(np.float16), "flag": bool(j % 2),
             "mask": rng.random((2, 3)) > 0.5, "i8": rng.integers(-5, 5, (7,), dtype=np.int8),
             "speed": float(j) / 3, "n": j + i, "np64": np.float64(j * 0.25),
             "bf": torch.full((2,), j, dtype=torch.bfloat16), "empty": np.zeros((0, 3)),
             "name": f"s{i}-{j}", "steps": [rng.random(2) for _ in range(3)],
             "pair": Pair(np.int64(j), np.ones(2, np.int32) * j), "tup": (j, "x"),
             "nest": {"deep": {"v": torch.arange(4) * j}}} for j in range(4)]


class Collated(IterableDataset):
    """Collates rows_for(i) in a real DataLoader worker, through the ring (or not)."""

    def __init__(self, ring: DictRing | None, n: int) -> None:
        self.ring, self.n = ring, n

    def __iter__(self):
        for i in range(self.n):
            rows = rows_for(i)
            if self.ring is None:
                yield ModelBatch(default_collate(rows))
            else:
                yield self.ring.item(ModelBatch(self.ring.collate(rows), [f"e{i}"]))


def assert_same(a, b, where="batch") -> None:
    assert type(a) is type(b), f"{where}: {type(a)} != {type(b)}"
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape, where
        assert torch.equal(a, b), where
    elif isinstance(a, dict):
        assert list(a) == list(b), where
        for k in a:
            assert_same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


def through_ring(ring: DictRing, n: int, keep: bool = True) -> list:
    loader = DataLoader(Collated(ring, n), batch_size=None, num_workers=1,
                        multiprocessing_context="fork")
    out = []
    for item in loader:
        assert isinstance(item, SlotBatch) or not keep
        data = ring.take(item) if isinstance(item, SlotBatch) else item.data
        out.append(data if keep else None)
    return out


def test_batches_equal_default_collate_key_for_key():
    ring = DictRing(1, 4, multiprocessing.get_context("fork"))
    got = through_ring(ring, 3)
    for i, data in enumerate(got):
        assert_same(data, default_collate(rows_for(i)))


def test_a_batch_too_large_for_its_slot_takes_torchs_way_for_the_rest():
    # 256 bytes: "img" (480 B) does not fit; "half" (32 B) does; values are the same anyway
    ring = DictRing(1, 2, multiprocessing.get_context("fork"), slot_bytes=256)
    for i, data in enumerate(through_ring(ring, 2)):
        assert_same(data, default_collate(rows_for(i)))


def test_slots_are_reused_and_a_held_batch_is_never_overwritten():
    # 2 held + the batch in use + 1 queued (prefetch_factor) + 1 being made
    ring = DictRing(1, 5, multiprocessing.get_context("fork"))
    loader = DataLoader(Collated(ring, 12), batch_size=None, num_workers=1,
                        multiprocessing_context="fork", prefetch_factor=1)
    held, addresses, outside = [], set(), 0
    for i, item in enumerate(loader):
        if not isinstance(item, SlotBatch):   # every slot held: torch's way
            outside += 1
            data = item.data
        else:
            data = ring.take(item)
            addresses.add(data["img"].data_ptr())
        if i < 2:
            held.append((i, data))   # kept to the end: their slots stay busy
        del data
        gc.collect()
    for i, data in held:
        assert_same(data, default_collate(rows_for(i)), f"held batch {i}")
    assert outside == 0
    # 12 batches in at most 5 slots (how many the worker's lead uses depends on timing)
    assert 3 <= len(addresses) <= 5


def test_the_same_dicts_pass_after_pass_and_all_kept(tmp_path):
    shards = make_pack(tmp_path, episodes=2, frames=12)

    def batches(workers: int) -> list[dict]:
        data = CARLAWebData(str(shards), batch_size=3, num_workers=workers,
                            sample_transform=_transform, mode="eval")
        out = [list(data), list(data)]   # two passes, every batch kept (slots run out)
        assert data.stats["skipped_samples"] == 0
        return out, data.stats["batches_outside_ring"]

    ref, _ = batches(0)
    got, outside = batches(2)
    assert outside > 0   # 2 workers x 4 slots < the batches kept
    for p in range(2):   # each sample's row equals, whichever worker made its batch
        assert _by_key(got[p]).keys() == _by_key(ref[p]).keys()
        for key, row in _by_key(got[p]).items():
            assert_same(row, _by_key(ref[p])[key], key)


def _by_key(batches: list[dict]) -> dict[str, dict]:
    out = {}
    for b in batches:
        assert b["image"].dtype == torch.float32 and isinstance(b["wp"], list)
        for i, key in enumerate(b["key"]):
            if b["valid"][i]:
                out[key] = {"image": b["image"][i], "wp": [w[i] for w in b["wp"]],
                            "speed": b["speed"][i], "noise": b["noise"][i]}
    return out


def _transform(sample: dict, rng: np.random.Generator) -> dict:
    img = torch.from_numpy(sample["images"][0].transpose(2, 0, 1).copy()).float() / 255
    return {"image": img, "wp": [sample["waypoints"][i] for i in range(2)],
            "speed": sample["speed"], "noise": float(rng.normal())}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="pinned memory needs CUDA")
def test_pinned_batches_free_their_slot_at_once():
    ring = DictRing(1, 2, multiprocessing.get_context("fork"))
    loader = DataLoader(Collated(ring, 5), batch_size=None, num_workers=1,
                        multiprocessing_context="fork", pin_memory=True)
    for i, item in enumerate(loader):
        data = ring.take(item, pin_memory=True)
        assert data["img"].is_pinned()
        assert_same(data, default_collate(rows_for(i)))


def test_pinning_reaches_every_container_collate_makes(monkeypatch):
    """A pinned batch frees its slot at once, so no tensor of it may stay a view of the slot:
    namedtuples and tuples too (pinning stubbed as a copy here: no CUDA)."""
    from carla_wds.load.decode import model_batch
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda t: t.clone())
    ring = DictRing(1, 2, None)
    data = ring.take(ring.item(ModelBatch(ring.collate(rows_for(0)))), pin_memory=True)
    slot = np.frombuffer(ring._map, np.uint8, count=ring.slot_bytes)
    lo, hi = slot.ctypes.data, slot.ctypes.data + slot.nbytes

    def leaves(v):
        if isinstance(v, torch.Tensor):
            yield v
        elif isinstance(v, dict):
            for x in v.values():
                yield from leaves(x)
        elif isinstance(v, (list, tuple)):
            for x in v:
                yield from leaves(x)
    assert isinstance(data["pair"], Pair)
    assert all(not lo <= t.data_ptr() < hi for t in leaves(data))
    assert_same(data, default_collate(rows_for(0)))
    assert model_batch.pinned(Pair(torch.ones(1), (torch.zeros(1),))).b[0].shape == (1,)


def test_autograd_tensors_without_workers_are_default_collates():
    ring = DictRing(1, 2, None)
    rows = [{"w": torch.ones(3, requires_grad=True), "s": torch.ones((), requires_grad=True)}
            for _ in range(2)]
    got = ring.collate(rows)
    item = ring.item(ModelBatch(got))
    data = ring.take(item) if isinstance(item, SlotBatch) else item.data
    want = default_collate(rows)
    assert data["w"].requires_grad and data["s"].requires_grad
    assert torch.equal(data["w"].detach(), want["w"].detach())
