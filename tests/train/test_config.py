"""Config values are checked when the config is loaded, against the rule declared next to each
field; every error names the dotted key, the value, what is valid and the fix."""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import typing
from pathlib import Path

import pytest
import torch

from carla_wds.train.config import (
    CONFIG_DIR,
    ConfigError,
    TrainConfig,
    check_runtime,
    config_from_dict,
    load_config,
    to_dict,
)
from carla_wds.train.loop import run_training
from carla_wds.train.model import VALID_BACKBONES
from carla_wds.train.settings import as_override, fields_with_rules

ROOT = Path(__file__).resolve().parents[2]
TINY = str(CONFIG_DIR / "tiny.yaml")


@pytest.mark.parametrize("override,expected", [
    ("log_every=0", ["log_every=0", "integer >= 1", "Fix: e.g. log_every=10 (the default)"]),
    ("eval_every=0", ["eval_every=0", "integer >= 1", "last epoch is always evaluated"]),
    ("data.image_size=[0,0]", ["data.image_size=[0, 0]", "list of 2 integers >= 1",
                               "Fix: e.g. data.image_size=[64, 128]"]),
    ("data.image_size=[64]", ["data.image_size=[64]", "1 items, not 2"]),
    ("data.batch_size=0", ["data.batch_size=0", "integer >= 1", "data.batch_size=16"]),
    ("ckpt_every=-1", ["ckpt_every=-1", "integer >= 0"]),
    ("data.shuffle_buffer=-5", ["data.shuffle_buffer=-5", "integer >= 0"]),
    ("device=tpu", ["device=tpu", "one of auto, cpu, cuda", "Fix: e.g. device=auto"]),
    ("data.cameras=[front,front]", ["data.cameras=", "front repeated", "distinct",
                                    "data.cameras=null"]),
    ("data.cameras=[]", ["data.cameras=[]", "it is empty"]),
    ("optim.schedule=linear", ["optim.schedule=linear", "one of cosine, step"]),
    ("resume=Auto", ["resume=Auto", "did you mean auto?", "or the path of a file"]),
    ("model.backbone=vit_b_16", ["model.backbone=vit_b_16", "one of " + ", ".join(VALID_BACKBONES),
                                 "Fix: e.g. model.backbone=resnet34"]),
    ("model.dropout=1", ["model.dropout=1.0", ">= 0 and < 1"]),
    ("epochs=0", ["epochs=0", "integer >= 1"]),
    ("data.on_error=ignore", ["data.on_error=ignore", "one of raise, skip"]),
    ("optim.gamma=2", ["optim.gamma=2.0", "> 0 and <= 1"]),
    ("epochs=many", ["epochs: expected an integer, got 'many'", "Fix: e.g. epochs=4"]),
    ("data.image_size=[0,0", ["override 'data.image_size=[0,0': not valid YAML"]),
    ("data=3", ["data: expected a mapping", "data.KEY=VALUE"]),
    ("model.prior=linear", ["model.prior=linear", "one of constant_velocity, none",
                            "Fix: e.g. model.prior=constant_velocity"]),
    ("model.lidar=velodyne", ["model.lidar=velodyne", "one of garage, transfuser2022, or null",
                              "model.lidar=null"]),
    ("model.measurements=[route,route]", ["model.measurements=", "route repeated"]),
    # .inf and .nan pass every bound (`gt=0`) and trained at NaN loss into a NaN checkpoint
    ("optim.lr=.inf", ["optim.lr=Infinity", "not a finite number", "optim.lr=0.001"]),
    ("optim.lr=.nan", ["optim.lr=NaN", "not a finite number"]),
    ("optim.grad_clip=.inf", ["optim.grad_clip=Infinity", "not a finite number"]),
    ("data.frame_dt=-.inf", ["data.frame_dt=-Infinity", "not a finite number"]),
])
def test_bad_value_names_key_value_valid_and_fix(override, expected):
    with pytest.raises(ConfigError) as exc:
        load_config(TINY, [override])
    msg = str(exc.value)
    assert "\n" not in msg and "Fix" in msg, msg
    for part in expected:
        assert part in msg, (part, msg)


def test_cross_field_rules():
    with pytest.raises(ConfigError, match="eval_only=true with resume=none.*Fix: resume=auto"):
        load_config(TINY, ["eval_only=true", "resume=none"])
    with pytest.raises(ConfigError, match="model.pretrained: .*not backbone tiny.*Fix"):
        load_config(TINY, ["model.pretrained=r18.pth"])


