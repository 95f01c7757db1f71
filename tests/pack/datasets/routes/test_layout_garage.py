"""The garage (carla_garage / TransFuser++) layout end to end: synthetic routes in the real
on-disk format, packed, and every member compared with the raw file it came from, read the
way carla_garage reads it (gzip JSON, laspy, cv2), and the labels with tests/reference.py's
independent transcription of its loader's formulas."""
from __future__ import annotations

import gzip
import json
import math
import shutil
from pathlib import Path

import cv2
import laspy
import numpy as np
import pytest

from carla_wds.codecs import codec_named
from carla_wds.modalities.boxes import BOX_UNITS
from tests import reference
from tests.conftest import IMAGE_SIZE, read_pack, run_pack
from tests.helpers import built_once, shared_raw

EPISODES, FRAMES, PRED_LEN = 4, 18, 8     # route 3 scores 60 in synth: left out
# what carla_garage's loader reads from a frame's measurements (team_code/data.py
# __getitem__), as the layout names them, plus the counts of padded fields
RECORD_FIELDS = {
    "target_point": ((2,), "float32"), "aim_wp": ((2,), "float32"),
    "route": ((20, 2), "float32"), "route_augmented": ((20, 2), "float32"),
    "route_raw": ((20, 2), "float32"), "route_raw_len": ((), "int32"),
    "command": ((), "int32"), "next_command": ((), "int32"),
    "steer": ((), "float32"), "throttle": ((), "float32"), "brake": ((), "bool"),
    "junction": ((), "bool"), "vehicle_hazard": ((), "bool"), "light_hazard": ((), "bool"),
    "walker_hazard": ((), "bool"), "stop_sign_hazard": ((), "bool"), "angle": ((), "float32"),
    "speed": ((), "float32"), "target_speed": ((), "float32"), "theta": ((), "float32"),
    "augmentation_translation": ((), "float32"), "augmentation_rotation": ((), "float32"),
}
# sample member -> the raw folder it is copied from, byte for byte
SENSOR_FOLDERS = {"front.jpg": "rgb", "front_augmented.jpg": "rgb_augmented",
                  "depth.png": "depth", "depth_augmented.png": "depth_augmented",
                  "semantics.png": "semantics", "semantics_augmented.png": "semantics_augmented",
                  "bev.png": "bev_semantics", "bev_augmented.png": "bev_semantics_augmented"}
GARAGE_CLASS = {"car": 0, "walker": 1, "traffic_light": 2, "stop_sign": 3, "ego_car": 4}
# carla.TrafficLightState's values, which str() names in carla_garage's boxes json
LIGHT_STATE = {"Red": 0, "Yellow": 1, "Green": 2, "Off": 3, "Unknown": 4}


# other modules import these two fixtures, and pytest makes a fixture imported into a module
# that module's own (a session fixture runs once per module that holds it): the folders are
# written once a session (shared_raw, built_once) and shared, read-only, checked unchanged
# on every use


@pytest.fixture(scope="session")
def raw_garage(tmp_path_factory) -> Path:
    return shared_raw(tmp_path_factory, "garage", episodes=EPISODES, frames=FRAMES, seed=3,
                      image_size=IMAGE_SIZE)


@pytest.fixture(scope="session")
def packed_garage(raw_garage, tmp_path_factory) -> Path:
    def build() -> Path:
        out = tmp_path_factory.mktemp("packed_garage") / "shards"
        # every frame with a full future: 18-frame routes hold none of garage's own
        # range(10, 9) (its sample set is tests/pack/test_sample_set.py's); here every member
        # is compared
        run_pack(raw_garage, out, layout="garage", max_samples=7, all_frames=True)
        return out
    return built_once(("packed_garage", str(tmp_path_factory.getbasetemp())), build, "pack")


def gz_json(path: Path):
    with gzip.open(path, "rt") as f:
        return json.load(f)


def route_measurements(route: Path) -> list[dict]:
    return [gz_json(p) for p in sorted((route / "measurements").glob("*.json.gz"))]


