"""Tests of the procedural CARLA-like data generator (real files under tmp_path)."""
from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import cv2
import numpy as np
import pytest

from carla_wds.pack.synth import DEFAULT_IMAGE_SIZE, LAYOUT_CAMERAS, synth_dataset

SMALL = (96, 160)   # (height, width), as image_size
DT = 0.5
TCP_KEYS = {"x", "y", "theta", "speed", "x_target", "y_target", "target_command", "steer",
            "throttle", "brake", "command"}
TF_FLOATS = {"x", "y", "theta", "speed", "x_command", "y_command", "steer", "throttle", "brake"}
TF_BOOLS = {"junction", "vehicle_hazard", "light_hazard", "walker_hazard", "stop_sign_hazard"}
TARGET = {"tcp": ("x_target", "y_target"), "transfuser4": ("x_command", "y_command")}


def _measurements(route: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((route / "measurements").glob("*.json"))]


def _hashes(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _to_tcp_ego(m: dict, point: tuple[float, float]) -> np.ndarray:
    """TCP's label formula (formats.md): R.T @ (point - p) with R = rot(pi/2 + theta)."""
    a = math.pi / 2 + m["theta"]
    rot = np.array([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]])
    return rot.T @ np.array([point[0] - m["x"], point[1] - m["y"]])


@pytest.fixture(scope="module")
def long_routes(tmp_path_factory) -> dict[str, list[Path]]:
    """Both layouts, several longer episodes, tiny images: for the measurement checks."""
    root = tmp_path_factory.mktemp("long")
    return {layout: synth_dataset(root / layout, layout, episodes=5, frames=60, seed=7,
                                  image_size=(24, 32), progress=False)
            for layout in LAYOUT_CAMERAS}


@pytest.mark.parametrize("layout", sorted(LAYOUT_CAMERAS))
def test_folder_structure_and_counts(tmp_path, layout):
    routes = synth_dataset(tmp_path, layout, episodes=6, frames=3, image_size=(16, 24),
                           progress=False)
    assert routes == sorted(routes) and len(routes) == 6
    towns = [ep % 5 + 1 for ep in range(6)]   # Town01..Town05, then Town01 again
    if layout == "tcp":
        expected = [Path(f"Town{k:02d}/routes_town{k:02d}_{ep:02d}") for ep, k in enumerate(towns)]
    else:
        expected = [Path(f"Town{k:02d}_tiny/routes_{ep:02d}") for ep, k in enumerate(towns)]
    assert routes == sorted(tmp_path / e for e in expected)
    for route in routes:
        folders = sorted(p.name for p in route.iterdir())
        assert folders == sorted([*LAYOUT_CAMERAS[layout].values(), "measurements"])
        for folder in folders:
            ext = "json" if folder == "measurements" else "png"
            names = sorted(p.name for p in (route / folder).iterdir())
            assert names == [f"{t:04d}.{ext}" for t in range(3)]
    for path in tmp_path.rglob("*"):
        rel = path.relative_to(tmp_path).as_posix()
        assert rel.count(".") == (1 if path.is_file() else 0), rel


@pytest.mark.parametrize("layout", sorted(LAYOUT_CAMERAS))
def test_measurement_fields_and_types(long_routes, layout):
    for route in long_routes[layout]:
        for m in _measurements(route):
            if layout == "tcp":
                assert set(m) == TCP_KEYS
                floats, ints, bools = TCP_KEYS - {"target_command", "command"}, {"target_command",
                                                                                 "command"}, set()
                assert m["command"] == m["target_command"]
            else:
                assert set(m) == TF_FLOATS | TF_BOOLS | {"command"}
                floats, ints, bools = TF_FLOATS, {"command"}, TF_BOOLS
            assert all(type(m[k]) is float and math.isfinite(m[k]) for k in floats), m
            assert all(type(m[k]) is int for k in ints) and all(type(m[k]) is bool for k in bools)
            assert m["command"] in (1, 2, 3, 4)
            assert 0.0 <= m["speed"] <= 15.0
            assert -1.0 <= m["steer"] <= 1.0 and 0.0 <= m["throttle"] <= 1.0
            assert m["brake"] in (0.0, 1.0)


