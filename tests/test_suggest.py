"""'Did you mean' where a user types a name: a layout, a shipped config, a field (issue 28)."""
from __future__ import annotations

import pytest

from carla_wds.extras import Extra
from carla_wds.load.decode.fields import check_fields
from carla_wds.pack import PackOptions
from carla_wds.pack.errors import PackError
from carla_wds.schema import SampleSpec
from carla_wds.suggest import did_you_mean
from carla_wds.train.config import config_path
from carla_wds.train.settings import ConfigError


def test_the_closest_name_or_nothing():
    assert did_you_mean("garag", ["garage", "tcp"]) == " (did you mean 'garage'?)"
    assert did_you_mean("Semantics", ["semantics", "depth"]) == " (did you mean 'semantics'?)"
    assert did_you_mean("zzz", ["garage", "tcp"]) == ""
    assert did_you_mean(3, ["garage"]) == ""


def test_a_mistyped_layout_config_or_field_names_the_close_one():
    with pytest.raises(PackError, match=r"unknown layout 'transfuser202' \(did you mean "
                                        r"'transfuser2022'\?\); built-in layouts are"):
        PackOptions(layout="transfuser202").validate()
    with pytest.raises(ConfigError, match=r"config 'tinyy' not found \(did you mean 'tiny'\?\)"):
        config_path("tinyy")
    spec = SampleSpec(cameras=("front",), pred_len=4, extras=(
        Extra("lidar", "lidar.npy", "points", "lidar", "float32", (None, 4)),))
    with pytest.raises(ValueError, match=r"fields \['lidr'\]: not in these shards "
                                         r"\(did you mean 'lidar'\?\); they hold"):
        check_fields(spec, ["lidr"])


def test_synth_layout_says_did_you_mean_as_pack_does(cli, tmp_path):
    """`synth --layout` once printed two lists without a suggestion (issue 43)."""
    synth = cli("synth", tmp_path / "s", "--layout", "garag")
    pack = cli("pack", tmp_path / "s", tmp_path / "p", "--layout", "garag")
    for result in (synth, pack):
        assert result.exit_code != 0
        assert "--layout garag: unknown layout 'garag' (did you mean 'garage'?)" in result.output
    assert "synth writes ['bench2drive', " in synth.output
    assert not (tmp_path / "s").exists()
