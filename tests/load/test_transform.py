"""sample_transform=: a user's function on each decoded sample, in the workers, seeded per
(seed, epoch, key); batches are default_collate of its dicts plus "valid" and "key". Exact
counts, eval padding, worker counts and resume keep their guarantees."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from carla_wds.load import CARLAWebData

from ..helpers import all_keys


def draw(sample: dict, rng: np.random.Generator) -> dict:
    """A transform with a random draw and a list-valued key (module level: workers pickle it)."""
    return {"img": int(sample["images"][0].astype(np.int64).sum()),
            "wp": sample["waypoints"].astype(np.float64), "noise": float(rng.normal()),
            "steps": [sample["waypoints"][i] for i in range(2)],
            "mode": sample["mode"], "id": sample["key"]}


@pytest.fixture(scope="module")
def shards(zoo):
    return zoo(episodes=2, frames=20)   # shared, read-only (conftest.zoo)


def _rows(batches) -> dict[str, tuple]:
    out = {}
    for b in batches:
        for i, key in enumerate(b["key"]):
            if b["valid"][i]:
                out[key] = (float(b["noise"][i]), float(b["img"][i]))
    return out


def test_batches_are_collated_dicts(shards):
    data = CARLAWebData(str(shards), batch_size=3, sample_transform=draw)
    batch = next(iter(data))
    assert list(batch) == ["img", "wp", "noise", "steps", "mode", "id", "valid", "key"]
    assert batch["wp"].dtype == torch.float64 and batch["wp"].shape[0] == 3
    assert isinstance(batch["steps"], list) and len(batch["steps"]) == 2   # lists stay lists
    assert batch["steps"][0].shape == (3, 2) and batch["mode"] == ["train"] * 3
    assert batch["id"] == batch["key"]


@pytest.mark.parametrize("workers", [0, 2])
def test_draws_are_per_seed_epoch_key_and_exact(shards, workers):
    ref = _rows(CARLAWebData(str(shards), batch_size=3, sample_transform=draw))
    data = CARLAWebData(str(shards), batch_size=3, sample_transform=draw, num_workers=workers)
    batches = list(data)
    assert len(batches) == len(data)
    rows = _rows(batches)
    common = set(rows) & set(ref)   # the unseen tail (< one batch) may differ by worker count
    assert len(common) >= len(ref) - 3
    assert {k: rows[k] for k in common} == {k: ref[k] for k in common}   # same draw per key
    data.set_epoch(1)
    other = _rows(data)
    assert {k: v[0] for k, v in other.items()} != {k: v[0] for k, v in rows.items()}


def test_resume_gives_the_remaining_batches(shards):
    full = list(CARLAWebData(str(shards), batch_size=3, sample_transform=draw, num_workers=2))
    first = CARLAWebData(str(shards), batch_size=3, sample_transform=draw, num_workers=2)
    it = iter(first)
    for _ in range(2):
        next(it)
    state = first.state_dict()
    it.close()
    fresh = CARLAWebData(str(shards), batch_size=3, sample_transform=draw, num_workers=2)
    fresh.load_state_dict(state)
    rest = list(fresh)
    assert [b["key"] for b in rest] == [b["key"] for b in full[2:]]
    assert all(torch.equal(a["noise"], b["noise"]) for a, b in zip(rest, full[2:]))


@pytest.mark.parametrize("workers", [0, 2])
def test_eval_padding_is_a_real_sample_marked_invalid(shards, workers):
    keys = all_keys(shards)
    seen, counts = [], []
    for rank in range(2):
        data = CARLAWebData(str(shards), batch_size=5, mode="eval", rank=rank, world_size=2,
                            sample_transform=draw, num_workers=workers)
        batches = list(data)
        counts.append(len(batches))
        for b in batches:
            for i, valid in enumerate(b["valid"].tolist()):
                if valid:
                    seen.append(b["key"][i])
                else:   # a copy of a real sample, so a model's step runs on it
                    assert b["key"][i] == "" and b["id"][i] in keys
    assert sorted(seen) == sorted(keys) and counts[0] == counts[1]
    assert len(seen) < counts[0] * 5 * 2   # this pack does need padding


def test_a_rank_with_no_sample_pads_with_a_real_one(shards):
    """More ranks than samples: some ranks' only batch is all padding, a copy of the first
    shard's first sample, so their model step still runs."""
    keys = all_keys(shards)
    world = len(keys) + 2
    real, padding = [], []
    for rank in range(world):
        (batch,) = list(CARLAWebData(str(shards), batch_size=1, mode="eval", rank=rank,
                                     world_size=world, sample_transform=draw))
        (real if batch["valid"][0] else padding).append(batch["id"][0])
    assert sorted(real) == sorted(keys) and padding == [keys[0]] * 2


def test_transform_returning_a_reserved_key_is_refused(shards):
    data = CARLAWebData(str(shards), batch_size=3, sample_transform=lambda s, r: {"valid": 1})
    with pytest.raises(ValueError, match="valid"):
        next(iter(data))


def views(sample: dict, rng: np.random.Generator) -> dict:
    """Returns a view of the decoded images (whose block the loader reuses batch to batch)."""
    return {"img": sample["images"], "id": sample["key"]}


@pytest.mark.parametrize("workers", [0, 1])
def test_padding_copies_a_real_sample_even_when_the_rows_view_the_images(shards, workers):
    """A rank's all-padding batch copies its last real row: a copy, so the next batch decoded
    into the same image block does not change it."""
    ref = {}
    for b in CARLAWebData(str(shards), batch_size=4, mode="eval", sample_transform=views):
        ref.update({k: b["img"][i].clone() for i, k in enumerate(b["key"]) if k})
    world, padded = 3, 0
    assert len(ref) % world   # some ranks end in an all-padding batch
    for rank in range(world):
        data = CARLAWebData(str(shards), batch_size=1, mode="eval", rank=rank,
                            world_size=world, sample_transform=views, num_workers=workers)
        for b in data:
            assert torch.equal(b["img"][0], ref[b["id"][0]]), (rank, b["id"][0])
            padded += not b["valid"][0]
    assert padded
