"""configs/ at the top level (issue 28): the package's shipped files, one copy, visible there."""
from __future__ import annotations

from pathlib import Path

import carla_wds
from carla_wds.pack.datasets import builtin_layouts
from carla_wds.train.config import CONFIG_DIR, load_config, shipped_configs

TOP = Path(__file__).resolve().parent.parent / "configs"
PACKAGE = Path(carla_wds.__file__).resolve().parent


def test_top_level_configs_are_the_packages_files():
    assert (TOP / "train").resolve() == CONFIG_DIR
    assert (TOP / "layouts").resolve() == PACKAGE / "pack" / "datasets" / "routes" / "layouts"
    assert sorted(p.stem for p in (TOP / "train").glob("*.yaml")) == shipped_configs()
    assert {p.stem for p in (TOP / "layouts").glob("*.yaml")} <= set(builtin_layouts())


def test_a_config_by_path_equals_it_by_name():
    for name in shipped_configs():
        assert load_config(TOP / "train" / f"{name}.yaml") == load_config(name)


def test_train_help_lists_every_shipped_config(cli):
    out = cli("train", "--help").output
    for name in shipped_configs():
        assert name in out
