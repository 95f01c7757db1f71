"""garage_lb2_simlingo against the golden output of SimLingo's own loader
(tests/golden/garage_lb2.json, made by tools/golden/garage_lb2.py at RenzKa/simlingo@eb2b89a):
the same synthetic routes packed by carla-wds and loaded with CARLAWebData serve SimLingo's
sample set (its route filter and frame range) and labels (waypoints, both routes and
target_point_next with and without the twin camera, target points, commands, speed). No
network, no project code."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from carla_wds.codecs import codec_named
from carla_wds.load import CARLAWebData
from carla_wds.pack import PackOptions, pack
from carla_wds.pack.synth import synth_dataset
from tests.conftest import read_pack
from tools.golden.common import tree_sha256

GOLDEN = Path(__file__).parent / "golden" / "garage_lb2.json"
ATOL = 2e-5
# golden label -> the measurements record field carla-wds serves it as (None: a core label)
RECORD = {"route_points": "route", "route_adjusted": "route_adjusted",
          "target_point_next": "target_point_next", "next_command": "next_command"}
# the twin camera's routes: record fields a loader swaps in with the twin, read from the shards
TWINS = ("route_augmented", "route_adjusted_augmented", "target_point_next_augmented")


@pytest.fixture(scope="module")
def compared(tmp_path_factory) -> tuple[dict, dict]:
    doc = json.loads(GOLDEN.read_text())
    synth, root = doc["synth"], tmp_path_factory.mktemp("golden_lb2")
    raw = root / "raw"
    synth_dataset(raw, synth["layout"], episodes=synth["episodes"], frames=synth["frames"],
                  seed=synth["seed"], image_size=tuple(synth["image_size"]), progress=False)
    assert tree_sha256(raw) == doc["raw_sha256"], (
        f"carla-wds's synth no longer writes the routes {GOLDEN} was made from; regenerate "
        f"it: {doc['regenerate']}")
    pack(raw, root / "shards", PackOptions(layout="garage_lb2_simlingo", progress=False))
    data = CARLAWebData(str(root / "shards"), batch_size=4, mode="eval",
                        image_size=tuple(synth["image_size"]), fields=["measurements"])
    ours = {}
    for batch in data:
        for i, key in enumerate(batch.keys):
            if batch.valid[i]:
                route, frame = key.rsplit("__", 1)
                record = {k: v[i].numpy() for k, v in batch.measurements.items()}
                ours[(route.replace("__", "/"), int(frame))] = {
                    "waypoints": batch.waypoints[i].numpy(),
                    "target_point": batch.target_point[i].numpy(),
                    "command": int(record["command"]), "speed": float(batch.speed[i]),
                    **{label: record[field] for label, field in RECORD.items()}}
    manifest = json.loads((root / "shards" / "manifest.json").read_text())
    codec = codec_named(manifest["members"]["measurements.npy"])
    for key, members in read_pack(root / "shards").items():
        route, frame = key.rsplit("__", 1)
        record = codec.decode(members["measurements.npy"])
        ours[(route.replace("__", "/"), int(frame))].update({t: record[t] for t in TWINS})
    theirs = {(s["route"], s["frame"]): s for s in doc["samples"]}
    return ours, theirs


def test_the_sample_set_is_simlingos(compared):
    ours, theirs = compared
    assert sorted(ours) == sorted(theirs)
    assert len({route for route, _ in theirs}) == 3   # its rule kept the route garage drops


LABELS = ["waypoints", "target_point", "speed", "route_points", "route_adjusted",
          "route_augmented", "route_adjusted_augmented", "target_point_next",
          "target_point_next_augmented"]


@pytest.mark.parametrize("label", LABELS + ["command", "next_command"])
def test_every_label_is_simlingos(compared, label):
    ours, theirs = compared
    for where, want in theirs.items():
        got = ours[where][label]
        if label.endswith("command"):
            assert int(got) == want[label], f"{label} at {where}"
            continue
        theirs_value = np.asarray(want[label], np.float64)
        assert np.shape(got) == theirs_value.shape, f"{label} at {where}"
        np.testing.assert_allclose(np.asarray(got, np.float64), theirs_value, rtol=1e-6,
                                   atol=ATOL, err_msg=f"{label} at {where}")