@pytest.mark.parametrize("layout", sorted(LAYOUT_CAMERAS))
def test_positions_follow_speed_and_heading(long_routes, layout):
    for route in long_routes[layout]:
        ms = _measurements(route)
        for a, b in zip(ms, ms[1:]):
            # The generator integrates exactly this Euler step, so only float rounding remains.
            step = a["speed"] * DT
            assert b["x"] - a["x"] == pytest.approx(step * math.cos(a["theta"]), abs=1e-9)
            assert b["y"] - a["y"] == pytest.approx(step * math.sin(a["theta"]), abs=1e-9)
            assert abs(b["speed"] - a["speed"]) <= 2.05   # smooth: <= ~4 m/s^2


def test_speed_profile_has_stops_and_accelerations(long_routes):
    speeds = [[m["speed"] for m in _measurements(r)] for r in long_routes["transfuser4"]]
    assert all(s[0] == 0.0 and max(s) > 5.0 for s in speeds)   # start at rest, then speed up
    mid_stops = [t for s in speeds for t in range(10, len(s)) if s[t] == 0.0 and s[t - 5] > 2.0]
    assert mid_stops, "expected at least one stop after driving"
    flags = [m for r in long_routes["transfuser4"] for m in _measurements(r)
             if m["speed"] == 0.0 and any(m[k] for k in TF_BOOLS - {"junction"})]
    assert flags, "a stop mid-route should name its hazard"


@pytest.mark.parametrize("layout", sorted(LAYOUT_CAMERAS))
def test_commands_match_turn_direction(long_routes, layout):
    seen = set()
    for route in long_routes[layout]:
        ms = _measurements(route)
        for t in range(len(ms) - 3):
            turn = ms[t + 3]["theta"] - ms[t]["theta"]
            seen.add(ms[t]["command"])
            if abs(turn) > 0.4:   # clearly turning at a junction, not drifting in the lane
                # Real-data convention: theta grows in a RIGHT turn (TCP's lateral +x is right).
                assert ms[t]["command"] == (2 if turn > 0 else 1), (route, t, turn)
    assert {1, 2, 4} <= seen


@pytest.mark.parametrize("layout", sorted(LAYOUT_CAMERAS))
def test_target_point_ahead_and_held(long_routes, layout):
    kx, ky = TARGET[layout]
    for route in long_routes[layout]:
        ms = _measurements(route)
        dist = [math.hypot(m[kx] - m["x"], m[ky] - m["y"]) for m in ms]
        assert all(3.0 < d < 45.0 for d in dist), dist
        for t in range(1, len(ms)):
            old = (ms[t - 1][kx], ms[t - 1][ky])
            if (ms[t][kx], ms[t][ky]) != old:
                # Switched only once the ego got within ~5 m, to a point 15-45 m ahead.
                assert math.hypot(old[0] - ms[t]["x"], old[1] - ms[t]["y"]) < 5.5
                assert 15.0 < dist[t] < 45.0
                assert _to_tcp_ego(ms[t], (ms[t][kx], ms[t][ky]))[1] < 0   # forward is -y


def test_same_seed_is_byte_identical_and_other_seed_differs(tmp_path):
    kwargs = dict(layout="transfuser4", episodes=2, frames=4, image_size=(32, 48), progress=False)
    synth_dataset(tmp_path / "a", seed=5, **kwargs)
    synth_dataset(tmp_path / "b", seed=5, **kwargs)
    synth_dataset(tmp_path / "c", seed=6, **kwargs)
    a, b, c = (_hashes(tmp_path / k) for k in "abc")
    assert len(a) == 2 * 4 * 5 and a == b
    assert a.keys() == c.keys()
    assert all(a[k] != c[k] for k in a if k.endswith(".png") or k.endswith("0003.json"))


