"""The trainer on a mix of layouts (issue 40): data.mix over a tcp, a garage and a bench2drive
pack, served in their common view (docs/mixing.md), validated on data.val_mix, on two DDP
ranks as `torchrun --nproc_per_node 2 -m carla_wds.train` runs them (tests/ranks.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from carla_wds.train.config import ConfigError
from carla_wds.train.loop import build_data
from carla_wds.train.config import load_config
from tests.conftest import run_pack
from tests.helpers import shared_raw
from tests.load.test_digests import ZOO
from tests.ranks import run_module
from tests.train.test_loop import TINY, overrides


@pytest.fixture(scope="module")
def packs(zoo, tmp_path_factory) -> dict[str, Path]:
    raw = shared_raw(tmp_path_factory, "bench2drive", episodes=2, frames=30, seed=7,
                     image_size=(180, 320))   # shared with test_b2d_loader, test_mix_layouts
    b2d = tmp_path_factory.mktemp("train_mix_layouts") / "b2d"
    run_pack(raw / "archives", b2d, layout="bench2drive", max_samples=6)
    return {"tcp": zoo(**ZOO["tcp"]), "garage": zoo(**ZOO["garage"]), "bench2drive": b2d}


def mix_file(path: Path, packs: dict[str, Path], way: str, size: int | None = None) -> Path:
    lines = ["entries:"] + [f"  - source: {p}\n    {way}: 1" for p in packs.values()]
    path.write_text("\n".join(lines) + (f"\nepoch_size: {size}\n" if size else "\n"))
    return path


def _args(packs, tmp_path: Path, **extra) -> list[str]:
    train = mix_file(tmp_path / "train_mix.yaml", packs, "weight", 48)
    val = mix_file(tmp_path / "val_mix.yaml", packs, "repeat")
    return overrides(tmp_path, tmp_path / "run", epochs=2, **{
        "data.mix": str(train), "data.val_mix": str(val), "data.cameras": "[front]",
        "data.num_workers": 1, **extra})


@pytest.mark.ddp
def test_torchrun_two_ranks_train_on_a_mix_of_three_layouts(packs, tmp_path):
    run_module("carla_wds.train", "--config", TINY, *_args(packs, tmp_path), timeout=400)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    r0, r1 = summary["ranks"]
    # every val sample of the three packs once: tcp 24, garage 21, bench2drive's
    n_val = sum(json.loads((Path(p) / "manifest.json").read_text())["total_samples"]
                for p in packs.values())
    assert summary["world_size"] == 2 and summary["val"]["n"] == n_val
    assert r0["steps"] == r1["steps"] == 2 * (48 // (2 * 8))
    assert r0["param_sum"] == r1["param_sum"]


def test_val_of_another_view_is_refused_naming_val_mix(packs, tmp_path):
    args = _args(packs, tmp_path, **{"data.val": str(packs["tcp"]), "data.val_mix": "null"})
    cfg = load_config(TINY, args)
    with pytest.raises(ConfigError) as exc:
        build_data(cfg, 0, 1, pin=False)
    msg = str(exc.value)
    assert "\n" not in msg and "data.val_mix" in msg and "'b2d'" in msg and "'tcp'" in msg
