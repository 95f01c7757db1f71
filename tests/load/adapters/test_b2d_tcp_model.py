"""adapter="b2d_tcp": batches equal Bench2DriveZoo's TCP port's own DataLoader(CARLA_Data) after
default collate.

The golden (tests/golden/bench2drive_tcp_batches.npz) is their loader at 31278ff (tcp/admlp),
img_aug=False, batch 3, on synth bench2drive clips at B2D's 1600x900 (tools/golden/
b2d_tcp_batches.py, not run here). Here the same clips are synthesised again (hash checked),
packed with --stride 1 --expert-pairing tcp_port and served with adapter="b2d_tcp" in eval
mode; every key is compared: the same kind (tensor or list), dtype and shape, values within
float32 rounding (the shards store float32), front_img by the sha256 of its float32 bytes, and
the same sample set and batch composition. Their last batch is short; ours is padded to the
batch size with rows marked valid=False, so the valid rows are compared.
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from carla_wds.load import CARLAWebData
from carla_wds.load.adapters.b2d_tcp import CAMERA_HW, CAMERAS, stitch
from carla_wds.load.adapters.tcp import tcp_image
from carla_wds.load.decode.augment import hard
from carla_wds.load.decode.transform import sample_rng
from carla_wds.pack import PackOptions, pack
from carla_wds.pack.synth import synth_dataset
from tools.golden.common import tree_sha256

from ...helpers import SCRIPTS, all_keys, built_once
from ...ranks import run_script
from .batch_goldens import check_batch, read_golden, served

GOLDEN = Path(__file__).parents[2] / "golden" / "bench2drive_tcp_batches.npz"
ATOL = 2e-5   # metres and m/s: theirs float64 from JSON, ours float32 in the shards
PORT = {"stride": 1, "expert_pairing": "tcp_port"}


def _b2d(root: Path, pack_options: dict, *, episodes: int = 1, frames: int = 28,
         seed: int = 5, image_size=(36, 64)) -> Path:
    synth_dataset(root / "raw", "bench2drive", episodes=episodes, frames=frames, seed=seed,
                  image_size=image_size, progress=False)
    pack(root / "raw" / "v1", root / "shards",
         PackOptions.of(layout="bench2drive", progress=False, **pack_options))
    return root / "shards"


@pytest.fixture(scope="module")
def golden():
    return read_golden(GOLDEN)


@pytest.fixture(scope="module")
def shards(golden, tmp_path_factory) -> Path:
    meta, _ = golden
    synth, root = meta["synth"], tmp_path_factory.mktemp("b2d_tcp_model")
    out = _b2d(root, PORT, episodes=synth["episodes"], frames=synth["frames"],
               seed=synth["seed"], image_size=tuple(synth["image_size"]))
    assert tree_sha256(root / "raw") == meta["raw_sha256"], (
        f"synth no longer writes the golden's clips; regenerate: {meta['regenerate']}")
    return out


def _ident(key: str) -> str:
    clip, frame = key.rsplit("__", 1)
    return f"{clip}/{int(frame)}"


# their bilinear resize (F.interpolate) gives other last bits on 1 intra-op thread than on
# 2, and `.byte()` truncates some to another grey level: the golden, and this test's flat
# values, hold for 2 threads (their loader in-process on a 2-core machine)
@pytest.mark.torch_threads(2)
def test_b2d_tcp_batches_equal_their_dataloader(golden, shards):
    meta, arrays = golden
    data, batches = served(meta, shards, "b2d_tcp")
    seen = []
    for b, batch in enumerate(batches):
        ids = arrays[f"b{b}/#ids"].tolist()
        n = len(ids)
        assert batch["valid"].tolist() == [True] * n + [False] * (meta["batch_size"] - n)
        assert [_ident(k) for k in batch["key"][:n]] == ids   # same samples, same batches
        seen += ids
        # exactly their keys, in their order, then the documented extra keys; the valid rows
        check_batch(b, batch, golden, data.adapter.extra_keys, ATOL, n)
    assert len(seen) == len(set(seen)) == len(all_keys(shards))


def test_future_lists_are_the_expert_files_per_step(shards):
    """future_feature / future_action_index are lists of pred_len (B, ...) tensors: step k of
    every sample (the expert file t + 5(k + 1)), as the port's loss loop reads them."""
    batch = next(iter(CARLAWebData(str(shards), batch_size=3, mode="eval", adapter="b2d_tcp")))
    raw = next(iter(CARLAWebData(str(shards), batch_size=3, mode="eval", image_size=(36, 64),
                                 fields=["measurements", "future_expert_feature"])))
    feature, action = raw.fields["future_expert_feature"], raw.measurements["future_expert_action"]
    assert len(batch["future_feature"]) == len(batch["future_action_index"]) == 4
    for k in range(4):
        assert torch.equal(batch["future_feature"][k], feature[:, k])
        assert torch.equal(batch["future_action_index"][k], action[:, k].long())


