"""The packs the report tests draw: real packs of the synth layouts, made once per session."""
from __future__ import annotations

from pathlib import Path

import pytest

from carla_wds.pack.synth import synth_dataset
from tests.conftest import run_pack
from tests.helpers import make_pack


@pytest.fixture(scope="session")
def packs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("view")
    out = {"tcp": make_pack(root / "tcp", "tcp"), "garage": make_pack(root / "garage", "garage")}
    synth_dataset(root / "b2d" / "raw", "bench2drive", episodes=2, frames=30, seed=7,
                  image_size=(90, 160), progress=False)
    run_pack(root / "b2d" / "raw" / "archives", root / "b2d" / "shards", layout="bench2drive",
             stride=1, max_samples=8, sensors=("lidar", "boxes"))
    out["bench2drive"] = root / "b2d" / "shards"
    return out
