"""The trainer's conventions come from the dataset registry (carla_wds.datasets), not a table of
layout names in train/: a dataset registered from here brings its label frame (with aliases)
to the prior, the controller's view and the model's inputs; the controller the trainer reports
is the registry's; --config's help lists the shipped configs as they are on disk."""
from __future__ import annotations

import pytest
import torch

from carla_wds.datasets import DATASETS, DatasetInfo, Frame
from carla_wds.train import loop
from carla_wds.train.config import shipped_configs
from carla_wds.train.control import controller_source
from carla_wds.train.frames import canonical, label_frames, straight_ahead, to_right_forward
from carla_wds.train.model import ModelIO

# a toy ego frame: (left, forward) metres, origin 2 m behind the vehicle's
TOY = DatasetInfo(name="toyset", frames={"toyset": Frame(((-1.0, 0.0), (0.0, 1.0)), (0.0, -2.0))},
                  frame_aliases={"toyset_alias": "toyset"})


@pytest.fixture
def toy_registered():
    DATASETS[TOY.name] = TOY
    yield
    del DATASETS[TOY.name]


def test_a_registered_datasets_frame_reaches_the_trainer(toy_registered):
    speed = torch.tensor([2.0, 0.0])
    ahead = straight_ahead(speed, 3, 0.5, "toyset_alias")
    expected = torch.tensor([[[0.0, -1.0], [0.0, 0.0], [0.0, 1.0]],
                             [[0.0, -2.0], [0.0, -2.0], [0.0, -2.0]]])
    assert torch.allclose(ahead, expected)
    assert torch.allclose(to_right_forward(torch.tensor([[1.0, 3.0]]), "toyset"),
                          torch.tensor([[-1.0, 5.0]]))
    assert canonical("toyset_alias") == "toyset"
    assert label_frames({"waypoints": "toyset", "target_point": "toyset_alias"}) == \
        ("toyset", "toyset")
    assert ModelIO(frame="toyset").frame == "toyset"


def test_unregistered_frames_are_refused_naming_the_registry():
    with pytest.raises(ValueError, match="unknown coordinate frame 'toyset'"):
        canonical("toyset")


def test_the_reported_controller_is_the_registrys():
    assert controller_source() == "TCP"   # carla_wds.datasets DEFAULT_CONTROLLER's dataset


def test_config_help_lists_every_shipped_config(capsys):
    with pytest.raises(SystemExit):
        loop.main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert f"a shipped config ({', '.join(shipped_configs())})" in out
    assert "garage_tiny" in shipped_configs()
