"""Synthetic transfuser2022 and tcp_roach raw layouts, read back the way each project reads them.

Every decoder here is the project's own code transcribed (TransFuser 2022 data.py get_depth and
decode_pil_to_npy, data_agent.py get_relative_transform and get_points_in_bbox), not
carla_wds's, so a writer and a reader cannot share a mistake. The np.load(allow_pickle=True)
calls read pickles this test just wrote (trusted), as the projects' loaders do.
"""
from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import cv2
import numpy as np
import pytest

from carla_wds.datasets.transfuser import BevTf2022Codec
from carla_wds.modalities import DepthCarla24Codec
from carla_wds.pack.synth import transfuser2022 as synth_tf2022
from carla_wds.pack.synth import synth_dataset
from tests import reference

FRAMES = 10
SIZE = (32, 96)           # (height, width) of the whole strip: three 32x32 views
TF_FOLDERS = {"rgb": ("", ".png"), "depth": ("", ".png"), "semantics": ("", ".png"),
              "lidar": ("", ".npy"), "topdown": ("encoded_", ".png"),
              "label_raw": ("", ".json"), "measurements": ("", ".json")}
CARLA_IDS = {6, 7, 8, 13, 22}   # road line, road, sidewalk, sky, terrain


def _tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _json(path: Path):
    return json.loads(path.read_text())


# --- transfuser@22b3ccd, transcribed -----------------------------------------------------------

