"""adapter="tcp": batches equal TCP's own DataLoader(CARLA_Data) after default collate.

The golden (tests/golden/tcp_batches.npz) is their loader at 73cc1dd, img_aug=False, batch 4,
on synth tcp_roach routes at TCP's 900x256 (tools/golden/batches.py, not run here). Here the
same routes are synthesised again (hash checked), packed, and served with adapter="tcp" in
eval mode; every key is compared: the same kind (tensor or list), dtype and shape per batch,
values within float32 rounding (the shards store float32), images by the sha256 of their
float32 bytes (bit-identical), and the same sample set and batch composition.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from carla_wds.load import CARLAWebData

from ...helpers import make_pack
from .batch_goldens import (check_batch, read_golden, sample_id, served,
                            shared_golden_shards)

GOLDEN = Path(__file__).parents[2] / "golden" / "tcp_batches.npz"
ATOL = 2e-5   # metres and m/s: theirs float64 from JSON, ours float32 in the shards


@pytest.fixture(scope="module")
def golden():
    return read_golden(GOLDEN)


@pytest.fixture(scope="module")
def shards(golden, tmp_path_factory) -> Path:
    return shared_golden_shards(tmp_path_factory, golden[0], allow_pickle_input=True,
                                max_samples=5)


def test_tcp_batches_equal_their_dataloader(golden, shards):
    meta, arrays = golden
    data, batches = served(meta, shards, "tcp")
    seen = []
    for b, batch in enumerate(batches):
        ids = [sample_id(k) for k in batch["key"]]
        assert ids == arrays[f"b{b}/#ids"].tolist()   # the same samples in the same batches
        assert batch["valid"].all()
        seen += ids
        # exactly their keys, in their order, then the documented extra keys; every value
        check_batch(b, batch, golden, data.adapter.extra_keys, ATOL)
    assert sorted(seen) == sorted(i for b in range(len(batches)) for i in arrays[f"b{b}/#ids"])


def test_tcp_future_lists_are_per_step_targets(shards):
    """future_* are lists of pred_len (B, ...) tensors: step t of every sample, as in TCP's
    loss loop (`for i in range(pred_len)`), never the stacked (B, pred_len, ...) tensor."""
    batch = next(iter(CARLAWebData(str(shards), batch_size=4, mode="eval", adapter="tcp")))
    raw = next(iter(CARLAWebData(str(shards), batch_size=4, mode="eval", fields=["measurements"],
                                 image_size=(256, 900), brake_override=True)))
    mu = raw.measurements["future_action_mu"]          # (B, 4, 2)
    assert len(batch["future_action_mu"]) == mu.shape[1] == 4
    for t in range(4):
        assert torch.equal(batch["future_action_mu"][t], mu[:, t])


def _one_line(exc: pytest.ExceptionInfo) -> str:
    msg = str(exc.value)
    assert "\n" not in msg and "Fix:" in msg, msg
    return msg


def test_tcp_refuses_shards_without_roach_supervision(tmp_path):
    plain = make_pack(tmp_path, layout="tcp", episodes=1, frames=12)
    with pytest.raises(ValueError) as exc:
        CARLAWebData(str(plain), batch_size=2, adapter="tcp")
    msg = _one_line(exc)
    assert "layout 'tcp'" in msg and "--layout tcp_roach --allow-pickle-input" in msg


def test_tcp_refuses_another_pred_len(tmp_path):
    short = make_pack(tmp_path, layout="tcp_roach", episodes=1, frames=12, pred_len=3,
                      allow_pickle_input=True)
    with pytest.raises(ValueError) as exc:
        CARLAWebData(str(short), batch_size=2, adapter="tcp")
    assert "--pred-len 4" in _one_line(exc)


@pytest.mark.parametrize("given", [{"image_size": (256, 512)}, {"cameras": ["left"]},
                                   {"fields": ["depth"]}, {"brake_override": False},
                                   {"lidar_histogram": "garage"}])
def test_the_name_alone_sets_the_settings(shards, given):
    with pytest.raises(ValueError) as exc:
        CARLAWebData(str(shards), batch_size=2, adapter="tcp", **given)
    assert "leave" in _one_line(exc)


def test_same_settings_unknown_names_and_both_kinds(shards):
    data = CARLAWebData(str(shards), batch_size=2, adapter="tcp", image_size=(256, 900),
                        cameras=["front"])
    assert data.image_size == (256, 900) and data.fields == ("measurements",)
    with pytest.raises(ValueError, match=r"'tpc': unknown; the model-ready adapters are \[.*'tcp'"):
        CARLAWebData(str(shards), batch_size=2, adapter="tpc")
    with pytest.raises(ValueError, match="not both"):
        CARLAWebData(str(shards), batch_size=2, adapter="tcp", sample_transform=dict)


def _images(shards: Path, **kw) -> dict[str, torch.Tensor]:
    data = CARLAWebData(str(shards), batch_size=4, adapter="tcp", **kw)
    return {k: b["front_img"][i] for b in data for i, k in enumerate(b["key"])}


def test_tcp_colour_augmentation_only_with_augment(shards):
    """augment=True: TCP's `hard` augmenter (load/decode/augment.py) on the uint8 image before their
    normalisation, seeded per (seed, epoch, key); augment=False: their img_aug=False pixels."""
    plain, aug = _images(shards), _images(shards, augment=True)
    assert aug.keys() == plain.keys()
    changed = [k for k in plain if not torch.equal(plain[k], aug[k])]
    assert 0 < len(changed) < len(plain)   # their probabilities: some samples, not all
    again = _images(shards, augment=True)
    assert all(torch.equal(aug[k], again[k]) for k in aug)
