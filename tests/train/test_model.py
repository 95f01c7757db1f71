from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torchvision

from carla_wds.train.frames import straight_ahead
from carla_wds.train.model import (
    PRIORS,
    VALID_BACKBONES,
    ModelConfig,
    ModelIO,
    WaypointModel,
    build_model,
)

H, W = 64, 128


def make_batch(b: int, n_cameras: int, seed: int = 0, hw: tuple[int, int] = (H, W)) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    images = torch.randn(b, n_cameras, 3, *hw, generator=g)
    speed = torch.rand(b, generator=g) * 10.0
    target = torch.randn(b, 2, generator=g) * 10.0
    command = torch.nn.functional.one_hot(torch.randint(0, 6, (b,), generator=g), 6).float()
    return images, speed, target, command


def tiny(n_cameras: int = 1, pred_len: int = 4, **kw: object) -> WaypointModel:
    return build_model(ModelConfig(backbone="tiny", feature_dim=64, **kw), n_cameras, pred_len)


@pytest.mark.parametrize("backbone", ["tiny", "resnet18"])
@pytest.mark.parametrize("n_cameras", [1, 4])
@pytest.mark.parametrize("pred_len", [4, 6])
def test_output_shape(backbone: str, n_cameras: int, pred_len: int) -> None:
    torch.manual_seed(0)
    model = build_model(ModelConfig(backbone=backbone, feature_dim=32), n_cameras, pred_len).eval()
    with torch.no_grad():
        out = model(*make_batch(2, n_cameras))
    assert out.shape == (2, pred_len, 2)
    assert out.dtype == torch.float32
    assert torch.isfinite(out).all()


def test_tiny_is_small() -> None:
    n = sum(p.numel() for p in tiny().encoder.parameters())
    assert 50_000 < n < 150_000


def trained_like(model: WaypointModel) -> WaypointModel:
    """The residual head as training leaves it: not zero (constant_velocity starts at zero)."""
    torch.nn.init.normal_(model.output.weight, std=0.1, generator=torch.Generator().manual_seed(3))
    return model


@pytest.mark.parametrize("prior", PRIORS)
def test_decoder_is_autoregressive_on_target_point(prior: str) -> None:
    torch.manual_seed(0)
    model = trained_like(tiny(pred_len=6, prior=prior)).eval()
    images, speed, target, command = make_batch(3, 1)
    with torch.no_grad():
        a = model(images, speed, target, command)
        b = model(images, speed, target + torch.tensor([5.0, -3.0]), command)
    # Every step (not just the first) must react to the target point.
    per_step = (a - b).abs().amax(dim=(0, 2))
    assert (per_step > 1e-6).all(), per_step


@pytest.mark.parametrize("prior", PRIORS)
def test_waypoints_are_the_prior_plus_cumulative_deltas(prior: str) -> None:
    torch.manual_seed(0)
    model = trained_like(tiny(pred_len=5, prior=prior)).eval()
    batch = make_batch(2, 1)
    deltas: list[torch.Tensor] = []
    hook = model.output.register_forward_hook(lambda _m, _i, o: deltas.append(o.detach()))
    with torch.no_grad():
        out = model(*batch)
    hook.remove()
    base = straight_ahead(batch[1], 5, 0.5) if prior == "constant_velocity" else 0.0
    residual = torch.cumsum(torch.stack(deltas, dim=1), dim=1)
    assert residual.abs().max() > 0.1
    assert torch.allclose(out, base + residual, atol=1e-5)


@pytest.mark.parametrize("frame,dt,ahead", [("tcp", 0.5, (0.0, -1.0)), ("garage", 0.25, (1.0, 0.0)),
                                            ("transfuser2022", 0.5, (1.0, 0.0))])