def tf_get_depth_metres(path: Path) -> np.ndarray:
    """data.py: cv2.imread, BGR2RGB, get_depth's dot / (2^24 - 1), times 1000 (before its clip)."""
    data = cv2.cvtColor(cv2.imread(str(path), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
    normalized = np.dot(data.astype(np.float32), [65536.0, 256.0, 1.0])
    normalized /= (256 * 256 * 256 - 1)
    return 1000 * normalized


def tf_decode_pil_to_npy(img):
    """data.py decode_pil_to_npy without its final [10:12] selection."""
    (channels, width, height) = (15, img.shape[1], img.shape[2])
    bev_array = np.zeros([channels, width, height])
    for ix in range(5):
        bit_pos = 8 - ix - 1
        bev_array[[ix, ix + 5, ix + 5 + 5]] = (img & (1 << bit_pos)) >> bit_pos
    return bev_array


def tf_get_relative_transform(ego_matrix, vehicle_matrix):
    relative_pos = vehicle_matrix[:3, 3] - ego_matrix[:3, 3]
    rot = ego_matrix[:3, :3].T
    relative_pos = rot @ relative_pos
    relative_pos[1] = - relative_pos[1]
    rot = np.eye(3)
    trans = - np.array([1.3, 0.0, 2.5])
    return rot @ relative_pos + trans


def tf_get_points_in_bbox(ego_matrix, vehicle_matrix, dx, lidar):
    rot = np.array([[0, 1, 0], [-1, 0, 0], [0, 0, 1]], dtype=np.float32)
    Tr_lidar_2_ego = np.eye(4)
    Tr_lidar_2_ego[0, 3], Tr_lidar_2_ego[1, 3], Tr_lidar_2_ego[2, 3] = 1.3, 0.0, 2.5
    Tr_lidar_2_ego[:3, :3] = rot
    Tr_lidar_2_vehicle = np.linalg.inv(vehicle_matrix) @ ego_matrix @ Tr_lidar_2_ego
    lidar_vehicle = Tr_lidar_2_vehicle[:3, :3] @ lidar[1][:, :3].T + Tr_lidar_2_vehicle[:3, 3:]
    x, y, z = dx / 2.
    x, y = y, x
    return ((lidar_vehicle[0] < x) & (lidar_vehicle[0] > -x) &
            (lidar_vehicle[1] < y) & (lidar_vehicle[1] > -y) &
            (lidar_vehicle[2] < z) & (lidar_vehicle[2] > -z)).sum()


# --- transfuser2022 -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tf(tmp_path_factory):
    out = tmp_path_factory.mktemp("tf2022")
    routes = synth_dataset(out, layout="transfuser2022", episodes=2, frames=FRAMES, seed=3,
                           image_size=SIZE, progress=False)
    return out, routes


def test_tf2022_structure(tf):
    out, routes = tf
    assert len(routes) == 2 and routes == sorted(routes)
    for ep, route in enumerate(routes):
        scenario, town, name = route.relative_to(out).parts
        assert scenario == "Scenario1" and town == f"Town{ep % 5 + 1:02d}_Scenario1"
        assert name == f"{town}_route{ep}_01_01_00_00_00"
        assert sorted(p.name for p in route.iterdir()) == sorted(TF_FOLDERS)
        for folder, (prefix, ext) in TF_FOLDERS.items():
            names = sorted(p.name for p in (route / folder).iterdir())
            assert names == [f"{prefix}{t:04d}{ext}" for t in range(FRAMES)], folder


def test_tf2022_images(tf):
    _, routes = tf
    route = routes[0]
    rgb = cv2.imread(str(route / "rgb" / "0004.png"), cv2.IMREAD_UNCHANGED)
    assert rgb.shape == (*SIZE, 3) and rgb.dtype == np.uint8
    sem = cv2.imread(str(route / "semantics" / "0004.png"), cv2.IMREAD_UNCHANGED)
    assert sem.shape == SIZE and sem.dtype == np.uint8
    assert set(np.unique(sem).tolist()) <= CARLA_IDS and 7 in sem   # the road is seen
    assert (sem[0] == 13).all()                                     # the top row is sky
    # depth: TransFuser's own decode gives the synthetic depth within the 24-bit step
    path = route / "depth" / "0004.png"
    want = synth_tf2022.strip_depth(SIZE)
    step = 1000.0 / (2 ** 24 - 1)
    got = tf_get_depth_metres(path)
    np.testing.assert_allclose(got, want, rtol=0, atol=step)
    np.testing.assert_allclose(DepthCarla24Codec().decode(path.read_bytes()), want, rtol=2e-7,
                               atol=step)
    assert got[0].min() == pytest.approx(1000.0) and got[-1].max() < 10.0   # sky far, road near
    assert DepthCarla24Codec().check(path.read_bytes()) is None


def test_tf2022_default_strip_is_three_320x160_views(tmp_path):
    route, = synth_dataset(tmp_path, layout="transfuser2022", episodes=1, frames=1, seed=0,
                           progress=False)
    rgb = cv2.imread(str(route / "rgb" / "0000.png"), cv2.IMREAD_UNCHANGED)
    assert rgb.shape == (160, 960, 3)
    depth = tf_get_depth_metres(route / "depth" / "0000.png")
    # fov 60 on 320 px: f = 160 / tan(30 deg); the bottom row sees the ground at f * h / 79.5
    f = 160 / math.tan(math.radians(30))
    assert depth[-1, 480] == pytest.approx(f * 1.6 / 79.5, abs=1e-3)
    assert synth_tf2022.strip_widths(960) == [320, 320, 320]


def _lidar(route: Path, t: int):
    return np.load(route / "lidar" / f"{t:04d}.npy", allow_pickle=True)   # data.py's read


def test_tf2022_lidar_is_a_pickled_frame_points_tuple(tf):
    _, routes = tf
    got = _lidar(routes[0], 3)
    assert got.dtype == object and got.shape == (2,)
    frame, points = got[0], got[1]
    assert isinstance(frame, int) and frame == _lidar(routes[0], 2)[0] + 10   # 10 ticks a save
    assert points.dtype == np.float32 and points.ndim == 2 and points.shape[1] == 4
    assert 20000 <= len(points) <= 40000 and np.isfinite(points).all()   # a 64-channel sweep
    # the road plane is 2.5 m under the sensor; intensities in [0, 1]
    ground = np.abs(points[:, 2] + 2.5) < 0.1
    assert ground.mean() > 0.5 and (points[:, 3] >= 0).all() and (points[:, 3] <= 1).all()


def test_tf2022_label_raw_and_lidar_agree(tf):
    _, routes = tf
    checked = 0
    for route in routes:
        for t in (1, 6):
            labels = _json(route / "label_raw" / f"{t:04d}.json")
            meas = _json(route / "measurements" / f"{t:04d}.json")
            lidar = _lidar(route, t)
            ego = labels[0]
            assert ego["class"] == "Car" and ego["num_points"] == -1 and ego["distance"] == -1
            assert ego["position"] == [-1.3, 0.0, -2.5] and ego["yaw"] == 0
            assert ego["ego_matrix"] == meas["ego_matrix"]
            ego_m = np.array(ego["ego_matrix"])
            assert len(labels) >= 2
            for car in labels[1:]:
                assert car["class"] == "Car" and car["id"] != ego["id"]
                car_m = np.array(car["ego_matrix"])
                np.testing.assert_allclose(car["position"], tf_get_relative_transform(ego_m, car_m),
                                           atol=1e-9)
                assert car["distance"] == pytest.approx(np.linalg.norm(car["position"]))
                assert np.linalg.norm(car_m[:2, 3] - ego_m[:2, 3]) < 50.0
                h, l, w = car["extent"]   # height first, full sizes
                assert 1.4 < h < 2.0 and 4.0 < l < 5.5 and 1.8 < w < 2.3
                dx = np.array([l, w, h])
                assert car["num_points"] == tf_get_points_in_bbox(ego_m, car_m, dx, lidar)
                # the LiDAR hits the car: points in its full box, taken in the sensor frame
                # (x left, y forward) where the label frame is (forward - 1.3, left)
                pts = lidar[1]
                c, s = math.cos(car["yaw"]), math.sin(car["yaw"])
                fx, ly = pts[:, 1] - car["position"][0], pts[:, 0] - car["position"][1]
                along, across = c * fx - s * ly, s * fx + c * ly   # label yaw is CARLA's (to the right)
                inside = ((np.abs(along) < l / 2 + 0.05) & (np.abs(across) < w / 2 + 0.05)
                          & (pts[:, 2] > -2.45) & (pts[:, 2] < -2.5 + h + 0.05))
                assert inside.sum() >= 20
                checked += 1
    assert checked >= 4


def test_tf2022_topdown_planes(tf):
    _, routes = tf
    route = routes[1]
    data = (route / "topdown" / "encoded_0005.png").read_bytes()
    # data.py: imread, BGR2RGB, moveaxis, decode_pil_to_npy; its [10:12] are road and lane
    bgr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
    assert bgr.shape == (500, 500, 3)
    planes = tf_decode_pil_to_npy(np.moveaxis(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB), -1, 0))
    codec = BevTf2022Codec().decode(data)
    np.testing.assert_array_equal(planes[10:12], codec[0:2])
    road, lane, vehicle = codec[0], codec[1], codec[5]
    assert road[250, 250] == 1 and lane.sum() > 0 and (lane <= road).all()
    labels = _json(route / "label_raw" / "0005.json")
    for car in labels[1:]:   # each car's centre, forward up and right to the right at 5 px/m
        f, r = car["position"][0] + 1.3, -car["position"][1]
        row, col = int(round(250 - 5 * f)), int(round(250 + 5 * r))
        if 2 <= row < 498 and 2 <= col < 498:
            assert vehicle[row - 1:row + 2, col - 1:col + 2].all()
    assert codec[10:15].any(axis=(1, 2)).all()   # future vehicles in every future plane


def test_tf2022_measurements(tf):
    _, routes = tf
    meas = [_json(routes[0] / "measurements" / f"{t:04d}.json") for t in range(FRAMES)]
    keys = {"x", "y", "theta", "speed", "target_speed", "x_command", "y_command", "command",
            "waypoints", "steer", "throttle", "brake", "junction", "vehicle_hazard",
            "light_hazard", "walker_hazard", "stop_sign_hazard", "angle", "ego_matrix"}
    for t, m in enumerate(meas):
        assert set(m) == keys
        mat = np.array(m["ego_matrix"])
        yaw = math.atan2(mat[1, 0], mat[0, 0])
        # GNSS (lat ~ -y, lon ~ x) and compass (yaw + 90 deg, in [0, 2 pi)) of the world pose
        assert m["x"] == pytest.approx(-mat[1, 3]) and m["y"] == pytest.approx(mat[0, 3])
        assert 0.0 <= m["theta"] < 2 * math.pi
        assert math.cos(m["theta"] - yaw - math.pi / 2) == pytest.approx(1.0)
        np.testing.assert_allclose(mat, reference.carla_matrix(mat[0, 3], mat[1, 3], 0.0,
                                                               math.degrees(yaw)), atol=1e-12)
        assert isinstance(m["brake"], bool) and 1 <= m["command"] <= 6
        assert len(m["waypoints"]) == 4 and all(len(w) == 3 for w in m["waypoints"])
        if t + 1 < FRAMES:   # the expert's forecast holds the next frames' poses
            assert m["waypoints"][0] == pytest.approx([meas[t + 1][k] for k in "xy"] +
                                                      [meas[t + 1]["theta"]])
    moving = [t for t in range(FRAMES - 4) if meas[t]["speed"] > 2.0]
    assert moving
    for t in moving:   # TF-2022's own labels: forward waypoints, the route target ahead
        ref = reference.transfuser2022_waypoints(meas, t)
        assert ref["ego_waypoint"][-1, 0] > 0.0
        assert np.isfinite(ref["target_point"]).all()


def test_tf2022_deterministic_and_refuses_busy(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for out in (a, b):
        synth_dataset(out, layout="transfuser2022", episodes=2, frames=3, seed=4,
                      image_size=(16, 48), progress=False)
    assert _tree_digest(a) == _tree_digest(b)
    with pytest.raises(FileExistsError, match="already hold files"):
        synth_dataset(a, layout="transfuser2022", episodes=2, frames=3, seed=4,
                      image_size=(16, 48), progress=False)
    c = tmp_path / "c"
    synth_dataset(c, layout="transfuser2022", episodes=2, frames=3, seed=5, image_size=(16, 48),
                  progress=False)
    assert _tree_digest(c) != _tree_digest(a)   # the seed matters


# --- tcp_roach ----------------------------------------------------------------------------------

ROACH_FOLDERS = ("rgb", "measurements", "supervision", "bev")
ROACH_MEAS_KEYS = {"x", "y", "theta", "speed", "x_command_far", "y_command_far", "command_far",
                   "x_command_near", "y_command_near", "command_near", "should_brake",
                   "x_target", "y_target", "target_command"}


@pytest.fixture(scope="module")
def roach(tmp_path_factory):
    out = tmp_path_factory.mktemp("roach")
    routes = synth_dataset(out, layout="tcp_roach", episodes=3, frames=FRAMES * 2, seed=2,
                           image_size=(48, 64), progress=False)
    return out, routes


def test_roach_structure_and_tcp_images(roach, tmp_path):
    out, routes = roach
    tcp = synth_dataset(tmp_path / "tcp", layout="tcp", episodes=3, frames=FRAMES * 2, seed=2,
                        image_size=(48, 64), progress=False)
    assert [r.relative_to(out) for r in routes] == [r.relative_to(tmp_path / "tcp") for r in tcp]
    for route, tcp_route in zip(routes, tcp):
        assert sorted(p.name for p in route.iterdir()) == sorted(ROACH_FOLDERS)
        for folder, ext in (("rgb", "png"), ("measurements", "json"), ("supervision", "npy"),
                            ("bev", "png")):
            assert sorted(p.name for p in (route / folder).iterdir()) == \
                [f"{t:04d}.{ext}" for t in range(FRAMES * 2)]
        # the same episode as tcp's: same images, same poses and route targets
        assert _tree_digest(route / "rgb") == _tree_digest(tcp_route / "rgb")
        for t in (0, 7):
            m, mt = (_json(r / "measurements" / f"{t:04d}.json") for r in (route, tcp_route))
            assert set(m) == ROACH_MEAS_KEYS
            for k in ("x", "y", "theta", "speed", "x_target", "y_target", "target_command"):
                assert m[k] == mt[k], k
    bev = cv2.imread(str(routes[0] / "bev" / "0003.png"), cv2.IMREAD_UNCHANGED)
    assert bev.shape == (192, 384, 3) and not bev[:, 192:].any(axis=2).all()


def _sup(route: Path, t: int) -> dict:
    arr = np.load(route / "supervision" / f"{t:04d}.npy", allow_pickle=True)   # TCP's read
    assert arr.dtype == object and arr.shape == ()
    return arr.item()


def test_roach_supervision_dicts(roach):
    _, routes = roach
    sups = [(route, t, _sup(route, t)) for route in routes for t in range(FRAMES * 2)]
    for route, t, d in sups:
        assert set(d) == {"action", "value", "action_mu", "action_sigma", "features", "speed",
                          "target_gps", "target_command", "should_brake", "only_ap_brake"}
        for key, shape in (("action", (3,)), ("action_mu", (2,)), ("action_sigma", (2,)),
                           ("features", (256,)), ("target_gps", (3,))):
            assert d[key].dtype == np.float32 and d[key].shape == shape, key
        assert isinstance(d["value"], np.float32)
        assert d["target_command"].dtype == np.int8 and d["target_command"].shape == (1,)
        assert isinstance(d["should_brake"], bool) and isinstance(d["only_ap_brake"], bool)
        assert (d["action_mu"] > 0).all() and (d["action_sigma"] > 0).all()   # Beta params
        throttle, steer, brake = d["action"].tolist()
        assert 0 <= throttle <= 1 and -1 <= steer <= 1 and 0 <= brake <= 1
        if d["should_brake"]:   # run_step's collision-detector override
            assert throttle == 0.0 and brake == 1.0
        assert not d["only_ap_brake"] or d["should_brake"]
        m = _json(route / "measurements" / f"{t:04d}.json")
        assert d["speed"] == m["speed"] and d["should_brake"] == m["should_brake"]
        assert int(d["target_command"][0]) == m["target_command"]
        # Roach's own acc (Beta mean, mapped to [-1, 1]) brakes unless only the detector did
        acc = 2 * d["action_mu"][0] / (d["action_mu"][0] + d["action_sigma"][0]) - 1
        if d["only_ap_brake"]:
            assert acc > 0
        elif brake > 0.5 and not d["should_brake"]:
            assert acc < 0
    assert any(d["should_brake"] for _, _, d in sups)
    assert any(d["only_ap_brake"] for _, _, d in sups)


def test_roach_deterministic_and_refuses_busy(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for out in (a, b):
        synth_dataset(out, layout="tcp_roach", episodes=2, frames=4, seed=1, image_size=(16, 32),
                      progress=False)
    assert _tree_digest(a) == _tree_digest(b)
    with pytest.raises(FileExistsError, match="already hold files"):
        synth_dataset(a, layout="tcp_roach", episodes=2, frames=4, seed=1, image_size=(16, 32),
                      progress=False)


def test_modules_refuse_other_layouts_and_bad_args(tmp_path):
    from carla_wds.pack.synth import roach as synth_roach
    with pytest.raises(ValueError, match="transfuser2022"):
        synth_tf2022.synth_dataset(tmp_path, layout="garage")
    with pytest.raises(ValueError, match="tcp_roach"):
        synth_roach.synth_dataset(tmp_path, layout="tcp")
    with pytest.raises(ValueError, match="frames"):
        synth_dataset(tmp_path, layout="transfuser2022", frames=0)
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("layout", ["tcp_roach", "transfuser2022"])
def test_cli_synth(cli, tmp_path, layout):
    result = cli("synth", tmp_path / "raw", "--layout", layout, "--episodes", "1", "--frames",
                 "2", "--image-size", "16x48")
    assert result.exit_code == 0, result.output
    assert "wrote 1 route of 2 frames" in result.output
    assert len(list((tmp_path / "raw").rglob("measurements/0001.json"))) == 1


def test_roach_packs_to_its_supervision(roach, tmp_path):
    """tcp_roach synth + pack --allow-pickle-input: each sample's measurements record holds
    that frame's supervision values (the layout's fields read what the synth wrote)."""
    from carla_wds.load import CARLAWebData
    from tests.conftest import run_pack
    out, _ = roach
    shards = tmp_path / "shards"
    run_pack(out, shards, layout="tcp_roach", allow_pickle_input=True, max_samples=16)
    data = CARLAWebData(str(shards), batch_size=4, mode="eval", image_size=(48, 64),
                        fields=["measurements"], brake_override=False)
    seen = 0
    for batch in data:
        for i, key in enumerate(batch.keys):
            if not batch.valid[i]:
                continue
            episode, frame = key.rsplit("__", 1)
            d = _sup(out / episode.replace("__", "/"), int(frame))
            m = {k: v[i].numpy() for k, v in batch.measurements.items()}
            np.testing.assert_array_equal(m["action"], d["action"])
            np.testing.assert_array_equal(m["action_mu"], d["action_mu"])
            np.testing.assert_array_equal(m["feature"], d["features"])
            assert bool(m["only_ap_brake"]) == d["only_ap_brake"]
            seen += 1
    assert seen == 3 * (FRAMES * 2 - 4)
