"""CARLAWebData on real shards made by the project's own synth + pack."""
from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from carla_wds import CARLABatch, CARLAWebData
from carla_wds.load.decode import stages
from carla_wds.pack.packer import PackOptions, pack
from carla_wds.pack.synth import synth_dataset

from ..helpers import SIZE, all_keys, child_pids, make_pack


@pytest.fixture(scope="module")
def shards(zoo) -> Path:
    return zoo()   # shared, read-only (conftest.zoo)




def run_epoch(shards, **kw) -> list[CARLABatch]:
    data = CARLAWebData(str(shards), image_size=SIZE, **kw)
    return list(data)


@pytest.mark.parametrize("world,workers", list(itertools.product((1, 2, 3), (0, 1, 2, 3))))
def test_train_exact_counts_no_duplicates(shards, world, workers):
    batch = 5
    keys, lengths = [], []
    for rank in range(world):
        data = CARLAWebData(str(shards), batch_size=batch, num_workers=workers, rank=rank,
                            world_size=world, image_size=SIZE, seed=1)
        batches = list(data)
        assert len(batches) == len(data)
        lengths.append(len(batches))
        for b in batches:
            assert b.images.shape == (batch, 1, 3, *SIZE) and b.images.dtype == torch.uint8
            assert b.valid.all() and len(b.keys) == batch
        keys += [k for b in batches for k in b.keys]
    assert len(set(lengths)) == 1, f"ranks disagree on batch counts: {lengths}"
    assert len(keys) == len(set(keys)), "a sample appeared twice in one epoch"
    total = len(all_keys(shards))
    # fewer than one global batch unseen (78 samples in shards of up to 7: 3, 8, 3 for 1, 2, 3 ranks),
    # which needs ranks and workers to split shards mid-way
    assert set(keys) <= set(all_keys(shards))
    assert total - len(keys) == total % (world * batch) < world * batch


@pytest.mark.parametrize("world,workers", [(1, 0), (2, 2), (3, 3), (2, 1)])
def test_eval_every_sample_exactly_once(shards, world, workers):
    keys, lengths = [], []
    for rank in range(world):
        batches = run_epoch(shards, batch_size=4, mode="eval", num_workers=workers, rank=rank,
                            world_size=world)
        lengths.append(len(batches))
        for b in batches:
            keys += [k for k, v in zip(b.keys, b.valid.tolist()) if v]
            assert all(k == "" for k, v in zip(b.keys, b.valid.tolist()) if not v)
    assert len(set(lengths)) == 1
    assert sorted(keys) == sorted(all_keys(shards))


def test_deterministic_and_differs_per_epoch(shards):
    kw = dict(batch_size=4, num_workers=2, seed=3)
    a = [b.keys for b in run_epoch(shards, **kw)]
    assert a == [b.keys for b in run_epoch(shards, **kw)]
    data = CARLAWebData(str(shards), image_size=SIZE, **kw)
    data.set_epoch(1)
    assert [b.keys for b in data] != a
    other_seed = [b.keys for b in run_epoch(shards, batch_size=4, num_workers=2, seed=4)]
    assert other_seed != a


@pytest.mark.parametrize("workers,k", [(0, 3), (2, 1), (2, 4), (3, 5), (3, 0)])
def test_resume_gives_identical_batches(shards, workers, k):
    kw = dict(batch_size=4, num_workers=workers, seed=9, augment=True, rank=1, world_size=2)
    full = CARLAWebData(str(shards), image_size=SIZE, **kw)
    full.set_epoch(2)
    reference = list(full)
    first = CARLAWebData(str(shards), image_size=SIZE, **kw)
    first.set_epoch(2)
    it = iter(first)
    for _ in range(k):
        next(it)
    state = first.state_dict()
    resumed = CARLAWebData(str(shards), image_size=SIZE, **kw)
    resumed.load_state_dict(state)
    resumed.set_epoch(2)
    rest = list(resumed)
    assert len(rest) == len(reference) - k
    for a, b in zip(rest, reference[k:]):
        assert a.keys == b.keys
        assert torch.equal(a.images, b.images) and torch.equal(a.waypoints, b.waypoints)
    assert len(list(resumed)) == len(reference)   # the next pass is a whole epoch again


def test_resume_skips_without_decoding(shards, monkeypatch):
    calls = []
    real = stages.decode_image
    monkeypatch.setattr(stages, "decode_image", lambda *a, **k: calls.append(1) or real(*a, **k))
    data = CARLAWebData(str(shards), batch_size=4, image_size=SIZE)
    state = {**data.state_dict(), "consumed": len(data) - 2}
    data.load_state_dict(state)
    assert len(list(data)) == 2
    assert len(calls) == 2 * 4    # only the two remaining batches were decoded