def test_untrained_constant_velocity_model_is_the_straight_line_baseline(frame, dt, ahead) -> None:
    torch.manual_seed(0)
    model = build_model(ModelConfig(backbone="tiny", feature_dim=32), 2, 4,
                        ModelIO(frame=frame, frame_dt=dt)).eval()
    images, speed, target, command = make_batch(3, 2)
    with torch.no_grad():
        out = model(images, speed, target, command)
    assert torch.equal(out, straight_ahead(speed, 4, dt, frame))
    # 4 waypoints dt apart straight ahead: the last one is speed * 4 dt along `ahead`
    offset = torch.tensor([-1.3, 0.0]) if frame == "transfuser2022" else torch.zeros(2)
    expect = speed[:, None] * 4 * dt * torch.tensor(ahead) + offset
    assert torch.allclose(out[:, -1], expect, atol=1e-5)
    # the plain formulation starts elsewhere: the equality above is the prior, not chance
    plain = build_model(ModelConfig(backbone="tiny", feature_dim=32, prior="none"), 2, 4,
                        ModelIO(frame=frame, frame_dt=dt)).eval()
    with torch.no_grad():
        assert not torch.allclose(plain(images, speed, target, command), out, atol=0.1)


@pytest.mark.parametrize("prior", PRIORS)
def test_gradient_reaches_encoder(prior: str) -> None:
    torch.manual_seed(0)
    model = tiny(n_cameras=2, prior=prior)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):   # the zero residual head lets gradients through from the 2nd step on
        opt.zero_grad()
        out = model(*make_batch(2, 2))
        (out - 1.0).square().mean().backward()
        opt.step()
    first_conv = model.encoder.features[0].weight
    assert first_conv.grad is not None and first_conv.grad.abs().sum() > 0
    assert model.measurements[0].weight.grad.abs().sum() > 0


def test_lidar_branch_and_extra_measurements_feed_the_prediction() -> None:
    torch.manual_seed(0)
    io = ModelIO(frame="garage", frame_dt=0.25, extra_dim=5, lidar_channels=1)
    model = trained_like(build_model(ModelConfig(backbone="tiny", feature_dim=32), 1, 8, io))
    images, speed, target, command = make_batch(2, 1)
    lidar, extra = torch.rand(2, 1, 64, 64), torch.randn(2, 5)
    out = model(images, speed, target, command, lidar=lidar, extra=extra)
    assert out.shape == (2, 8, 2)
    with torch.no_grad():
        assert not torch.allclose(model(images, speed, target, command, lidar=lidar * 0,
                                        extra=extra), out)
        assert not torch.allclose(model(images, speed, target, command, lidar=lidar,
                                        extra=extra + 1), out)
    out.square().mean().backward()
    assert model.lidar_encoder.features[0].weight.grad.abs().sum() > 0
    with pytest.raises(ValueError, match=r"lidar must be a \(2, 1, H, W\) histogram"):
        model(images, speed, target, command, extra=extra)
    with pytest.raises(ValueError, match=r"extra measurements must be \(2, 5\)"):
        model(images, speed, target, command, lidar=lidar, extra=extra[:, :3])
    with pytest.raises(ValueError, match="no LiDAR branch"):
        tiny()(images, speed, target, command, lidar=lidar)


def test_tiny_model_overfits_small_batch() -> None:
    torch.manual_seed(0)
    model = tiny(n_cameras=1, pred_len=4)
    # Small images keep 100 CPU steps fast; the point is the optimisation path, not vision.
    images, speed, target, command = make_batch(8, 1, seed=1, hw=(32, 64))
    g = torch.Generator().manual_seed(2)
    # Smooth forward trajectories like real data (forward is -y).
    steps = torch.arange(1, 5).float()[None, :, None]
    gt = steps * torch.cat([torch.randn(8, 1, 1, generator=g) * 0.3, -(1 + torch.rand(8, 1, 1, generator=g))], 2)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(100):
        loss = (model(images, speed, target, command) - gt).abs().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] / 5, (losses[0], losses[-1])