@pytest.mark.parametrize("layout", sorted(LAYOUT_CAMERAS))
def test_images_decode_to_requested_size(tmp_path, layout):
    routes = synth_dataset(tmp_path, layout, episodes=1, frames=2, image_size=SMALL,
                           progress=False)
    for png in routes[0].rglob("*.png"):
        img = cv2.imread(str(png), cv2.IMREAD_UNCHANGED)
        assert img is not None and img.shape == (*SMALL, 3) and img.dtype == np.uint8
        assert img.std() > 10   # a scene, not a flat colour
    assert DEFAULT_IMAGE_SIZE == {"tcp": (256, 900), "transfuser4": (300, 400)}


def test_default_image_size_is_the_real_sensor(tmp_path):
    route = synth_dataset(tmp_path, "tcp", episodes=1, frames=1, progress=False)[0]
    assert cv2.imread(str(route / "rgb" / "0000.png")).shape == (256, 900, 3)


def _road_column(img: np.ndarray) -> float | None:
    """Mean column of asphalt pixels in the band just below the horizon (the far road)."""
    h = img.shape[0]
    band = img[h // 2 + 1:h // 2 + 1 + h // 6].astype(int)
    asphalt = (band.min(axis=2) >= 85) & (band.max(axis=2) <= 110)
    return float(np.nonzero(asphalt)[1].mean()) if asphalt.sum() >= 20 else None


def test_front_image_shows_the_future_path(tmp_path):
    """Where the road bends in the far field tracks the lateral of TCP's 4th future waypoint."""
    routes = synth_dataset(tmp_path, "tcp", episodes=4, frames=50, seed=3, image_size=SMALL,
                           progress=False)
    lateral, column = [], []
    for route in routes:
        ms = _measurements(route)
        for t in range(len(ms) - 4):
            col = _road_column(cv2.imread(str(route / "rgb" / f"{t:04d}.png")))
            if col is not None:
                waypoint4 = _to_tcp_ego(ms[t], (ms[t + 4]["x"], ms[t + 4]["y"]))
                lateral.append(waypoint4[0])   # + is the ego's right
                column.append(col)
    lateral, column = np.array(lateral), np.array(column)
    left, ahead, right = (column[lateral < -1.5], column[abs(lateral) < 0.3],
                          column[lateral > 1.5])
    assert min(len(left), len(ahead), len(right)) >= 3
    # The opposing lane on the left shifts all columns left; the order is what matters.
    assert left.mean() + 10 < ahead.mean() < right.mean() - 5, (left, ahead, right)
    assert np.corrcoef(lateral, column)[0, 1] > 0.7


def test_rear_camera_sees_the_road_behind(tmp_path):
    route = synth_dataset(tmp_path, "transfuser4", episodes=1, frames=1, image_size=SMALL,
                          progress=False)[0]
    rear = cv2.imread(str(route / "rgb_rear" / "0000.png"))
    assert _road_column(rear) is not None   # the lead-in road exists behind the start


@pytest.mark.parametrize("kwargs, match", [
    (dict(layout="carla9"), r"unknown layout 'carla9'; synth writes \['bench2drive', "),
    (dict(episodes=0), "episodes must be an integer >= 1"),
    (dict(frames=0), "frames must be an integer >= 1"),
    (dict(seed=-1), "seed must be an integer >= 0"),
    (dict(image_size=(0, 10)), "image_size must be"),
])
def test_bad_arguments_raise_clear_value_errors(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        synth_dataset(tmp_path, **kwargs)
    assert not any(tmp_path.iterdir())


def test_refuses_to_write_over_existing_routes(tmp_path):
    synth_dataset(tmp_path, "tcp", episodes=1, frames=1, image_size=(16, 24), progress=False)
    with pytest.raises(FileExistsError, match="already hold files"):
        synth_dataset(tmp_path, "tcp", episodes=1, frames=1, image_size=(16, 24), progress=False)
