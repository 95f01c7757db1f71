"""The shipped garage_tiny config end to end: a synthetic carla_garage pack with LiDAR, trained
on two DDP ranks (forked by tests/ranks.py) with the LiDAR BEV branch and the route as an extra
input, scored with TCP's controller against the expert's controls."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from carla_wds.load import CARLAWebData
from carla_wds.pack.packer import PackOptions, pack
from carla_wds.pack.synth import synth_dataset
from carla_wds.train.checkpoint import load_checkpoint
from carla_wds.train.config import ConfigError, config_from_dict, load_config
from carla_wds.train.inputs import loader_options, model_for, predict
from carla_wds.train.loop import run_training
from tests.ranks import run_module


@pytest.fixture(scope="module")
def garage(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("garage")
    for split, episodes, seed in (("train", 3, 0), ("val", 1, 1)):
        synth_dataset(root / "raw" / split, "garage", episodes=episodes, frames=26, seed=seed,
                      image_size=(64, 160), progress=False)
        pack(root / "raw" / split, root / split, PackOptions(layout="garage", max_samples=12,
                                                             progress=False))
    return root


def garage_args(root: Path, run_dir: Path, **extra) -> list[str]:
    items = {"run_dir": str(run_dir), "data.train": str(root / "train"),
             "data.val": str(root / "val"), "data.batch_size": 4, "data.eval_batch_size": 4,
             "epochs": 2, "eval_every": 1, "log_every": 1, "show_samples": 2,
             "optim.warmup_steps": 2, **extra}
    return [f"{k}={v}" for k, v in items.items()]


@pytest.mark.ddp
def test_garage_tiny_trains_under_torchrun_x2_with_lidar(garage, tmp_path):
    run_dir = tmp_path / "run"
    out = run_module("carla_wds.train", "--config", "garage_tiny",
                     *garage_args(garage, run_dir), timeout=600).stdout
    assert "TCP's PID controller vs the expert's controls" in out
    summary = json.loads((run_dir / "summary.json").read_text())
    r0, r1 = summary["ranks"]
    assert summary["world_size"] == 2 and r0["steps"] == r1["steps"] > 0
    assert r0["param_sum"] == r1["param_sum"]
    val = summary["val"]
    assert val["n_controls"] == val["n"] > 0
    for name in ("ade", "fde", "steer_mae", "throttle_mae", "brake_mae"):
        assert 0 <= val[name] < 10 and 0 <= val[f"baseline_{name}"] < 10, name
    # the LiDAR branch was trained and the prediction depends on the histogram it gets
    ckpt = load_checkpoint(run_dir / "checkpoint.pt")
    cfg = config_from_dict(ckpt["config"])
    assert cfg.model.lidar == "garage" and cfg.model.measurements == ["route"]
    data = CARLAWebData(str(garage / "val"), batch_size=4, mode="eval", image_size=(64, 160),
                        rank=0, world_size=1, **loader_options(cfg.model))
    model = model_for(cfg, data)
    model.load_state_dict(ckpt["model"])
    batch = next(iter(data))
    assert batch.lidar.shape == (4, 1, 256, 256) and batch.lidar.sum() > 0
    with torch.no_grad():
        pred = predict(model.eval(), batch)
        batch.lidar = torch.zeros_like(batch.lidar)
        assert not torch.allclose(predict(model, batch), pred)
    # garage waypoints point forward along +x: the prediction does too
    assert (pred[batch.valid][:, -1, 0] > 0).all()


@pytest.mark.parametrize("edit,expected", [
    ({"model.measurements": "[route,nope]"}, ["model.measurements: ['nope'] not in",
                                             "route", "target_speed"]),
    ({"model.measurements": "[]", "data.train": "{tf4}", "data.val": "{tf4}"},
     ["model.lidar=garage", "holds no LiDAR", "model.lidar=null"]),
])
def test_inputs_the_shards_lack_are_one_line_errors(garage, tmp_path, edit, expected):
    tf4 = garage / "train_tf4"
    if not tf4.exists():
        synth_dataset(garage / "raw_tf4", "transfuser4", episodes=1, frames=12, seed=0,
                      image_size=(48, 64), progress=False)
        pack(garage / "raw_tf4", tf4, PackOptions(layout="transfuser4", progress=False))
    edit = {k: v.format(tf4=tf4) for k, v in edit.items()}
    cfg = load_config("garage_tiny", garage_args(garage, tmp_path / "run", **{
        "data.num_workers": 0, **edit}))
    with pytest.raises(ConfigError) as exc:
        run_training(cfg)
    for text in expected:
        assert text in str(exc.value)