def test_load_state_dict_mismatch_names_the_field(shards):
    state = CARLAWebData(str(shards), batch_size=4, image_size=SIZE).state_dict()
    # (world_size and num_workers may change since issue 29: tests/load/test_reshape.py)
    for field, kw in [("batch_size", dict(batch_size=5)), ("seed", dict(seed=1)),
                      ("mode", dict(mode="eval"))]:
        other = CARLAWebData(str(shards), image_size=SIZE, **{"batch_size": 4, **kw})
        with pytest.raises(ValueError, match=f"{field} was .* but is"):
            other.load_state_dict(state)
    with pytest.raises(ValueError, match="manifest was"):
        CARLAWebData(str(shards), batch_size=4, image_size=SIZE).load_state_dict(
            {**state, "manifest": "0" * 64})


def test_resampled_mode_exact_per_rank(shards):
    for workers in (0, 2):
        for rank in (0, 1):
            data = CARLAWebData(str(shards), batch_size=3, num_workers=workers, rank=rank,
                                world_size=2, batches_per_epoch=5, image_size=SIZE)
            batches = list(data)
            assert len(data) == 5 and len(batches) == 5
            assert all(b.valid.all() for b in batches)


def test_images_are_exact_uint8_of_the_source(shards, tmp_path):
    batches = run_epoch(shards, batch_size=4, mode="eval")
    b = batches[0]
    raw = Path(shards).parent / "raw"
    key = b.keys[0]
    town, route, frame = key.split("__")
    src = cv2.cvtColor(cv2.imread(str(raw / town / route / "rgb" / f"{frame}.png")),
                       cv2.COLOR_BGR2RGB)
    expected = cv2.resize(src, (SIZE[1], SIZE[0]), interpolation=cv2.INTER_LINEAR)
    assert np.array_equal(b.images[0, 0].numpy(), expected.transpose(2, 0, 1))
    assert b.images.float().mean() > 20   # not the seed's all-black images


def test_normalized_images_and_to(shards):
    b = run_epoch(shards, batch_size=4, mode="eval")[0]
    x = b.normalized_images()
    assert x.dtype == torch.float32 and x.shape == b.images.shape
    expected = (b.images[0, 0, 0].float() / 255 - 0.485) / 0.229
    assert torch.allclose(x[0, 0, 0], expected)
    assert b.to("cpu").keys == b.keys


def test_augmentation_deterministic_and_changes_pixels(shards):
    kw = dict(batch_size=4, seed=2, shuffle_buffer=0)
    plain = run_epoch(shards, **kw)[0]
    aug = CARLAWebData(str(shards), image_size=SIZE, augment=True, **kw)
    aug.set_epoch(0, global_step=10**7)   # late in training: strong augmentation
    a = next(iter(aug))
    aug2 = CARLAWebData(str(shards), image_size=SIZE, augment=True, **kw)
    aug2.set_epoch(0, global_step=10**7)
    assert torch.equal(a.images, next(iter(aug2)).images)
    assert a.keys == plain.keys and not torch.equal(a.images, plain.images)
    assert a.images.dtype == torch.uint8


def test_shared_vs_per_camera_augmentation():
    from carla_wds.load.decode.augment import augment_cameras
    img = np.random.default_rng(0).integers(0, 255, (32, 48, 3), dtype=np.uint8)
    kw = dict(seed=0, epoch=0, key="k", iteration=10**9)
    shared = augment_cameras([img, img.copy()], per_camera=False, **kw)
    per_cam = augment_cameras([img, img.copy()], per_camera=True, **kw)
    assert np.array_equal(shared[0], shared[1])
    assert not np.array_equal(per_cam[0], per_cam[1])


