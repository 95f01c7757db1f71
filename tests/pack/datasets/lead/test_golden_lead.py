"""--layout lead against tests/golden/lead.json: what LEAD's OWN loader
(kesai-labs/lead@44891760 CARLAData, tools/golden/lead.py) served on the same synthetic routes:
the same samples in the same order, and every label it builds."""
from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest

from carla_wds.pack import PackOptions, pack
from carla_wds.pack.synth.lead import synth_dataset
from tests.pack.datasets.lead.test_layout_lead import samples
from tools.golden.common import tree_sha256

GOLDEN = json.loads((Path(__file__).parents[3] / "golden" / "lead.json").read_text())


@pytest.fixture(scope="module")
def packed(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("golden_lead")
    s = GOLDEN["synth"]
    synth_dataset(root / "data", s["layout"], episodes=s["episodes"], frames=s["frames"],
                  seed=s["seed"], image_size=tuple(s["image_size"]), progress=False)
    assert tree_sha256(root / "data") == GOLDEN["raw_sha256"], "synth output changed"
    pack(root / "data", root / "out", PackOptions.of(layout="lead", progress=False,
                                                     allow_pickle_input=True))
    return root / "out"


def test_the_samples_and_their_order_are_lead_loaders(packed):
    want = [f"{g['route'].replace('/', '__')}__{g['frame']:04d}" for g in GOLDEN["samples"]]
    assert [s["__key__"] for s in samples(packed)] == want


def test_every_label_is_lead_loaders(packed):
    for g, s in zip(GOLDEN["samples"], samples(packed)):
        rec = np.load(io.BytesIO(s["measurements.npy"]))
        got = {"waypoints": np.load(io.BytesIO(s["waypoints.npy"])),
               "target_point": np.load(io.BytesIO(s["target_point.npy"])),
               "command": np.load(io.BytesIO(s["target_command.npy"])),
               "speed": json.loads(s["speed.json"]),
               "target_point_next": rec["target_point_next"],
               "target_point_previous": rec["target_point_previous"]}
        for name, value in got.items():
            np.testing.assert_allclose(np.asarray(value, np.float32), np.float32(g[name]),
                                       rtol=0, atol=1e-5, err_msg=f"{s['__key__']} {name}")
