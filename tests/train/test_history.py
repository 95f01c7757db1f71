"""The trainer's history windows (issue 27): data.history=K in the typed config, the bundled
model pooling its past frames' features (masked by frame_valid), two DDP ranks (forked by
tests/ranks.py), and checkpoints that refuse a resume with another history."""
from __future__ import annotations

import json

import pytest
import torch

from carla_wds.load import CARLAWebData
from carla_wds.train.checkpoint import CheckpointError, load_checkpoint
from carla_wds.train.config import ConfigError, load_config
from carla_wds.train.inputs import current_frame, predict
from carla_wds.train.loop import run_training
from carla_wds.train.model import ModelConfig, ModelIO, Past, build_model
from tests.ranks import run_module
from tests.train.test_loop import TINY, data, overrides  # noqa: F401 - the module fixture
from tests.train.test_model import H, W, make_batch


def test_history_settings_are_typed_and_checked():
    cfg = load_config(TINY, ["data.history=3", "data.history_stride=2"])
    assert (cfg.data.history, cfg.data.history_stride) == (3, 2)
    assert (load_config(TINY).data.history, load_config(TINY).data.history_stride) == (0, 1)
    with pytest.raises(ConfigError, match=r"data.history=-1 is invalid \(out of range\): "
                                          r"expected an integer >= 0.*Fix: e.g. data.history=0"):
        load_config(TINY, ["data.history=-1"])
    with pytest.raises(ConfigError, match=r"data.history_stride=0 is invalid.*integer >= 1"):
        load_config(TINY, ["data.history_stride=0"])
    with pytest.raises(ConfigError, match=r"data.history: expected an integer, got '2.5'"):
        load_config(TINY, ["data.history=2.5"])
    with pytest.raises(ConfigError, match=r"unknown config key data.histroy; valid keys here: "
                                          r".*data.history, data.history_stride"):
        load_config(TINY, ["data.histroy=3"])


def _past(b: int, k: int, n: int, seed: int = 1) -> Past:
    g = torch.Generator().manual_seed(seed)
    return Past(images=torch.randn(b, k, n, 3, H, W, generator=g),
                speed=torch.rand(b, k, generator=g) * 10,
                valid=torch.tensor([[True, True], [False, True], [False, False]]))


def test_model_with_history_pools_only_the_valid_past_frames():
    torch.manual_seed(0)
    model = build_model(ModelConfig(backbone="tiny", feature_dim=32, prior="none"), 2, 4,
                        ModelIO(history=2)).eval()   # eval: BatchNorm keeps rows independent
    images, speed, target, command = make_batch(3, 2)
    past = _past(3, 2, 2)
    with torch.no_grad():
        out = model(images, speed, target, command, past=past)
        moved = model(images, speed, target, command,
                      past=past._replace(images=past.images + torch.tensor([0.0, 1.0])
                                         .view(1, 2, 1, 1, 1, 1)))
        padding = past.images.clone()
        padding[~past.valid] += 5.0     # only padding steps change
        ignored = model(images, speed, target, command, past=past._replace(
            images=padding, speed=past.speed + (~past.valid) * 3.0))
    assert out.shape == (3, 4, 2)
    assert not torch.allclose(moved[:2], out[:2])     # a real past frame feeds the prediction
    assert torch.equal(moved[2], out[2])              # no real past frame: nothing changes
    assert torch.allclose(ignored, out, atol=1e-6)    # padding steps are masked out
    model.train()
    model(images, speed, target, command, past=past).square().mean().backward()
    assert model.past_frames.weight.grad.abs().sum() > 0
    with pytest.raises(ValueError, match=r"history=2.*past=Past\(images \(3, 2, 2, 3, H, W\)"):
        model(images, speed, target, command)
    with pytest.raises(ValueError, match=r"history=0.*got past frames"):
        build_model(ModelConfig(backbone="tiny", feature_dim=32), 2, 4)(
            images, speed, target, command, past=past)


