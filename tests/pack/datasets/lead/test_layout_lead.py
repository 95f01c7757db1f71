"""--layout lead on synthetic LEAD routes: the sample set and labels equal LEAD's loader
(kesai-labs/lead@44891760), by formulas written here from its sources; the camera strip is
cut exactly; the pack round-trips through CARLAWebData."""
from __future__ import annotations

import io
import json
import lzma
import math
import os
import pickle
import tarfile
from pathlib import Path

import cv2
import laspy
import numpy as np
import pytest

from carla_wds import CARLAWebData
from carla_wds.pack import PackOptions, pack
from carla_wds.pack.synth.lead import synth_dataset

SIZE = (32, 48)   # (H, W) of each camera of the synthetic strip


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("lead") / "raw"
    synth_dataset(root, episodes=4, frames=20, seed=3, image_size=SIZE, progress=False)
    return root


def _pack(raw: Path, out: Path, **kw) -> dict:
    return pack(raw, out, PackOptions.of(layout="lead", allow_pickle_input=True,
                                         progress=False, **kw))


@pytest.fixture(scope="module")
def packed(raw, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("lead") / "png"
    _pack(raw, out, image_format="png")
    return out


def samples(out: Path) -> list[dict[str, bytes]]:
    """Every sample's members, in shard order."""
    manifest = json.loads((out / "manifest.json").read_text())
    found: dict[str, dict[str, bytes]] = {}
    for s in manifest["shards"]:
        with tarfile.open(out / s["name"]) as tar:
            for m in tar:
                key, _, member = m.name.partition(".")
                found.setdefault(key, {})[member] = tar.extractfile(m).read()
    return [dict(v, __key__=k) for k, v in found.items()]


def read_meta(route: Path, t: int, folder: str = "metas"):
    with lzma.open(route / folder / f"{t:04d}.pkl") as f:   # our own synthetic files
        return pickle.load(f)


# ---- LEAD's rules, from its sources --------------------------------------------------------

def lead_kept(route: Path) -> bool:
    """lead/data_buckets/route_filtering.py route_not_finished + route_failed."""
    if not (route / "results.json").is_file() or not (route / "metas/0000.pkl").is_file():
        return False
    r = json.loads((route / "results.json").read_text())
    inf = r["infractions"]
    bad = not (r["scores"]["score_composed"] == 100.0
               or (r["scores"]["score_composed"] < 100.0
                   and r["num_infractions"] == len(inf["min_speed_infractions"]))
               or (r["status"] == "Completed" and r["num_infractions"]
                   == len(inf["min_speed_infractions"]) + len(inf["outside_route_lanes"]))
               or r["status"] == "Perfect")
    return not bad and not r["status"].startswith("Failed")


def lead_samples(raw: Path) -> list[tuple[Path, int]]:
    """abstract_bucket_collection.py iter_root / iter_route with skip_first = skip_last = 8."""
    out = []
    for scenario in sorted(p for p in raw.iterdir() if p.is_dir()):
        for name in sorted(os.listdir(scenario)):
            route = scenario / name
            if lead_kept(route):
                n = len(os.listdir(route / "bboxes"))
                out += [(route, t) for t in range(8, n - 8)]
    return out


def lead_labels(meta: dict) -> dict[str, np.ndarray]:
    """carla_dataset.py __getitem__ with the planner's config, no perturbation."""
    wp = np.array([meta["future_positions"][i][:2] for i in range(5, 41, 5)])
    pts, cmds = meta["next_target_points_3.25"], meta["next_commands_3.25"]
    merged = []
    for p, c in zip(pts, cmds):
        if len(pts) == 2 or not merged or not np.allclose(p[:2], merged[-1][0][:2]):
            merged.append((p, c))
    x, y, th = meta["pos_global"][0], meta["pos_global"][1], meta["theta"]

    def ego(p):   # inverse_conversion_2d: R(th)^T (p - pos)
        dx, dy = p[0] - x, p[1] - y
        return np.array([math.cos(th) * dx + math.sin(th) * dy,
                         -math.sin(th) * dx + math.cos(th) * dy])
    c = merged[0][1]
    c = 4 if c < 0 else c
    onehot = np.zeros(6)
    onehot[c - 1 if 0 <= c - 1 <= 5 else 3] = 1.0
    tr, rot = meta["perturbation_translation"], math.radians(meta["perturbation_rotation"])
    r = np.array([[math.cos(rot), -math.sin(rot)], [math.sin(rot), math.cos(rot)]])
    return {"waypoints": wp, "target_point": ego(merged[1][0]), "target_command": onehot,
            "next": ego(merged[min(2, len(merged) - 1)][0]), "speed": meta["speed"],
            "wp_perturbated": np.array([r.T @ (w - [0, tr]) for w in wp])}


# ---- tests ---------------------------------------------------------------------------------

def test_the_sample_set_is_lead_loaders(raw, packed):
    want = [f"{r.parent.name}__{r.name}__{t:04d}" for r, t in lead_samples(raw)]
    got = [s["__key__"] for s in samples(packed)]
    assert got == want and len(want) == 3 * 4   # route 3 failed: left out
    manifest = json.loads((packed / "manifest.json").read_text())
    assert [r["episode"].split("/")[1].split("_")[4] for r in manifest["filtered_routes"]] \
        == ["route3"]


def test_labels_equal_lead_loaders(raw, packed):
    by_key = {s["__key__"]: s for s in samples(packed)}
    merged_somewhere = False
    for route, t in lead_samples(raw):
        meta = read_meta(route, t)
        want, s = lead_labels(meta), by_key[f"{route.parent.name}__{route.name}__{t:04d}"]
        for name in ("waypoints", "target_point", "target_command"):
            got = np.load(io.BytesIO(s[f"{name}.npy"]))
            np.testing.assert_allclose(got, want[name], atol=1e-4, err_msg=name)
        assert json.loads(s["speed.json"]) == pytest.approx(want["speed"], abs=1e-6)
        rec = np.load(io.BytesIO(s["measurements.npy"]))
        np.testing.assert_allclose(rec["target_point_next"], want["next"], atol=1e-4)
        np.testing.assert_allclose(rec["waypoints_perturbated"], want["wp_perturbated"],
                                   atol=1e-4)
        merged_somewhere |= len(meta["next_target_points_3.25"]) == 5   # a repeated point
    assert merged_somewhere   # the duplicate-merging rule was exercised


def test_the_strip_is_cut_exactly_into_named_cameras(raw, packed):
    h, w = SIZE
    for s in samples(packed)[:4]:
        scen, route, t = s["__key__"].split("__")
        folder = raw / scen / route
        strip = cv2.cvtColor(cv2.imread(str(folder / f"rgb/{t}.jpg")), cv2.COLOR_BGR2RGB)
        twin = cv2.cvtColor(cv2.imread(str(folder / f"rgb_perturbated/{t}.jpg")),
                            cv2.COLOR_BGR2RGB)
        sem = cv2.imread(str(folder / f"semantics/{t}.png"), cv2.IMREAD_UNCHANGED)
        sem_twin = cv2.imread(str(folder / f"semantics_perturbated/{t}.png"), -1)
        depth = cv2.imread(str(folder / f"depth/{t}.png"), cv2.IMREAD_UNCHANGED)
        for k, cam in enumerate(("front_left", "front", "front_right")):
            png = cv2.cvtColor(cv2.imdecode(np.frombuffer(s[f"{cam}.png"], np.uint8), 1),
                               cv2.COLOR_BGR2RGB)
            assert (png == strip[:, k * w:(k + 1) * w]).all()
            aug = cv2.imdecode(np.frombuffer(s[f"{cam}_augmented.png"], np.uint8), 1)
            assert (cv2.cvtColor(aug, cv2.COLOR_BGR2RGB) == twin[:, k * w:(k + 1) * w]).all()
            got = cv2.imdecode(np.frombuffer(s[f"semantic_{cam}.png"], np.uint8), -1)
            assert (got == sem[:, k * w:(k + 1) * w]).all()
            got = cv2.imdecode(np.frombuffer(s[f"semantic_{cam}_augmented.png"], np.uint8), -1)
            assert (got == sem_twin[:, k * w:(k + 1) * w]).all()
            got = cv2.imdecode(np.frombuffer(s[f"depth_{cam}.png"], np.uint8), -1)
            assert (got == depth[:, k * w // 4:(k + 1) * w // 4]).all()
    manifest = json.loads((packed / "manifest.json").read_text())
    assert manifest["spec"]["strip_cameras"] == ["front_left", "front", "front_right"]
    assert manifest["spec"]["sensor_twins"] == ["semantics_perturbated", "depth_perturbated",
                                                "hdmap_perturbated", "radar_perturbated"]
    assert manifest["image_sizes"] == {c: [h, w] for c in ("front_left", "front", "front_right")}


def test_lidar_radar_boxes_and_metas_are_typed_members(raw, packed):
    s = samples(packed)[0]
    scen, route, t = s["__key__"].split("__")
    folder = raw / scen / route
    las = laspy.read(folder / f"lidar/{t}.laz")
    lidar = np.load(io.BytesIO(s["lidar.npy"]), allow_pickle=False)
    assert lidar.dtype == np.float32 and lidar.shape == (len(las.x), 4)
    np.testing.assert_allclose(lidar[:, :3], las.xyz, atol=1e-4)
    assert (lidar[:, 3] == np.asarray(las["time"])).all()
    radar = np.load(io.BytesIO(s["radar.npy"]), allow_pickle=False)
    with np.load(folder / f"radar/{t}.npz", allow_pickle=False) as z:
        want = np.concatenate([np.c_[z[f"radar{k}"].astype(np.float32),
                                     np.full(len(z[f"radar{k}"]), k)] for k in range(1, 5)])
    assert (radar == want).all()
    boxes = json.loads(s["bboxes.json"])
    raw_boxes = read_meta(folder, int(t), "bboxes")
    assert [b["id"] for b in boxes] == [b["id"] for b in raw_boxes]
    np.testing.assert_allclose(boxes[1]["future_positions"],
                               raw_boxes[1]["future_positions"].astype(np.float64))
    metas = json.loads(s["metas.json"])
    assert metas["sensor_information"]["camera_calibration"]["1"]["width"] == 384
    assert metas["dist_to_pedestrian"] == math.inf and metas["vehicle_door_side"] is None
    assert not any(name.endswith((".pkl", ".pickle")) for name in s)


def test_the_pack_round_trips_through_carlawebdata(packed):
    data = CARLAWebData(str(packed), batch_size=4, image_size=SIZE,
                        fields=["lidar", "radar", "bboxes", "metas", "depth", "semantic",
                                "hdmap", "measurements"])
    batches = list(data)
    assert len(batches) == len(data) == 3
    want = {s["__key__"]: np.load(io.BytesIO(s["waypoints.npy"])) for s in samples(packed)}
    got = {k: w for b in batches for k, w in zip(b.keys, b.waypoints.numpy())}
    assert set(got) == set(want)
    for key, wp in got.items():
        np.testing.assert_allclose(wp, want[key])
    b = batches[0]
    assert b.images.shape == (4, 3, 3, *SIZE) and b.semantics.shape[:2] == (4, 3)
    assert b.lidar.shape[-1] == 4 and b.fields["radar"].shape[-1] == 5
    assert isinstance(b.fields["metas"][0], dict) and b.fields["bboxes"][0][0]["class"] == "ego_car"
    assert set(b.measurements) >= {"waypoints_perturbated", "augmentation_rotation", "command"}


def test_the_twin_is_served_with_lead_loaders_perturbated_labels(packed):
    """twin_p=1: every sample is the rgb_perturbated strip's cameras, its waypoints and target
    point moved as LEAD's perturbate_waypoints / perturbate_target_point move them."""
    by_key = {s["__key__"]: s for s in samples(packed)}
    data = CARLAWebData(str(packed), batch_size=4, image_size=SIZE, twin_p=1.0,
                        fields=["measurements", "semantic", "radar"])
    for b in data:
        assert (b.camera_set == 1).all()
        for k, key in enumerate(b.keys):
            rec = np.load(io.BytesIO(by_key[key]["measurements.npy"]))
            np.testing.assert_allclose(b.waypoints[k].numpy(), rec["waypoints_perturbated"],
                                       atol=1e-4)
            np.testing.assert_allclose(b.target_point[k].numpy(),
                                       rec["target_point_perturbated"], atol=1e-4)
            twin = cv2.imdecode(np.frombuffer(by_key[key]["front_augmented.png"], np.uint8), 1)
            assert (b.images[k, 1].permute(1, 2, 0).numpy() == twin[..., ::-1]).all()
            sem = cv2.imdecode(np.frombuffer(by_key[key]["semantic_front_augmented.png"],
                                             np.uint8), -1)
            assert (b.semantics[k, 1].numpy() == sem).all()   # the sensor twins move too
            radar = np.load(io.BytesIO(by_key[key]["radar_augmented.npy"]))
            assert (b.fields["radar"][k, :len(radar)].numpy() == radar).all()


def test_all_frames_takes_every_frame_whose_metas_hold_the_full_future(raw, tmp_path):
    manifest = _pack(raw, tmp_path / "all", all_frames=True)
    keys = [s["__key__"] for s in samples(tmp_path / "all")]
    # 20 frames of 5 steps: frame t has min(61, 100 - 5 t) future positions, > 40 for t < 12
    assert [k for k in keys if "route0" in k] == [
        f"Accident__Town12_Rep0_3790_0_route0_01_10_05_46_05__{t:04d}" for t in range(12)]
    assert manifest["counts"]["samples"] == 3 * 12 and manifest["sample_rule"]["all_frames"]
