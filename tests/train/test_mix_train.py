"""The trainer on a mix of two packs (issue 29): data.mix, on two DDP ranks (tests/ranks.py)."""
from __future__ import annotations

import json

import pytest

from carla_wds.train.config import ConfigError, load_config
from tests.ranks import run_module
from tests.train.test_loop import TINY, data, overrides  # noqa: F401 - the module fixture


def test_data_mix_is_a_checked_setting():
    with pytest.raises(ConfigError, match="data.mix"):
        load_config(TINY, ["data.mix=[1, 2]"])


@pytest.mark.ddp
def test_torchrun_two_ranks_train_on_a_two_pack_mix(data, tmp_path):  # noqa: F811
    spec = tmp_path / "mix.yaml"
    # two packs of one layout: the train pack two parts in three, the val pack one
    spec.write_text(f"entries:\n  - source: {data / 'train'}\n    weight: 2\n"
                    f"  - source: {data / 'val'}\n    weight: 1\nepoch_size: 48\n")
    run_dir = tmp_path / "mix"
    args = overrides(data, run_dir, epochs=2, **{"data.mix": str(spec),
                                                 "data.num_workers": 1})
    run_module("carla_wds.train", "--config", TINY, *args, timeout=400)
    summary = json.loads((run_dir / "summary.json").read_text())
    r0, r1 = summary["ranks"]
    assert summary["world_size"] == 2 and summary["val"]["n"] == 20   # every val sample once
    assert r0["steps"] == r1["steps"] == 2 * (48 // (2 * 8))
    assert r0["param_sum"] == r1["param_sum"]