def decoded(manifest: dict, sample: dict[str, bytes], member: str):
    """A member decoded by the codec the manifest records for it."""
    return codec_named(manifest["members"][member]).decode(sample[member])


@pytest.fixture(scope="module")
def packed(packed_garage, raw_garage):
    """(manifest, [(sample members, its raw route folder, frame index)])."""
    manifest = json.loads((packed_garage / "manifest.json").read_text())
    rows = []
    for sample in read_pack(packed_garage).values():
        meta = json.loads(sample["meta.json"])
        rows.append((sample, raw_garage / meta["episode"], int(meta["frame"])))
    return manifest, rows


def test_low_score_routes_are_left_out_and_listed(packed, raw_garage):
    manifest, rows = packed
    scores = {r.parent: gz_json(r)["scores"]["score_composed"]
              for r in raw_garage.rglob("results.json.gz")}
    low = sorted(str(r.relative_to(raw_garage)) for r, s in scores.items() if s < 100)
    assert low, "synth should write at least one route scoring below 100"
    listed = manifest["filtered_routes"]
    assert sorted(f["episode"] for f in listed) == low
    assert all("score_composed" in f["reason"] and "< 100" in f["reason"] for f in listed)
    packed_routes = {str(route.relative_to(raw_garage)) for _, route, _ in rows}
    assert packed_routes == {str(r.relative_to(raw_garage)) for r, s in scores.items()
                             if s >= 100}
    # every frame of a kept route is a sample, except the last pred_len (their labels need
    # pred_len future frames)
    for route in packed_routes:
        frames = sorted(t for _, r, t in rows if str(r.relative_to(raw_garage)) == route)
        assert frames == list(range(FRAMES - PRED_LEN))
    assert manifest["total_samples"] == len(rows) == (EPISODES - len(low)) * (FRAMES - PRED_LEN)


def test_waypoints_at_4hz_from_ego_matrix_and_target_point_as_saved(packed):
    manifest, rows = packed
    assert manifest["pred_len"] == PRED_LEN and manifest["spec"]["rate_hz"] == 4.0
    cache: dict[Path, list[dict]] = {}
    for sample, route, t in rows:
        meas = cache.setdefault(route, route_measurements(route))
        want = reference.garage_waypoints(meas, t, pred_len=PRED_LEN)
        wp = decoded(manifest, sample, "waypoints.npy")
        assert wp.shape == (PRED_LEN, 2) and wp.dtype == np.float32
        np.testing.assert_allclose(wp, want, rtol=1e-5, atol=1e-4)
        np.testing.assert_array_equal(decoded(manifest, sample, "target_point.npy"),
                                      np.float32(meas[t]["target_point"]))
        assert json.loads(sample["speed.json"]) == pytest.approx(meas[t]["speed"], rel=1e-6)


def test_the_record_holds_every_field_garage_reads_as_saved(packed):
    manifest, rows = packed
    (extra,) = [e for e in manifest["spec"]["extras"] if e["name"] == "measurements"]
    declared = {f["name"]: (tuple(f["shape"]), f["dtype"]) for f in extra["fields"]}
    assert declared == RECORD_FIELDS
    units = {f["name"]: f["units"] for f in extra["fields"]}
    assert units["speed"] == "m/s" and units["theta"] == "rad"
    assert units["augmentation_rotation"] == "deg" and units["augmentation_translation"] == "m"
    frames = {f["name"]: f["frame"] for f in extra["fields"]}
    assert frames["route"] == frames["route_raw"] == frames["aim_wp"] == "garage"
    assert frames["target_point"] == "garage"
    for sample, route, t in rows:
        rec = decoded(manifest, sample, "measurements.npy")
        src = gz_json(route / "measurements" / f"{t:04d}.json.gz")
        for name, (shape, dtype) in RECORD_FIELDS.items():
            assert rec[name].shape == shape and rec[name].dtype == np.dtype(dtype), name
            if name == "route_raw_len":
                assert int(rec[name]) == len(src["route"])
            elif name in ("route", "route_augmented"):   # test_garage_route.py
                aug = [src[f"augmentation_{k}"] for k in ("translation", "rotation")] \
                    if name == "route_augmented" else [0.0, 0.0]
                np.testing.assert_allclose(rec[name], reference.garage_route(src["route"],
                                                                             *aug), atol=2e-5)
            elif name == "route_raw":
                n = len(src["route"])
                np.testing.assert_array_equal(rec[name][:n], np.float32(src["route"]))
                assert not rec[name][n:].any()
            else:
                np.testing.assert_array_equal(rec[name], np.asarray(src[name], dtype), name)


