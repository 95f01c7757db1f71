"""Synthetic garage / transfuser2022 / tcp_roach raw layouts, read the way each project reads them.

The np.load(allow_pickle=True) calls below read pickles this test itself just wrote (trusted).
"""
from __future__ import annotations

import gzip
import hashlib
import json
import math
from pathlib import Path

import cv2
import numpy as np
import pytest

from carla_wds.pack.synth import synth_dataset
from tests import reference

FRAMES = 12


def _tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _box_count(points: np.ndarray, centre, yaw: float, half) -> int:
    c, s = math.cos(yaw), math.sin(yaw)
    d = np.asarray(points, np.float64)[:, :3] - np.asarray(centre, np.float64)
    lx, ly = c * d[:, 0] + s * d[:, 1], -s * d[:, 0] + c * d[:, 1]
    return int(((np.abs(lx) < half[0]) & (np.abs(ly) < half[1]) & (np.abs(d[:, 2]) < half[2])).sum())


def _check_matrix(matrix, x: float, y: float, yaw: float) -> None:
    m = np.array(matrix, dtype=np.float64)
    ref = np.array(reference.carla_matrix(x, y, 0.0, math.degrees(yaw)))
    np.testing.assert_allclose(m, ref, atol=1e-9)


# --------------------------------------------------------------------------------------------
# garage
# --------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def garage(tmp_path_factory):
    out = tmp_path_factory.mktemp("garage")
    routes = synth_dataset(out, layout="garage", episodes=4, frames=FRAMES, seed=5,
                           image_size=(32, 128), progress=False)
    return out, routes


GARAGE_FOLDERS = {"rgb": ".jpg", "rgb_augmented": ".jpg", "semantics": ".png",
                  "semantics_augmented": ".png", "depth": ".png", "depth_augmented": ".png",
                  "bev_semantics": ".png", "bev_semantics_augmented": ".png", "lidar": ".laz",
                  "boxes": ".json.gz", "measurements": ".json.gz"}


def _gz(path: Path):
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)


def test_garage_structure(garage):
    out, routes = garage
    assert len(routes) == 4
    for idx, route in enumerate(routes):
        rel = route.relative_to(out).parts
        assert rel[0] == "s1_dataset_2023_05_10"
        assert rel[1].startswith("Routes_") and rel[1].endswith("_Repetition0")
        stem = rel[1][len("Routes_"):-len("_Repetition0")]
        assert rel[2].startswith(f"{stem}_route") and rel[2].endswith("_01_01_00_00_00")
        assert sorted(p.name for p in route.iterdir()) == sorted([*GARAGE_FOLDERS,
                                                                  "results.json.gz"])
        for folder, ext in GARAGE_FOLDERS.items():
            names = sorted(p.name for p in (route / folder).iterdir())
            assert names == [f"{t:04d}{ext}" for t in range(FRAMES)]


def test_garage_formats(garage):
    laspy = pytest.importorskip("laspy")
    _, routes = garage
    route = routes[0]
    rgb = cv2.imread(str(route / "rgb" / "0003.jpg"), cv2.IMREAD_COLOR)
    assert rgb.shape == (32, 128, 3) and rgb.dtype == np.uint8
    for folder in ("semantics", "semantics_augmented", "depth", "depth_augmented"):
        img = cv2.imread(str(route / folder / "0003.png"), cv2.IMREAD_UNCHANGED)
        assert img.shape == (32, 128) and img.dtype == np.uint8
    depth = cv2.imread(str(route / "depth" / "0003.png"), cv2.IMREAD_UNCHANGED)
    assert depth[0].max() == 255 and depth[-1].max() < 255   # sky far, ground near
    for folder in ("bev_semantics", "bev_semantics_augmented"):
        bev = cv2.imread(str(route / folder / "0003.png"), cv2.IMREAD_UNCHANGED)
        assert bev.shape == (256, 256) and bev.dtype == np.uint8 and bev.max() <= 10
        assert {0, 1, 2}.issubset(np.unique(bev).tolist())
    las = laspy.read(str(route / "lidar" / "0003.laz"))
    assert las.header.point_format.id == 0
    np.testing.assert_allclose(las.header.scales, 0.001)
    pts = np.stack([las.x, las.y, las.z], axis=1)
    assert 20000 <= len(pts) <= 40000   # a 64-channel sweep (pack/synth/sensors.py GROUND_POINTS)
    np.testing.assert_allclose(las.header.offsets, pts.min(axis=0), atol=1e-3)
    m = _gz(route / "measurements" / "0003.json.gz")
    for key in ("pos_global", "theta", "speed", "target_speed", "target_point",
                "target_point_next", "aim_wp", "route", "command", "next_command", "steer",
                "throttle", "brake", "control_brake", "junction", "vehicle_hazard",
                "light_hazard", "walker_hazard", "stop_sign_hazard", "stop_sign_close",
                "walker_close", "angle", "augmentation_translation", "augmentation_rotation",
                "ego_matrix"):
        assert key in m, key
    assert len(m["route"]) <= 20 and all(len(p) == 2 for p in m["route"])
    assert m["route"][-1][0] > 5.0   # ahead in the ego frame
    assert 1 <= m["command"] <= 6 and 1 <= m["next_command"] <= 6
    assert isinstance(m["brake"], bool)
    boxes = _gz(route / "boxes" / "0003.json.gz")
    assert boxes[0]["class"] == "ego_car" and boxes[0]["num_points"] == -1
    assert sum(b["class"] == "car" for b in boxes) >= 2
    for b in boxes:
        assert {"class", "extent", "position", "yaw", "id", "matrix"} <= set(b)


