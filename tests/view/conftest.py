"""The packs the report tests draw: real packs of the synth layouts, made once per session,
each on first use (test_view_hostile reads the tcp pack only). tcp and garage are the zoo's
(tests/helpers.make_pack's data, shared with the modules that read those packs); Bench2Drive's
clips, with LiDAR and boxes, are this wing's own."""
from __future__ import annotations

from pathlib import Path

import pytest

from carla_wds.pack.synth import synth_dataset
from tests.conftest import run_pack
from tests.helpers import PackZoo


class Packs:
    """packs[layout] -> the read-only pack of that layout, made on first use."""

    def __init__(self, zoo: PackZoo, root: Path) -> None:
        self.zoo, self.root, self.made = zoo, root, {}

    def __getitem__(self, layout: str) -> Path:
        if layout not in self.made:
            self.made[layout] = self.b2d() if layout == "bench2drive" else self.zoo(layout)
        return self.made[layout]

    def b2d(self) -> Path:
        root = self.root / "b2d"
        synth_dataset(root / "raw", "bench2drive", episodes=2, frames=30, seed=7,
                      image_size=(90, 160), progress=False)
        run_pack(root / "raw" / "archives", root / "shards", layout="bench2drive",
                 stride=1, max_samples=8, sensors=("lidar", "boxes"))
        return root / "shards"


@pytest.fixture(scope="session")
def packs(tmp_path_factory, zoo) -> Packs:
    return Packs(zoo, tmp_path_factory.mktemp("view"))