def test_len_is_from_manifest_without_reading_shards(tmp_path):
    manifest = {"schema_version": 1, "cameras": ["front"], "pred_len": 4, "image_format": "png",
                "layout": "tcp", "total_samples": 1000 * 37,
                "shards": [{"name": f"shard-{i:06d}.tar", "samples": 37, "bytes": 1,
                            "sha256": "0" * 64} for i in range(1000)]}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    data = CARLAWebData(str(tmp_path), batch_size=32, rank=3, world_size=8)
    assert len(data) == (37000 // 8) // 32   # no shard file exists: nothing was read


def test_too_little_data_raises_clearly(shards):
    with pytest.raises(ValueError, match="no full batch"):
        CARLAWebData(str(shards), batch_size=1000, image_size=SIZE)


def test_fewer_shards_than_ranks_times_workers(tmp_path):
    one = make_pack(tmp_path, episodes=1, frames=20, max_samples=100)
    keys = []
    for rank in range(2):
        data = CARLAWebData(str(one), batch_size=2, num_workers=3, rank=rank, world_size=2,
                            image_size=SIZE)
        batches = list(data)
        assert len(batches) == len(data) == (16 // 2) // 2
        keys += [k for b in batches for k in b.keys]
    assert len(keys) == len(set(keys)) == 16


def test_camera_subset(tmp_path):
    tf4 = make_pack(tmp_path, layout="transfuser4", episodes=1, frames=12)
    b = run_epoch(tf4, batch_size=2, cameras=["front", "left"], mode="eval")[0]
    assert b.images.shape[1] == 2
    with pytest.raises(ValueError, match="not in the shards"):
        CARLAWebData(str(tf4), batch_size=2, cameras=["top"])


def _by_key(batches: list[CARLABatch]) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    return {k: (b.images[i], b.waypoints[i]) for b in batches
            for i, k in enumerate(b.keys) if b.valid[i]}


def _drop_each(data: CARLAWebData) -> tuple[dict, set[int]]:
    """A pass whose batches are dropped at once: per key (images, waypoints), copied, and
    the image blocks the batches came in."""
    found, blocks = {}, set()
    for b in data:
        blocks.add(b.images.data_ptr())
        found.update({k: (b.images[i].clone(), b.waypoints[i].clone())
                      for i, k in enumerate(b.keys) if b.valid[i]})
    return found, blocks


def _same_pixels(found: dict, reference: dict) -> None:
    assert found.keys() == reference.keys()
    for key, (images, waypoints) in found.items():
        assert torch.equal(images, reference[key][0]), key
        assert torch.equal(waypoints, reference[key][1]), key


@pytest.mark.parametrize("prefetch", [1, 2])
def test_worker_batches_held_or_dropped_keep_their_pixels(shards, prefetch):
    """Worker batches live in a few reused blocks until dropped, pass after pass; holding
    every batch of the epoch, or dropping each at once, must give per key exactly the
    num_workers=0 pixels."""
    reference = _by_key(run_epoch(shards, batch_size=3, mode="eval"))
    data = CARLAWebData(str(shards), image_size=SIZE, batch_size=3, mode="eval",
                        num_workers=2, prefetch_factor=prefetch)
    blocks: set[int] = set()
    for _ in range(2):   # each batch dropped after use: the blocks are reused, none runs out
        found, used = _drop_each(data)
        _same_pixels(found, reference)
        blocks |= used
    assert data.stats["batches_outside_ring"] == 0
    assert len(blocks) < len(data) // 2   # bounded memory: far fewer blocks than batches
    held = list(data)            # all held: once the ring's slots are taken, blocks of their own
    assert 0 < data.stats["batches_outside_ring"] < len(held)
    _same_pixels(_by_key(held), reference)
    pointers = {b.images.untyped_storage().data_ptr() for b in held}
    assert len(pointers) == len(held)               # each batch owns its images


def test_a_kept_iterator_and_a_whole_pass_meanwhile_keep_their_pixels(shards):
    data = CARLAWebData(str(shards), image_size=SIZE, batch_size=3, num_workers=2,
                        mode="eval", prefetch_factor=1)
    reference = _by_key(run_epoch(shards, batch_size=3, mode="eval"))
    first = list(data)
    assert [b.keys for b in data] == [b.keys for b in first]
    kept = iter(data)
    early = [next(kept)]                            # its workers keep filling their slots
    whole = list(data)                              # meanwhile, a whole pass of its own
    early += list(kept)
    for batches in (whole, early):
        found = _by_key(batches)
        assert found.keys() == reference.keys()
        assert all(torch.equal(found[k][0], reference[k][0]) for k in found)


def test_early_stops_leave_no_ring_slot_taken(shards):
    """Breaking out of a pass drops the batches its workers had prefetched into ring slots;
    those slots must come back, or a few early stops (Lightning's limit_*_batches) would
    leave every later batch outside the ring."""
    data = CARLAWebData(str(shards), image_size=SIZE, batch_size=3, num_workers=2,
                        mode="eval", prefetch_factor=2)
    for _ in range(4):
        for batch in data:
            break
        del batch
    assert sum(1 for _ in data) == len(data)
    assert data.stats["batches_outside_ring"] == 0


def test_a_killed_worker_raises_and_the_next_pass_is_whole(shards):
    """Workers killed mid-pass: the pass raises; the next one forks new workers and gives
    every sample with its pixels, with as many in the ring as a fresh loader puts there (the
    dead pass's ring, whose last batch the error's traceback may still hold, is not reused)."""
    import os
    import signal
    kw = dict(image_size=SIZE, batch_size=3, num_workers=2, mode="eval", prefetch_factor=1)
    data, fresh = CARLAWebData(str(shards), **kw), CARLAWebData(str(shards), **kw)
    reference = _by_key(run_epoch(shards, batch_size=3, mode="eval"))
    held = list(fresh)
    list(data)
    before = set(child_pids())
    it = iter(data)
    next(it)
    workers = set(child_pids()) - before
    assert len(workers) == 2
    with pytest.raises(RuntimeError, match="(?i)worker"):
        for pid in workers:
            os.kill(pid, signal.SIGKILL)
        for _ in it:
            pass
    del it
    outside = data.stats["batches_outside_ring"]
    _same_pixels(_by_key(list(data)), reference)
    assert (data.stats["batches_outside_ring"] - outside
            == fresh.stats["batches_outside_ring"] > 0 and len(held) == len(data))