def _boxes_of(entries: list[dict]) -> np.ndarray:
    """carla_garage's boxes json -> the (K, 14) columns carla_wds.boxes.BOX_COLUMNS documents,
    written here from the column list, not from the packer's code."""
    rows = []
    for e in entries:
        rows.append([GARAGE_CLASS[e["class"]], *e["position"], *e["extent"], e["yaw"],
                     *(float(e[k]) if e.get(k) is not None else -1.0
                       for k in ("speed", "brake", "num_points", "id", "affects_ego")),
                     LIGHT_STATE[e["state"]] if e["class"] == "traffic_light" else -1.0])
    return np.float32(rows).reshape(-1, 14)


def test_boxes_table_and_raw_json_equal_the_boxes_file(packed):
    manifest, rows = packed
    classes = set()
    for sample, route, t in rows:
        src = gz_json(route / "boxes" / f"{t:04d}.json.gz")
        table = decoded(manifest, sample, "boxes.npy")
        assert table.dtype == np.float32 and table.shape == (len(src), 14)
        np.testing.assert_array_equal(table, _boxes_of(src))
        assert decoded(manifest, sample, "boxes_raw.json") == src
        classes |= {e["class"] for e in src}
    assert {"ego_car", "car"} <= classes   # the comparison covered real cars, not only the ego


def test_lights_and_stop_signs_keep_affects_ego_and_state(raw_garage, tmp_path):
    """The columns carla_garage's box filter reads (issue 26): frame 0's boxes file given the
    lights and stop signs its expert writes (data_agent.py get_bounding_boxes: str(state),
    affects_ego a bool), packed, equals the column list's table."""
    raw = tmp_path / "raw"
    shutil.copytree(raw_garage, raw)
    first = sorted(raw.rglob("boxes/0000.json.gz"))[0]
    entries = json.loads(gzip.decompress(first.read_bytes()))
    for i, (state, affects) in enumerate((("Green", False), ("Yellow", True), ("Off", False))):
        entries.append({"class": "traffic_light", "extent": [0.5, 0.5, 1.0],
                        "position": [8.0 + i, -3.0, 0.0], "yaw": 0.0, "distance": 8.0 + i,
                        "state": state, "id": 6100 + i, "affects_ego": affects})
    entries.append({"class": "stop_sign", "extent": [1.5, 1.75, 1.0], "position": [5.0, 2.0, 0.0],
                    "yaw": 0.0, "distance": 5.4, "id": 7100, "affects_ego": False})
    first.write_bytes(gzip.compress(json.dumps(entries).encode()))
    route = first.parent.parent
    run_pack(raw, tmp_path / "shards", layout="garage", all_frames=True)
    manifest = json.loads((tmp_path / "shards" / "manifest.json").read_text())
    for sample in read_pack(tmp_path / "shards").values():
        meta = json.loads(sample["meta.json"])
        if (raw / meta["episode"]) == route and int(meta["frame"]) == 0:
            table = decoded(manifest, sample, "boxes.npy")
            np.testing.assert_array_equal(table, _boxes_of(entries))
            np.testing.assert_array_equal(table[-4:, 12:], [[0, 2], [1, 1], [0, 3], [0, -1]])
            return
    raise AssertionError(f"frame 0 of {route} was not packed")


