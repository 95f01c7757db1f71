"""Issue 38 Low 12 and 13: a resume checks what the checkpoint says before torch or the loader
uses it, and the first non-finite loss stops the run naming its step, with no checkpoint
written from it. Checkpoints are edited with the project's own checkpoint I/O."""
from __future__ import annotations

import math
import re
import shutil
from pathlib import Path
from typing import Any, Callable

import pytest
import torch

from carla_wds.train.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from carla_wds.train.config import load_config
from carla_wds.train.finite import NonFiniteError
from carla_wds.train.loop import run_training
from tests.train.test_loop import TINY, data, overrides  # noqa: F401 - the module fixture


@pytest.fixture(scope="module")
def trained(data, tmp_path_factory) -> Path:  # noqa: F811
    """A run_dir after one epoch, whose checkpoint the tests copy and edit."""
    torch.set_num_threads(1)
    run_dir = tmp_path_factory.mktemp("trained") / "run"
    run_training(load_config(TINY, overrides(data, run_dir, epochs=1)))
    return run_dir


def _edited(trained: Path, tmp_path: Path, edit: Callable[[dict[str, Any]], None]) -> Path:
    run_dir = tmp_path / "run"
    shutil.copytree(trained, run_dir)
    ckpt = load_checkpoint(run_dir / "checkpoint.pt")
    edit(ckpt)
    save_checkpoint(run_dir / "checkpoint.pt", ckpt)
    return run_dir


def _first_state(ckpt: dict[str, Any]) -> dict[str, Any]:
    return ckpt["optimizer"]["state"][0]


EDITS = {
    # the reported case: it trained an epoch at NaN loss and wrote a NaN checkpoint
    "lr_inf": (lambda c: c["optimizer"]["param_groups"][0].update(lr=math.inf),
               "its optimizer param_groups[0].lr is inf: expected a finite number"),
    "base_lrs_inf": (lambda c: c["scheduler"].update(base_lrs=[math.inf]),
                     "its scheduler base_lrs is inf: expected a finite number"),
    "betas": (lambda c: c["optimizer"]["param_groups"][0].update(betas=(0.9, 2.0)),
              "param_groups[0].betas is 2.0: expected a finite number from 0 to 1"),
    "moment_nan": (lambda c: _first_state(c)["exp_avg"].fill_(math.nan),
                   "its optimizer state[0].exp_avg is 'not finite'"),
    "second_moment_negative": (lambda c: _first_state(c)["exp_avg_sq"].fill_(-1.0),
                               "its optimizer state[0].exp_avg_sq is 'negative'"),
    "moment_shape": (lambda c: _first_state(c).update(exp_avg=torch.zeros(3)),
                     "its optimizer state[0].exp_avg's shape is (3,): expected"),
    "lr_lambdas": (lambda c: c["scheduler"].update(lr_lambdas=[{"__name__": "x"}]),
                   "its scheduler lr_lambdas is [{'__name__': 'x'}]: expected [null]"),
    "negative_step": (lambda c: c.update(step=-1),
                      "its step is -1: expected a whole number from 0 to"),
    "absurd_epoch": (lambda c: c.update(epoch=10 ** 12),
                     "its epoch is 1000000000000: expected a whole number from 0 to 10,000,000"),
    "nan_weight": (lambda c: next(v for v in c["model"].values()
                                  if v.is_floating_point()).fill_(math.nan),
                   "is 'not finite': expected finite numbers"),
}


@pytest.mark.parametrize("name", sorted(EDITS))
def test_a_resume_refuses_state_torch_would_take_unchecked(data, trained, tmp_path, name):  # noqa: F811
    edit, expected = EDITS[name]
    run_dir = _edited(trained, tmp_path, edit)
    before = (run_dir / "checkpoint.pt").read_bytes()
    with pytest.raises(CheckpointError) as exc:
        run_training(load_config(TINY, overrides(data, run_dir, epochs=2)))
    msg = str(exc.value)
    assert expected in msg, (expected, msg)
    assert "Fix: resume=PATH to a checkpoint.pt that carla-wds train wrote, or resume=none" in msg
    assert "\n" not in msg and len(msg) < 500, msg
    assert (run_dir / "checkpoint.pt").read_bytes() == before   # nothing trained, nothing written


@pytest.mark.parametrize("field,value,expected", [
    ("consumed", -1, "consumed=-1 is invalid: expected a whole number from 0 to"),
    ("consumed", 10 ** 9, "consumed=1000000000 is invalid: expected a whole number from 0 to "),
    ("epoch", -2, "epoch=-2 is invalid: expected a whole number from 0 to 10,000,000"),
    ("step_at_epoch_start", -5, "step_at_epoch_start=-5 is invalid"),
])
def test_a_resume_refuses_loader_counters_out_of_range(data, trained, tmp_path, field, value,  # noqa: F811
                                                       expected):
    run_dir = _edited(trained, tmp_path, lambda c: c["loader"].update({field: value}))
    with pytest.raises(ValueError, match=re.escape(expected)):
        run_training(load_config(TINY, overrides(data, run_dir, epochs=2)))


def _stopped(data: Path, run_dir: Path, **extra: Any) -> str:  # noqa: F811
    # lr 1e30: AdamW's first step moves every weight by ~1e30, and the next loss overflows
    with pytest.raises(NonFiniteError) as exc:
        run_training(load_config(TINY, overrides(data, run_dir, epochs=2, **{
            "optim.lr": 1e30, "optim.warmup_steps": 0, **extra})))
    return str(exc.value)


def test_the_first_non_finite_loss_stops_the_run_naming_its_step(data, tmp_path):  # noqa: F811
    torch.set_num_threads(1)
    msg = _stopped(data, tmp_path / "a", log_every=1)
    found = re.fullmatch(r"the training loss is (nan|inf|-inf) at epoch 0, step (\d+): training "
                         r"stops there, no checkpoint is written from it \(the last one is "
                         r"kept\)\. Fix: a lower optim.lr, .*", msg)
    assert found, msg
    step = int(found.group(2))
    assert not (tmp_path / "a" / "checkpoint.pt").exists()   # the old code wrote a NaN one
    # checked once a log window: the same step is named from inside a window of 5
    assert f"at epoch 0, step {step}:" in _stopped(data, tmp_path / "b", log_every=5)
    # a checkpoint each step: the last one written is the last finite step's
    _stopped(data, tmp_path / "c", log_every=5, ckpt_every=1)
    kept = load_checkpoint(tmp_path / "c" / "checkpoint.pt")
    assert kept["step"] == step - 1
    assert all(bool(torch.isfinite(v).all()) for v in kept["model"].values()
               if v.is_floating_point())
