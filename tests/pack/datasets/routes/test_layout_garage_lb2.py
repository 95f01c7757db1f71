"""The garage_lb2 layouts (carla_garage's Leaderboard 2.0 data: PDM-Lite, SimLingo) end to end:
synthetic routes in the real format packed as garage_lb2 (carla_garage's loader conventions)
and garage_lb2_simlingo (SimLingo's), each sample set, route filter and label compared with
formulas written here from the projects' loaders (docs/datasets/garage_lb2.md)."""
from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import numpy as np
import pytest

from carla_wds.codecs import codec_named
from carla_wds.pack.errors import PackError
from carla_wds.pack.synth.garage_lb2 import synth_dataset
from tests import reference_garage
from tests.conftest import read_pack, run_pack

EPISODES, FRAMES = 6, 28
GARAGE_CLASS = {"car": 0, "walker": 1, "traffic_light": 2, "stop_sign": 3, "ego_car": 4}
LIGHT_STATE = {"Red": 0, "Yellow": 1, "Green": 2, "Off": 3, "Unknown": 4}


def gz_json(path: Path):
    with gzip.open(path, "rt") as f:
        return json.load(f)


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("raw_lb2")
    synth_dataset(out, episodes=EPISODES, frames=FRAMES, seed=5, image_size=(32, 64),
                  progress=False)
    return out


def garage_keeps(results: dict) -> bool:
    """carla_garage team_code/data.py: a route is used when score_composed >= 100."""
    return results["scores"]["score_composed"] >= 100.0


def simlingo_keeps(results: dict) -> bool:
    """SimLingo dataset_base.py l.252-262, transcribed: under 100 it stays only when
    score_route > 94 and every infraction is a min-speed or outside-lane one."""
    if results["scores"]["score_composed"] < 100.0:
        cond1 = results["scores"]["score_route"] > 94.0
        cond2 = results["num_infractions"] == (
            len(results["infractions"]["min_speed_infractions"])
            + len(results["infractions"]["outside_route_lanes"]))
        return cond1 and cond2
    return True


# layout -> (route rule, the loader's frame range over num_seq frames, waypoints)
VIEWS = {
    # carla_garage: range(skip_first = 10, num_seq - pred_len(8) - seq_len(1)), 8 waypoints
    "garage_lb2": (garage_keeps, lambda n: range(10, n - 8 - 1), 8),
    # SimLingo: range(10, num_seq - pred_len(11) - hist_len(1) - 1), waypoints[1:-1] = 10
    "garage_lb2_simlingo": (simlingo_keeps, lambda n: range(10, n - 11 - 1 - 1), 10),
}


@pytest.fixture(scope="module", params=sorted(VIEWS))
def packed(request, raw, tmp_path_factory):
    layout = request.param
    out = tmp_path_factory.mktemp(layout) / "shards"
    manifest = run_pack(raw, out, layout=layout)
    return layout, manifest, read_pack(out), out


def _routes(raw: Path) -> list[Path]:
    return sorted(p.parent for p in raw.rglob("measurements"))


def test_sample_set_and_route_filter_are_the_loaders(packed, raw):
    layout, manifest, samples, _ = packed
    keeps, frames, _ = VIEWS[layout]
    want, dropped = set(), []
    for route in _routes(raw):
        episode = route.relative_to(raw).as_posix()
        results = route / "results.json.gz"
        if not keeps(gz_json(results)):
            dropped.append(episode)
            continue
        n = len(list((route / "rgb").iterdir()))   # both loaders count the camera's files
        want |= {f"{episode}/{t:04d}".replace("/", "__") for t in frames(n)}
    assert {f["episode"] for f in manifest["filtered_routes"]} == set(dropped)
    assert set(samples) == want and manifest["total_samples"] == len(want)
    # the synthetic routes exercise both rules: one route only SimLingo keeps, one neither
    results = [gz_json(r / "results.json.gz") for r in _routes(raw)]
    assert any(simlingo_keeps(r) and not garage_keeps(r) for r in results)
    assert any(not simlingo_keeps(r) for r in results)


def _key_route(raw: Path, key: str) -> tuple[Path, int]:
    episode, _, frame = key.rpartition("__")
    return raw / episode.replace("__", "/"), int(frame)


def _decoded(manifest: dict, sample: dict, member: str):
    return codec_named(manifest["members"][member]).decode(sample[member])


def _simlingo_waypoints(meas: list[dict], t: int, n: int) -> np.ndarray:
    """dataset_base.py get_waypoints: origin_rotation.T @ (p - origin), frames t+1..t+n."""
    o = np.array(meas[t]["ego_matrix"])[:3]
    return np.array([(o[:, :3].T @ (np.array(meas[t + i]["ego_matrix"])[:3, 3] - o[:, 3]))[:2]
                     for i in range(1, n + 1)])