# their bilinear resize (F.interpolate) gives other last bits on 1 intra-op thread than on
# 2, and `.byte()` truncates some to another grey level: the golden, and this test's flat
# values, hold for 2 threads (their loader in-process on a 2-core machine)
@pytest.mark.torch_threads(2)
def test_stitch_is_their_three_crops_resized():
    """Formula: front_left[:, :1400] | front[:, 200:1400] | front_right[:, 200:] is 4000
    columns; at 900 output columns the left crop ends near 1400 / 4000 * 900 = 315 and the
    front crop near 2600 / 4000 * 900 = 585; each flat part keeps its value, 256 rows."""
    flat = [np.full((900, 1600, 3), v, np.uint8) for v in (10, 20, 30)]
    out = stitch(*flat)
    assert out.shape == (256, 900, 3) and out.dtype == np.uint8
    assert (out[:, :314] == 10).all() and (out[:, 316:584] == 20).all()
    assert (out[:, 586:] == 30).all()
    ramp = np.broadcast_to(np.linspace(0, 255, 1600, dtype=np.float32).astype(np.uint8)[
        None, :, None], (900, 1600, 3)).copy()
    # a smooth ramp: bilinear then .byte() truncates, so never above the source's values
    assert stitch(ramp, ramp, ramp).max() <= 255 and stitch(ramp, ramp, ramp)[0, 0, 0] == 0


def _one_line(exc: pytest.ExceptionInfo) -> str:
    msg = str(exc.value)
    assert "\n" not in msg and "Fix:" in msg and "--expert-pairing tcp_port" in msg, msg
    return msg


@pytest.mark.parametrize("options, says", [
    ({}, "--stride 5 (needs 1), expert file offset -1 (needs 0)"),
    ({"stride": 1}, "expert file offset -1 (needs 0)"),
    ({**PORT, "sensors": ("lidar",)}, "lack the record fields ['expert_value'"),
    ({**PORT, "handedness": "right"}, "--handedness 'right' (needs 'left')"),
    ({**PORT, "future_labels": "masked"}, "--future-labels 'masked' (its waypoints past")])
def test_refuses_shards_packed_otherwise(tmp_path, small, options, says):
    # small's clips (synthesised once for the module), packed here with these options
    pack(small.parent / "raw" / "v1", tmp_path / "shards",
         PackOptions.of(layout="bench2drive", progress=False, **options))
    with pytest.raises(ValueError) as exc:
        CARLAWebData(str(tmp_path / "shards"), batch_size=2, adapter="b2d_tcp")
    assert says in _one_line(exc)


def test_refuses_another_layout(packed_tcp):
    with pytest.raises(ValueError) as exc:   # the session's tcp pack, read only
        CARLAWebData(str(packed_tcp), batch_size=2, adapter="b2d_tcp")
    assert "layout 'tcp'; it needs bench2drive" in _one_line(exc)


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    """2 clips packed for the port, built once per session and read only by this module,
    test_history_adapter and test_digests (which import this fixture)."""
    return built_once(("b2d_tcp_small", str(tmp_path_factory.getbasetemp())),
                      lambda: _b2d(tmp_path_factory.mktemp("b2d_tcp_small"), PORT, episodes=2,
                                   frames=29).parent, "Bench2Drive clips and pack") / "shards"


@pytest.mark.parametrize("given", [{"image_size": (256, 900)}, {"cameras": ["front"]},
                                   {"fields": ["measurements"]}])
def test_the_name_alone_sets_the_settings(small, given):
    with pytest.raises(ValueError) as exc:
        CARLAWebData(str(small), batch_size=2, adapter="b2d_tcp", **given)
    assert "leave" in str(exc.value) and "\n" not in str(exc.value)