def test_sensors_and_twins_are_the_raw_files(packed):
    manifest, rows = packed
    for sample, route, t in rows:
        for member, folder in SENSOR_FOLDERS.items():
            name = f"{t:04d}.{member.rsplit('.', 1)[1]}"
            assert sample[member] == (route / folder / name).read_bytes(), member
        # the LAZ is decoded once at pack time: the shard holds laspy's points as float32
        las = laspy.read(str(route / "lidar" / f"{t:04d}.laz"))
        points = decoded(manifest, sample, "lidar.npy")
        assert points.shape == (len(las.points), 3) and len(points) > 100
        np.testing.assert_array_equal(points, np.float32(las.xyz))
        depth8 = cv2.imread(str(route / "depth" / f"{t:04d}.png"), cv2.IMREAD_UNCHANGED)
        np.testing.assert_allclose(decoded(manifest, sample, "depth.png"),
                                   depth8.astype(np.float32) / 255.0 * 50.0, rtol=1e-6)
        sem = cv2.imread(str(route / "semantics_augmented" / f"{t:04d}.png"),
                         cv2.IMREAD_UNCHANGED)
        np.testing.assert_array_equal(decoded(manifest, sample, "semantics_augmented.png"), sem)
        bev = cv2.imread(str(route / "bev_semantics" / f"{t:04d}.png"), cv2.IMREAD_UNCHANGED)
        np.testing.assert_array_equal(decoded(manifest, sample, "bev.png"), bev[None])


def test_manifest_records_members_codecs_dtypes_shapes_units_frames(packed):
    manifest, _ = packed
    assert manifest["layout"] == "garage" and manifest["image_format"] == "jpg"
    assert manifest["members"] == {
        "front.jpg": "jpg", "front_augmented.jpg": "jpg", "speed.json": "json",
        "target_point.npy": "npy", "target_command.npy": "npy", "waypoints.npy": "npy",
        "waypoints_diff.npy": "npy", "meta.json": "json",
        "depth.png": "depth_garage8", "depth_augmented.png": "depth_garage8",
        "semantics.png": "semantics", "semantics_augmented.png": "semantics",
        "bev.png": "bev_classes", "bev_augmented.png": "bev_classes", "lidar.npy": "points",
        "boxes.npy": "npy", "boxes_raw.json": "json", "measurements.npy": "record",
        "ego2world.npy": "npy", "tracks.npy": "npy"}   # issue 27: pose, tracks (docs/poses.md)
    extras = {e["name"]: e for e in manifest["spec"]["extras"]}
    want = {"depth": ("float32", [], "m", None), "semantics": ("uint8", [], "class id", None),
            "bev": ("uint8", [], "class id", None), "lidar": ("float32", [None, 3], "m", None),
            "boxes": ("float32", [None, 14], BOX_UNITS, None),
            "ego2world": ("float64", [4, 4], extras["ego2world"]["units"], None)}
    for name, (dtype, shape, units, twin_of) in want.items():
        e = extras[name]
        assert (e["dtype"], e["shape"], e["units"], e["twin_of"]) == (dtype, shape, units,
                                                                      twin_of), name
    for twin, of in (("front_augmented", "front"), ("depth_augmented", "depth"),
                     ("semantics_augmented", "semantics"), ("bev_augmented", "bev")):
        assert extras[twin]["twin_of"] == of
    assert extras["lidar"]["frame"] == extras["boxes"]["frame"] == "garage"
    assert (extras["ego2world"]["frame"], extras["ego2world_rh"]["frame"]) == (
        "carla_world", "carla_world_rh") and "from ego_matrix" in extras["ego2world"]["units"]
    assert manifest["spec"]["frames"] == {k: "garage" for k in
                                          ("waypoints", "target_point", "route", "boxes", "lidar")}


def test_augmentation_values_move_the_twin_camera(packed):
    """The twin's recorded shift is that frame's: frame 0 has none (garage's collector), the
    others some, within the collector's ranges (|y| <= 1 m, |yaw| <= 5 deg)."""
    manifest, rows = packed
    for sample, _, t in rows:
        rec = decoded(manifest, sample, "measurements.npy")
        y, yaw = float(rec["augmentation_translation"]), float(rec["augmentation_rotation"])
        assert abs(y) <= 1.0 and abs(yaw) <= 5.0
        assert (t == 0) == (y == 0.0 and yaw == 0.0)
        assert math.isfinite(y) and math.isfinite(yaw)
