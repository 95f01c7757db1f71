"""--layout lead against tests/golden/lead.json: what LEAD's OWN loader
(kesai-labs/lead@44891760 CARLAData, tools/golden/lead.py) served on the same synthetic routes:
the same samples in the same order, and every label it builds: with the normal cameras, and
with the perturbated twin (its "twin" labels, served by CARLAWebData with twin_p=1)."""
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
               "target_point_previous": rec["target_point_previous"],
               "future_yaws": rec["future_yaws"], "route_points": rec["route"]}
        for name, value in got.items():
            np.testing.assert_allclose(np.asarray(value, np.float32), np.float32(g[name]),
                                       rtol=0, atol=1e-5, err_msg=f"{s['__key__']} {name}")


def test_the_twins_labels_are_lead_loaders(packed):
    """LEAD's loader with use_sensor_perburtation drawn for every sample: every label it moves
    (waypoints, all three target points, future yaws, route) as CARLAWebData serves the twin."""
    from carla_wds import CARLAWebData
    data = CARLAWebData(str(packed), batch_size=4, image_size=tuple(GOLDEN["synth"][
        "image_size"]), twin_p=1.0, fields=["measurements"], seed=2)
    served = {}
    for batch in data:
        m = batch.measurements
        for i, key in enumerate(batch.keys):
            if batch.valid[i]:
                assert int(batch.camera_set[i]) == 1
                served[key] = {"waypoints": batch.waypoints[i], "route_points": m["route"][i],
                               "target_point": batch.target_point[i],
                               **{k: m[k][i] for k in ("target_point_next",
                                                       "target_point_previous", "future_yaws")}}
    assert len(served) == len(GOLDEN["samples"])
    for g in GOLDEN["samples"]:
        key = f"{g['route'].replace('/', '__')}__{g['frame']:04d}"
        for name, value in served[key].items():
            np.testing.assert_allclose(value.numpy(), np.float32(g["twin"][name]), rtol=0,
                                       atol=2e-5, err_msg=f"{key} {name}")