def _images(shards: Path, global_step: int = 0, **kw) -> dict[str, torch.Tensor]:
    data = CARLAWebData(str(shards), batch_size=2, adapter="b2d_tcp", **kw)
    data.set_epoch(0, global_step=global_step)
    return {k: b["front_img"][i] for b in data for i, k in enumerate(b["key"])}


def test_colour_augmentation_only_with_augment(small):
    """augment=True: the port's `hard` augmenter (TCP/augment.py, load/decode/augment.py at the ramp's
    start) on the stitched uint8 256x900 image, as their loader runs it, seeded from the
    sample's generator (seed, epoch, key): recomputed here from the plain cameras; the loader's
    own per-camera augmenter stays off. augment=False: the plain stitch."""
    plain, aug = _images(small), _images(small, augment=True)
    assert aug.keys() == plain.keys()
    changed = [k for k in plain if not torch.equal(plain[k], aug[k])]
    assert changed   # their frequency at the ramp's start is 0.05 per step: some samples
    stitched, want = _recomputed(small, 0)   # the ramp's start: global step 0
    for key in plain:
        assert torch.equal(plain[key], stitched[key])
        assert torch.equal(aug[key], want[key]), key


def _recomputed(small: Path, iteration: int) -> tuple[dict, dict]:
    """key -> their plain front_img, and -> their `hard(iteration)` one, seeded from the
    sample's generator: recomputed from the plain cameras the loader decodes."""
    raw = CARLAWebData(str(small), batch_size=2, mode="eval", cameras=list(CAMERAS),
                       image_size=CAMERA_HW)
    seed = CARLAWebData(str(small), batch_size=2, adapter="b2d_tcp").seed
    plain, augmented = {}, {}
    for batch in raw:
        for i, key in enumerate(batch.keys):
            image = stitch(*batch.images[i].permute(0, 2, 3, 1).numpy())
            augmenter = hard(iteration)
            augmenter.seed_(int(sample_rng(seed, 0, key).integers(2 ** 31)))
            plain[key], augmented[key] = tcp_image(image), tcp_image(augmenter(image=image))
    return plain, augmented


@pytest.mark.ddp
def test_a_model_with_their_contract_trains_under_torchrun(tmp_path):
    """CARLADataModule(adapter="b2d_tcp"): a model reading the batch as the port's train.py
    does trains (all 7 losses finite) and validates under DDP (2 ranks, gloo); validation
    covers every val sample once, with equal batch counts and finite padding rows."""
    pytest.importorskip("pytorch_lightning")
    train = _b2d(tmp_path / "train", PORT, episodes=2, frames=29, seed=3)
    val = _b2d(tmp_path / "val", PORT, episodes=1, frames=29, seed=4)
    proc = run_script(str(SCRIPTS / "b2d_tcp_contract_fit.py"), str(train), str(val),
                      str(tmp_path))
    assert isinstance(proc, subprocess.CompletedProcess)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for r in ranks:
        assert r["contract"] and all(r["contract"])
        assert len(r["train_keys"]) == r["len"] > 0
        assert r["losses"] and all(len(step) == 7 and all(step) for step in r["losses"])
        assert r["val_losses"] and all(abs(v) < float("inf") for v in r["val_losses"])
    assert ranks[0]["val_batches"] == ranks[1]["val_batches"]
    val_keys = ranks[0]["val_keys"] + ranks[1]["val_keys"]
    assert sorted(val_keys) == sorted(all_keys(val))
    assert len(val_keys) < 2 * 2 * ranks[0]["val_batches"]   # so padding rows were validated


def test_the_augmentation_ramp_follows_the_global_step(small):
    """The port's augmenter ramps with training (TCP's formulas): at global step 16e6 (batch 2,
    one rank: 32e6 images seen, iteration 1e6) every sample is augmented at that strength, as
    recomputed here; the ramp's position comes from the trainer's step like the loader's own
    augmenter (theirs counts each worker copy's reads)."""
    from carla_wds.load.decode.augment import image_iteration
    step = 16_000_000
    plain, aug = _images(small), _images(small, global_step=step, augment=True)
    assert all(not torch.equal(plain[k], aug[k]) for k in plain)   # frequency 1 by then
    _, want = _recomputed(small, image_iteration(step, 2, 1))
    assert all(torch.equal(aug[key], want[key]) for key in aug)
