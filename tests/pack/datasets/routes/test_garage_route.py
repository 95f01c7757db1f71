"""garage's `route` is the route its loader serves: smooth_path of the saved route (issue 24).

carla_garage@1448bed team_code/data.py __getitem__ (l.670-684) pads the saved route to 20 points
by repeating its last one, moves it with the sample's camera augmentation and, with
config.smooth_route = True (config.py l.260), resamples it with smooth_path: the first point
2.5 m from the vehicle, then one every 1 m (data.py l.1066-1137). The formula is written in
the test, independently of carla_wds, as tests/reference.garage_route. Raw routes are the synth
tree's, with frames edited here to hold the short, duplicated and backwards routes a real
route's end and lane changes give.
"""
from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import numpy as np
import pytest

from carla_wds.load.dataset import CARLAWebData
from carla_wds.pack.datasets.routes.layouts import LAYOUT_DIR
from tests import reference
from tests.conftest import make_raw, run_pack

FRAMES = 24
# frame -> the route written into its measurements: fewer than 20 points (padded by repeating
# the last), a repeated point and a first point behind the vehicle, a single point
EDITED = {11: [[1.2, 0.1], [2.3, 0.3], [3.1, 0.9]],
          12: [[-0.4, 0.2], [0.6, 0.2], [0.6, 0.2], [1.9, -0.5], [2.8, -1.6], [3.0, -2.9]],
          13: [[4.0, 0.5]]}
SIZE = (32, 128)


def _gz(path: Path, doc=None):
    if doc is None:
        with gzip.open(path, "rt") as f:
            return json.load(f)
    with gzip.open(path, "wt") as f:
        json.dump(doc, f)


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> Path:
    root = make_raw(tmp_path_factory.mktemp("raw_route"), "garage", episodes=1, frames=FRAMES,
                    seed=5)
    (route,) = {p.parent.parent for p in root.rglob("measurements/0000.json.gz")}
    for t, points in EDITED.items():
        path = route / "measurements" / f"{t:04d}.json.gz"
        _gz(path, {**_gz(path), "route": points})
    return root


@pytest.fixture(scope="module")
def packed(raw, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("packed_route") / "shards"
    run_pack(raw, out, layout="garage")
    return out


def _saved(raw: Path, key: str) -> dict:
    frame = key.rpartition("_")[2]
    (path,) = raw.rglob(f"measurements/{int(frame):04d}.json.gz")
    return _gz(path)


def _by_key(packed: Path, **kw) -> dict[str, dict]:
    out = {}
    for b in CARLAWebData(str(packed), batch_size=4, image_size=SIZE, fields=["measurements"],
                          **kw):
        for i, key in enumerate(b.keys):
            if b.valid[i]:
                out[key] = {**{k: v[i].numpy() for k, v in b.measurements.items()},
                            "batch_route": b.route[i].numpy(),
                            "camera_set": int(b.camera_set[i])}
    return out


def test_route_is_garage_smoothed_route_and_route_raw_the_saved_one(packed, raw):
    got = _by_key(packed, mode="eval")
    assert got and {int(k.rpartition("_")[2]) for k in got} >= set(EDITED)
    for key, m in got.items():
        saved = _saved(raw, key)["route"]
        want = reference.garage_route(saved)
        assert m["route"].shape == (20, 2) and m["route"].dtype == np.float32
        np.testing.assert_allclose(m["route"], want, atol=2e-5, err_msg=key)
        np.testing.assert_array_equal(m["batch_route"], m["route"])
        n = int(m["route_raw_len"])
        assert n == len(saved)
        np.testing.assert_array_equal(m["route_raw"][:n], np.float32(saved))
        assert not m["route_raw"][n:].any()
        assert "route_augmented" not in m and "route_len" not in m


def test_the_twin_camera_gets_garage_route_smoothed_after_its_augmentation(packed, raw):
    got = _by_key(packed, mode="train", twin_p=1.0, seed=1)
    assert got
    moved = 0
    for key, m in got.items():
        assert m["camera_set"] == 1
        src = _saved(raw, key)
        y, yaw = src["augmentation_translation"], src["augmentation_rotation"]
        moved += abs(y) + abs(yaw) > 0
        np.testing.assert_allclose(m["route"], reference.garage_route(src["route"], y, yaw),
                                   atol=2e-5, err_msg=key)
        n = len(src["route"])
        np.testing.assert_allclose(m["route_raw"][:n], reference.garage_augment_route(
            src["route"], y, yaw), atol=2e-5)
        assert not m["route_raw"][n:].any()
    assert moved, "the synth tree should hold augmented frames"


def test_a_route_garage_cannot_smooth_is_refused_naming_the_frame(raw, tmp_path):
    (path,) = raw.rglob("measurements/0022.json.gz")
    kept = _gz(path)
    try:
        _gz(path, {**kept, "route": [[0.0, 0.0], [0.0, 0.0]]})
        manifest = run_pack(raw, tmp_path / "shards", layout="garage", on_error="skip")
    finally:
        _gz(path, kept)
    # frame 22 is refused with the reason, and frame 14, whose waypoints reach it, with it
    skips = {s["frame"]: s for s in manifest["skipped"]}
    assert set(skips) == {14, 22}
    assert skips[22]["file"] == "measurements/0022.json.gz"
    assert skips[22]["reason"].startswith("field 'route': ") and "smooth_path" in \
        skips[22]["reason"]


def test_packs_without_the_formula_still_serve_the_saved_route(raw, tmp_path):
    """A layout (so a manifest) whose route is the saved one, as every garage pack before
    this change: the loader serves it as before, moved with the twin camera, zero-padded."""
    text = (LAYOUT_DIR / "garage.yaml").read_text()
    old = re.sub(r"^  route(_augmented|_raw)?: \{[^}]*\}\n", "", text, flags=re.M)
    assert "formula" not in old
    layout = tmp_path / "garage_old.yaml"
    layout.write_text(old.replace("measurement_fields:\n", "measurement_fields:\n  route: "
                                  "{key: route, shape: [20, 2], pad: true, units: m, "
                                  "frame: garage}\n"))
    run_pack(raw, tmp_path / "shards", layout=str(layout))
    got = _by_key(tmp_path / "shards", mode="train", twin_p=1.0, seed=1)
    for key, m in got.items():
        src = _saved(raw, key)
        n = int(m["route_len"])
        assert n == len(src["route"]) and "route_raw" not in m
        np.testing.assert_allclose(m["route"][:n], reference.garage_augment_route(
            src["route"], src["augmentation_translation"], src["augmentation_rotation"]),
            atol=2e-5)
        assert not m["route"][n:].any()