def test_garage_ego_matrix_and_augmentation(garage):
    _, routes = garage
    for route in routes:
        meas = [_gz(route / "measurements" / f"{t:04d}.json.gz") for t in range(FRAMES)]
        assert meas[0]["augmentation_translation"] == 0.0
        assert meas[0]["augmentation_rotation"] == 0.0
        for m in meas:
            _check_matrix(m["ego_matrix"], *m["pos_global"], m["theta"])
            assert -1.0 <= m["augmentation_translation"] <= 1.0
            assert -5.0 <= m["augmentation_rotation"] <= 5.0
        assert any(m["augmentation_translation"] != 0.0 for m in meas)
        # the target point is the world target seen from the ego frame
        m = meas[4]
        c, s = math.cos(m["theta"]), math.sin(m["theta"])
        world = np.array(m["pos_global"]) + np.array([[c, -s], [s, c]]) @ m["target_point"]
        assert np.isfinite(world).all()


def test_garage_lidar_in_boxes(garage):
    laspy = pytest.importorskip("laspy")
    _, routes = garage
    checked = 0
    for route in routes[:2]:
        for t in (2, 7):
            las = laspy.read(str(route / "lidar" / f"{t:04d}.laz"))
            pts = np.stack([las.x, las.y, las.z], axis=1)
            for b in _gz(route / "boxes" / f"{t:04d}.json.gz"):
                if b["class"] != "car":
                    continue
                n = _box_count(pts, b["position"], b["yaw"], b["extent"])
                assert n == b["num_points"] > 0
                # the upper half of the car, above the ground-level box, has points too
                up = _box_count(pts, [b["position"][0], b["position"][1], 2 * b["extent"][2]],
                                b["yaw"], b["extent"])
                assert up > 0
                checked += 1
    assert checked >= 4


def test_garage_results_scores(garage):
    _, routes = garage
    for idx, route in enumerate(routes):
        score = _gz(route / "results.json.gz")["scores"]["score_composed"]
        assert score == (60.0 if idx % 4 == 3 else 100.0)


def test_garage_reference_waypoints_move_forward(garage):
    _, routes = garage
    meas = [_gz(routes[1] / "measurements" / f"{t:04d}.json.gz") for t in range(FRAMES)]
    moving = [t for t in range(FRAMES - 8) if meas[t]["speed"] > 1.0]
    assert moving
    for t in moving:
        wp = reference.garage_waypoints(meas, t, pred_len=3)
        assert np.isfinite(wp).all() and wp[-1, 0] > 0.5
        assert np.all(np.diff(wp[:, 0]) >= -1e-6)
    thetas = np.array([m["theta"] for m in meas])
    speeds = np.array([m["speed"] for m in meas])
    assert speeds.max() > speeds.min()


def test_garage_deterministic_and_refuses_busy(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for out in (a, b):
        synth_dataset(out, layout="garage", episodes=2, frames=4, seed=9, image_size=(16, 64),
                      progress=False)
    assert _tree_digest(a) == _tree_digest(b)
    with pytest.raises(FileExistsError):
        synth_dataset(a, layout="garage", episodes=2, frames=4, seed=9, image_size=(16, 64),
                      progress=False)