def _bad_values(rule, tp) -> list:
    """Values the rule must refuse, made from the rule itself."""
    item = typing.get_args(tp)[0] if typing.get_origin(tp) is list else None
    if any(typing.get_origin(a) is list for a in typing.get_args(tp)):
        item = str
    bad = []
    for bound, step in ((rule.ge, -1), (rule.gt, 0), (rule.le, 1), (rule.lt, 0)):
        if bound is not None:
            bad.append(bound + step if bound + step != bound or step else bound)
    if rule.choices:
        bad.append("bogus" if not rule.or_path else rule.choices[0].upper())
    if item is not None:
        bad = [[b, b] if rule.length == 2 else [b] for b in bad]
        if rule.length:
            bad.append([1] * (rule.length + 1))
        if rule.nonempty:
            bad.append([])
        if rule.unique:
            bad.append(["front", "front"])
    elif rule.nonempty and tp in (str, str | None):
        bad.append("")
    return bad


def _walk(obj, prefix=""):
    for f, tp, rule in fields_with_rules(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            yield from _walk(value, prefix + f.name + ".")
        else:
            yield prefix + f.name, tp, rule


def test_every_declared_rule_refuses_what_it_declares():
    """Generated from the declarations: a new rule is covered without a new test."""
    validated = 0
    for key, tp, rule in _walk(TrainConfig()):
        for bad in _bad_values(rule, tp):
            data = to_dict(TrainConfig())
            section = data
            *parents, name = key.split(".")
            for p in parents:
                section = section[p]
            section[name] = bad
            with pytest.raises(ConfigError) as exc:
                config_from_dict(data)
            assert str(exc.value).startswith(key), (key, bad, str(exc.value))
            assert "Fix" in str(exc.value), str(exc.value)
            validated += 1
    assert validated >= 30, validated


def test_defaults_and_shipped_configs_are_valid():
    config_from_dict(to_dict(TrainConfig()))
    for path in sorted((CONFIG_DIR).glob("*.yaml")):
        load_config(path)


def test_checkpoint_config_is_validated_too():
    data = to_dict(TrainConfig())
    data["log_every"] = 0
    with pytest.raises(ConfigError, match="log_every=0"):
        config_from_dict(data)


def test_programmatic_config_is_checked_before_run_dir_exists(tmp_path):
    run_dir = tmp_path / "run"
    cfg = TrainConfig(run_dir=str(run_dir), log_every=0)
    with pytest.raises(ConfigError, match="log_every=0"):
        run_training(cfg)
    assert not run_dir.exists()


def test_missing_resume_path_is_an_error_before_run_dir_exists(tmp_path):
    run_dir, missing = tmp_path / "run", tmp_path / "nope" / "checkpoint.pt"
    cfg = load_config(TINY, [f"run_dir={run_dir}", f"resume={missing}"])
    with pytest.raises(ConfigError, match=f"resume={missing}: no such checkpoint file.*Fix"):
        run_training(cfg)
    assert not run_dir.exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_device_cuda_without_cuda_is_a_one_line_error(tmp_path):
    run_dir = tmp_path / "run"
    with pytest.raises(ConfigError, match="device=cuda, but .* no CUDA device.*Fix: device=cpu"):
        check_runtime(load_config(TINY, ["device=cuda"]))
    proc = subprocess.run([sys.executable, "-m", "carla_wds.train", "--config", TINY,
                           f"run_dir={run_dir}", "device=cuda"], capture_output=True, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: device=cuda, but") and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not run_dir.exists()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_device_cuda_beyond_the_visible_gpus_is_an_error(monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", str(torch.cuda.device_count()))
    with pytest.raises(ConfigError, match="device=cuda, but this process .LOCAL_RANK"):
        check_runtime(load_config(TINY, ["device=cuda"]))


def test_as_override_round_trips_through_load_config():
    cfg = load_config(TINY, [f"data.image_size={as_override([16, 32])}",
                             f"data.cameras={as_override(None)}",
                             f"data.verify={as_override(True)}"])
    assert cfg.data.image_size == [16, 32] and cfg.data.cameras is None and cfg.data.verify


def test_numbers_with_an_exponent_and_no_dot_are_numbers():
    """The README's `optim.lr=3e-4` was refused: PyYAML (YAML 1.1) reads 3e-4 as a string.
    In a float setting it is the number; an integer setting still refuses it."""
    cfg = load_config(TINY, ["optim.lr=3e-4", "optim.weight_decay=1E-5"])
    assert (cfg.optim.lr, cfg.optim.weight_decay) == (3e-4, 1e-5)
    with pytest.raises(ConfigError, match="optim.lr: expected a number, got '3e'"):
        load_config(TINY, ["optim.lr=3e"])
    with pytest.raises(ConfigError, match="epochs: expected an integer"):
        load_config(TINY, ["epochs=1e3"])