def test_pretrained_loading(tmp_path: Path) -> None:
    torch.manual_seed(123)
    ref = torchvision.models.resnet18(weights=None)
    path = tmp_path / "resnet18.pth"
    torch.save(ref.state_dict(), path)
    model = build_model(ModelConfig(backbone="resnet18", pretrained=str(path), feature_dim=32), 1, 4)
    ref_state = ref.state_dict()
    got = model.encoder.state_dict()
    assert set(got) == {k for k in ref_state if not k.startswith("fc.")}
    for k, v in got.items():
        assert torch.equal(v, ref_state[k]), k


def test_pretrained_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope" / "resnet34.pth"
    with pytest.raises(FileNotFoundError) as exc:
        build_model(ModelConfig(backbone="resnet34", pretrained=str(path)), 1, 4)
    msg = str(exc.value)
    assert str(path) in msg and "torch.save" in msg and "null" in msg


def test_pretrained_key_mismatch(tmp_path: Path) -> None:
    path = tmp_path / "r18.pth"
    torch.save(torchvision.models.resnet18(weights=None).state_dict(), path)
    with pytest.raises(ValueError, match=r"missing keys \[layer1\.2"):
        build_model(ModelConfig(backbone="resnet34", pretrained=str(path)), 1, 4)
    prefixed = tmp_path / "ddp.pth"
    torch.save({f"module.{k}": v for k, v in torch.load(path).items()}, prefixed)
    with pytest.raises(ValueError, match=r"unexpected keys \[module\."):
        build_model(ModelConfig(backbone="resnet18", pretrained=str(prefixed)), 1, 4)


def test_pretrained_not_a_state_dict(tmp_path: Path) -> None:
    tensor_file = tmp_path / "tensor.pth"
    torch.save(torch.zeros(3), tensor_file)
    with pytest.raises(ValueError, match="does not contain a state_dict"):
        build_model(ModelConfig(backbone="resnet18", pretrained=str(tensor_file)), 1, 4)
    garbage = tmp_path / "garbage.pth"
    garbage.write_bytes(b"definitely not a checkpoint")
    with pytest.raises(ValueError, match="garbage.pth"):
        build_model(ModelConfig(backbone="resnet18", pretrained=str(garbage)), 1, 4)


def test_pretrained_with_tiny_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="tiny"):
        build_model(ModelConfig(backbone="tiny", pretrained=str(tmp_path / "x.pth")), 1, 4)


def test_unknown_backbone_lists_valid() -> None:
    with pytest.raises(ValueError) as exc:
        build_model(ModelConfig(backbone="vit_b_16"), 1, 4)
    for name in VALID_BACKBONES:
        assert name in str(exc.value)


def test_bad_input_shape_is_explained() -> None:
    model = tiny(n_cameras=2)
    images, speed, target, command = make_batch(2, 3)
    with pytest.raises(ValueError, match=r"\(B, 2, 3, H, W\)"):
        model(images, speed, target, command)


@pytest.mark.parametrize("backbone", ["tiny", "resnet18"])
def test_channels_last_bf16_autocast(backbone: str) -> None:
    torch.manual_seed(0)
    model = build_model(ModelConfig(backbone=backbone, feature_dim=32), 2, 4)
    model = model.to(memory_format=torch.channels_last).eval()
    batch = make_batch(2, 2)
    with torch.no_grad():
        ref = model(*batch)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(*batch)
    assert out.shape == (2, 4, 2)
    assert out.dtype == torch.float32  # waypoints are accumulated in fp32
    assert torch.isfinite(out).all()
    assert torch.allclose(out, ref, atol=0.1 + 0.05 * ref.abs().max().item())


def test_bf16_autocast_backward() -> None:
    torch.manual_seed(0)
    model = tiny(n_cameras=2).to(memory_format=torch.channels_last)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(*make_batch(2, 2))
    out.float().square().mean().backward()
    assert model.encoder.features[0].weight.grad is not None