def test_waypoints_command_target_point_and_record_as_the_loaders_read_them(packed, raw):
    layout, manifest, samples, _ = packed
    _, _, n_wp = VIEWS[layout]
    assert manifest["pred_len"] == n_wp and manifest["spec"]["rate_hz"] == 4.0
    for key, sample in list(samples.items())[::3]:
        route, t = _key_route(raw, key)
        meas = [gz_json(p) for p in sorted((route / "measurements").glob("*.json.gz"))]
        np.testing.assert_allclose(_decoded(manifest, sample, "waypoints.npy"),
                                   _simlingo_waypoints(meas, t, n_wp), rtol=1e-5, atol=1e-4)
        np.testing.assert_array_equal(_decoded(manifest, sample, "target_point.npy"),
                                      np.float32(meas[t]["target_point"]))
        record = _decoded(manifest, sample, "measurements.npy")
        assert json.loads(sample["meta.json"])["command"] == meas[t]["command"]
        for name in ("command", "next_command", "speed_limit", "target_speed", "changed_route",
                     "light_hazard", "vehicle_hazard", "control_brake", "stop_sign_close"):
            assert record[name] == pytest.approx(meas[t][name], rel=1e-6), name
        np.testing.assert_array_equal(record["target_point_next"],
                                      np.float32(meas[t]["target_point_next"]))
        saved = np.float32(meas[t]["route"])
        assert record["route_raw_len"] == len(saved) == 40
        np.testing.assert_array_equal(record["route_raw"][:len(saved)], saved)


def _equal_spacing(points) -> np.ndarray:
    """SimLingo's equal_spacing_route (dataset_base.py l.539-551), transcribed."""
    route = np.concatenate((np.zeros_like(points[:1]), points))
    shift = np.roll(route, 1, axis=0)
    shift[0] = shift[1]
    dists = np.cumsum(np.linalg.norm(route - shift, axis=1)) + np.arange(len(route)) * 1e-4
    x = np.arange(0, 20, 1)
    return np.array([np.interp(x, dists, route[:, 0]), np.interp(x, dists, route[:, 1])]).T


def _simlingo_routes(m: dict, y: float, yaw: float) -> tuple[np.ndarray, np.ndarray]:
    """load_route: route (route_original padded to 20) and route_adjusted (route as saved)."""
    a = np.deg2rad(yaw)
    rot = np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
    aug = lambda r: (rot.T @ (np.array(r) - np.array([[0.0, y]])).T).T  # noqa: E731
    original = aug(m["route_original"])
    if len(original) < 20:
        original = np.vstack((original, np.tile(original[-1], (20 - len(original), 1))))
    return _equal_spacing(original[:20]), _equal_spacing(aug(m["route"]))


def test_routes_are_each_loaders_with_and_without_the_twin_camera(packed, raw):
    layout, manifest, samples, _ = packed
    for key, sample in list(samples.items())[::2]:
        route, t = _key_route(raw, key)
        m = gz_json(route / "measurements" / f"{t:04d}.json.gz")
        record = _decoded(manifest, sample, "measurements.npy")
        y, yaw = m["augmentation_translation"], m["augmentation_rotation"]
        if layout == "garage_lb2":
            for name, (yy, yy_aw) in (("route", (0.0, 0.0)), ("route_augmented", (y, yaw))):
                np.testing.assert_allclose(record[name], reference_garage.garage_route(
                    m["route"], yy, yy_aw), atol=1e-4)
            continue
        for suffix, (yy, yy_aw) in (("", (0.0, 0.0)), ("_augmented", (y, yaw))):
            want_route, want_adjusted = _simlingo_routes(m, yy, yy_aw)
            np.testing.assert_allclose(record["route" + suffix], want_route, atol=1e-5)
            np.testing.assert_allclose(record["route_adjusted" + suffix], want_adjusted,
                                       atol=1e-5)


def test_boxes_keep_garages_five_classes_and_the_raw_file_keeps_all(packed, raw):
    layout, manifest, samples, _ = packed
    others = set()
    for key, sample in list(samples.items())[::4]:
        route, t = _key_route(raw, key)
        src = gz_json(route / "boxes" / f"{t:04d}.json.gz")
        rows = [[GARAGE_CLASS[e["class"]], *e["position"], *e["extent"], e["yaw"],
                 *(float(e[k]) if e.get(k) is not None else -1.0
                   for k in ("speed", "brake", "num_points", "id", "affects_ego")),
                 LIGHT_STATE[e["state"]] if e["class"] == "traffic_light" else -1.0]
                for e in src if e["class"] in GARAGE_CLASS]
        np.testing.assert_array_equal(_decoded(manifest, sample, "boxes.npy"),
                                      np.float32(rows).reshape(-1, 14))
        assert _decoded(manifest, sample, "boxes_raw.json") == src
        others |= {e["class"] for e in src} - set(GARAGE_CLASS)
    assert {"weather", "ego_info", "landmark", "static_car"} <= others


def test_the_pack_loads_with_carla_web_data(packed):
    from carla_wds import CARLAWebData
    layout, manifest, samples, out = packed
    data = CARLAWebData(str(out), batch_size=4, mode="eval", num_workers=0,
                        image_size=(32, 64), fields=["measurements", "boxes"])
    served = {}
    for batch in data:
        for i, key in enumerate(batch.keys):
            if batch.valid[i]:
                served[key] = batch.waypoints[i].numpy()
    assert sorted(served) == sorted(samples)
    for key, wp in served.items():
        np.testing.assert_array_equal(wp, _decoded(manifest, samples[key], "waypoints.npy"))