def test_a_model_without_history_is_unchanged():
    """history=0 builds exactly the parameters it built before issue 27 (old checkpoints load)."""
    torch.manual_seed(0)
    names = set(build_model(ModelConfig(backbone="tiny", feature_dim=32), 1, 4).state_dict())
    assert not any(n.startswith(("past_", "step_")) for n in names)
    torch.manual_seed(0)
    windowed = set(build_model(ModelConfig(backbone="tiny", feature_dim=32), 1, 4,
                               ModelIO(history=3)).state_dict())
    assert names < windowed


def test_predict_and_loss_inputs_on_a_windowed_batch(data):  # noqa: F811
    """predict() feeds the whole window; current_frame() is the batch of each window's own
    frame, the same values a history=0 loader serves for those samples."""
    kw = dict(batch_size=5, mode="eval", num_workers=0, image_size=(32, 48))
    plain = next(iter(CARLAWebData(str(data / "val"), **kw)))
    window = next(iter(CARLAWebData(str(data / "val"), history=2, history_stride=2, **kw)))
    now = current_frame(window)
    assert now.keys == plain.keys and now.frame_valid is None
    for name in ("images", "speed", "target_point", "command", "waypoints", "valid"):
        assert torch.equal(getattr(now, name), getattr(plain, name)), name
    cfg = ModelConfig(backbone="tiny", feature_dim=32, prior="none")
    torch.manual_seed(0)
    model = build_model(cfg, plain.images.shape[1], plain.waypoints.shape[1],
                        ModelIO(history=2)).eval()
    assert predict(model, window).shape == plain.waypoints.shape
    assert current_frame(plain) is plain


@pytest.mark.ddp
def test_torchrun_two_ranks_train_with_history(data, tmp_path):  # noqa: F811
    run_dir = tmp_path / "ddp"
    args = overrides(data, run_dir, epochs=2, **{"data.history": 2, "data.num_workers": 1})
    run_module("carla_wds.train", "--config", TINY, *args, timeout=400)
    summary = json.loads((run_dir / "summary.json").read_text())
    r0, r1 = summary["ranks"]
    assert summary["world_size"] == 2 and summary["val"]["n"] == 20   # every val sample once
    assert r0["steps"] == r1["steps"] == 2 * ((60 // 2) // 8)
    assert r0["param_sum"] == r1["param_sum"] and r0["param_sumsq"] == r1["param_sumsq"]
    assert load_checkpoint(run_dir / "checkpoint.pt")["config"]["data"]["history"] == 2
    assert (run_dir / "predictions.png").is_file()   # show() reads the history checkpoint


def test_resume_with_another_history_is_refused(data, tmp_path):  # noqa: F811
    run_dir = tmp_path / "run"
    torch.set_num_threads(1)
    run_training(load_config(TINY, overrides(data, run_dir, epochs=1, **{"data.history": 1})))
    for changed in ({}, {"data.history": 3}, {"data.history": 1, "data.history_stride": 2}):
        with pytest.raises(CheckpointError, match=r"trained with data.history=1, "
                                                  r"data.history_stride=1.*Fix: pass "
                                                  r"data.history=1 data.history_stride=1, or "
                                                  r"resume=none"):
            run_training(load_config(TINY, overrides(data, run_dir, epochs=2, **changed)))
    run_training(load_config(TINY, overrides(data, run_dir, epochs=2, **{"data.history": 1})))


def test_history_model_under_channels_last_bf16_autocast():
    """The GPU path's settings (channels_last, bf16 autocast) on the CPU: the past features
    (bf16 from the encoder) and the fp32 step embedding mix without a dtype error, and the
    result stays close to fp32's."""
    torch.manual_seed(0)
    model = build_model(ModelConfig(backbone="tiny", feature_dim=32, prior="none"), 2, 4,
                        ModelIO(history=2)).to(memory_format=torch.channels_last)
    batch, past = make_batch(3, 2), _past(3, 2, 2)
    with torch.no_grad():
        ref = model.eval()(*batch, past=past)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(*batch, past=past)
    assert out.dtype == torch.float32 and torch.isfinite(out).all()
    assert torch.allclose(out, ref, atol=0.1 + 0.05 * ref.abs().max().item())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model.train()(*batch, past=past).float().square().mean().backward()
    assert model.step_embedding.grad is not None
