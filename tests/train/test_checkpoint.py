"""Checkpoints written before the model had a prior: read as TCP's plain deltas (prior none),
and a resume that would read them as residuals is refused in the config's words."""
from __future__ import annotations

import pytest
import torch

from carla_wds.train.checkpoint import CheckpointError, load_checkpoint, stored_config
from carla_wds.train.config import load_config
from carla_wds.train.loop import run_training
from carla_wds.train.show import show
from tests.train.test_loop import TINY, data, overrides  # noqa: F401 - the module fixture


def test_a_checkpoint_without_a_prior_is_read_as_prior_none(data, tmp_path):  # noqa: F811
    run_dir = tmp_path / "run"
    run_training(load_config(TINY, overrides(data, run_dir, epochs=1, **{
        "model.prior": "none"})))
    ckpt = load_checkpoint(run_dir / "checkpoint.pt")
    assert stored_config(ckpt)["model"]["prior"] == "none"
    del ckpt["config"]["model"]["prior"]          # as carla-wds wrote them before priors
    torch.save(ckpt, run_dir / "checkpoint.pt")
    old = load_checkpoint(run_dir / "checkpoint.pt")
    assert "prior" not in old["config"]["model"] and stored_config(old)["model"]["prior"] == "none"
    assert show(data / "val", tmp_path / "s.png", checkpoint=run_dir / "checkpoint.pt", n=2)
    with pytest.raises(CheckpointError, match="trained with model.prior=none.*Fix: pass "
                                              "model.prior=none"):
        run_training(load_config(TINY, overrides(data, run_dir, epochs=2)))
    run_training(load_config(TINY, overrides(data, run_dir, epochs=2, **{"model.prior": "none"})))
