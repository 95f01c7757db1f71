"""garage_lb2_simlingo's twin camera: every target point and route variant SimLingo moves
with it (RenzKa/simlingo@eb2b89a dataset_driving.py l.75-78, dataset_base.py load_route
l.416-439, augment_target_point l.686-694) is served moved when CARLAWebData swaps the twin in,
and so are the saved routes the record keeps (route_raw, route_original_raw).

The move is written here from their formula, R(yaw)^T (p - (0, y)) with the frame's recorded
augmentation_translation y (m) and augmentation_rotation yaw (deg), applied to the raw
measurements of a real packed synth route and compared with what the loader serves."""
from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import numpy as np
import pytest

from carla_wds import CARLAWebData
from carla_wds.pack.synth.garage_lb2 import synth_dataset
from tests.conftest import run_pack

SIZE = (32, 64)


def moved(points, y: float, yaw_deg: float) -> np.ndarray:
    """SimLingo's augment_target_point / augment_route, as rows: R(yaw)^T (p - (0, y))."""
    c, s = math.cos(math.radians(yaw_deg)), math.sin(math.radians(yaw_deg))
    p = np.atleast_2d(np.asarray(points, np.float64)) - [0.0, y]
    return np.stack([c * p[:, 0] + s * p[:, 1], -s * p[:, 0] + c * p[:, 1]], axis=1)


def spaced(points: np.ndarray) -> np.ndarray:
    """equal_spacing_route (dataset_base.py l.539-551): 0..19 m along (0, 0) + points."""
    route = np.vstack([[0.0, 0.0], points])
    along = np.concatenate([[0.0], np.cumsum(np.hypot(*np.diff(route, axis=0).T))])
    along += 1e-4 * np.arange(len(route))
    return np.stack([np.interp(np.arange(20.0), along, route[:, k]) for k in (0, 1)], axis=1)


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> tuple[Path, dict]:
    """(raw routes, key -> the measurements record CARLAWebData serves with the twin)."""
    root = tmp_path_factory.mktemp("twin_simlingo")
    synth_dataset(root / "raw", "garage_lb2_simlingo", episodes=2, frames=28, seed=7,
                  image_size=SIZE, progress=False)
    run_pack(root / "raw", root / "out", layout="garage_lb2_simlingo")
    data = CARLAWebData(str(root / "out"), batch_size=4, image_size=SIZE, twin_p=1.0,
                        fields=["measurements"], seed=1)
    out = {}
    for batch in data:
        assert batch.camera_set.tolist() == [1] * len(batch.keys)
        for i, key in enumerate(batch.keys):
            if batch.valid[i]:
                out[key] = {"target_point": batch.target_point[i].numpy(),
                            **{k: v[i].numpy() for k, v in batch.measurements.items()}}
    assert out
    return root / "raw", out


def _raw(raw: Path, key: str) -> dict:
    episode, _, frame = key.rpartition("__")
    path = raw / episode.replace("__", "/") / "measurements" / f"{int(frame):04d}.json.gz"
    with gzip.open(path, "rt") as f:
        return json.load(f)


def test_every_target_point_and_route_moves_with_the_twin(served):
    raw, records = served
    before = 0.0
    for key, got in records.items():
        m = _raw(raw, key)
        y, yaw = m["augmentation_translation"], m["augmentation_rotation"]
        for name in ("target_point", "target_point_next"):
            want = moved(m[name], y, yaw)[0]
            np.testing.assert_allclose(got[name], want, atol=1e-4, err_msg=f"{key} {name}")
        # the value served before the fix: target_point_next as saved
        before = max(before, float(np.linalg.norm(np.subtract(m["target_point_next"],
                                                              moved(m["target_point_next"],
                                                                    y, yaw)[0]))))
        original = np.asarray(m["route_original"], np.float64)
        original = np.vstack([original, np.repeat(original[-1:], max(0, 20 - len(original)),
                                                   0)])[:20]
        np.testing.assert_allclose(got["route"], spaced(moved(original, y, yaw)), atol=1e-4)
        np.testing.assert_allclose(got["route_adjusted"], spaced(moved(m["route"], y, yaw)),
                                   atol=1e-4)
        # the saved routes too: moved, as many points as saved, zero rows after them
        for name, key in (("route_raw", "route"), ("route_original_raw", "route_original")):
            n = len(m[key])
            assert int(got[f"{name}_len"]) == n
            np.testing.assert_allclose(got[name][:n], moved(m[key], y, yaw), atol=1e-4)
            assert not got[name][n:].any()
    # synth shifts its twin up to 1 m and turns it up to 5 deg: a point ~40 m ahead is off
    # by metres unless it moves
    assert before > 1.0, before
