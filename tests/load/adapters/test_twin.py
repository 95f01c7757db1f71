"""carla_garage's camera twin (CARLAWebData(twin_p=...)): when a sample's augmented camera set
is drawn, every label moves with the camera as garage's own loader moves it (team_code/data.py
__getitem__ at 1448bed: augment_target_point, augment_route, get_waypoints, align for the
LiDAR, get_bbox_label for the boxes), the draw is a function of (seed, epoch, key) only, and
batch.camera_set says which set each sample got."""
from __future__ import annotations

import functools
import gzip
import json
from pathlib import Path

import laspy
import numpy as np
import pytest
import torch

from carla_wds.codecs import codec_named
from carla_wds.lidar import lidar_to_histogram_features
from carla_wds.load import CARLAWebData
from tests import reference
from tests.conftest import make_raw, read_pack
# every frame with a full future: short garage routes hold none of garage's own range
from tests.conftest import run_pack_all_frames as run_pack
# fixtures:
from tests.pack.datasets.routes.test_layout_garage import packed_garage, raw_garage  # noqa: F401
from tests.load.test_semantic_classes import GARAGE as GARAGE_CLASSES
from tests.load.test_semantic_classes import GARAGE_IDS

SIZE = (48, 64)            # the synthetic cameras' (H, W) (conftest.IMAGE_SIZE): no resize
ALL = ["depth", "semantics", "bev", "lidar", "boxes", "measurements"]
SHORT_ROUTE = 7            # rows kept in the routes of the padding test


def gz_json(path: Path):
    with gzip.open(path, "rt") as f:
        return json.load(f)


def rot(yaw_deg: float) -> np.ndarray:
    a = np.deg2rad(yaw_deg)
    return np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])


def garage_align(points: np.ndarray, y: float, yaw_deg: float) -> np.ndarray:
    """carla_garage data.py align(lidar, m, m, y, yaw) for seq_len 1 (the frame's own
    measurements on both sides, so only the augmentation step moves the cloud), through
    transfuser_utils.algin_lidar: (Rz(yaw).T @ (lidar - (0, y, 0)).T).T."""
    a = np.deg2rad(yaw_deg)
    rz = np.array([[np.cos(a), -np.sin(a), 0.0], [np.sin(a), np.cos(a), 0.0], [0.0, 0.0, 1.0]])
    return (rz.T @ (np.asarray(points, np.float64) - np.array([0.0, y, 0.0])).T).T


def garage_box(entry: dict, y: float, yaw_deg: float) -> tuple[np.ndarray, float]:
    """carla_garage data.py get_bbox_label: ((x, y) moved, yaw moved and normalised)."""
    pos = rot(yaw_deg).T @ (np.array(entry["position"][:2], np.float64) - np.array([0.0, y]))
    yaw = (entry["yaw"] - np.deg2rad(yaw_deg)) % (2 * np.pi)   # transfuser_utils.normalize_angle
    return pos, yaw - 2 * np.pi if yaw > np.pi else yaw


def sources(packed: Path, raw: Path) -> dict[str, tuple[dict, Path, int]]:
    """key -> (the sample's members, its raw route folder, frame)."""
    out = {}
    for key, sample in read_pack(packed).items():
        meta = json.loads(sample["meta.json"])
        out[key] = (sample, raw / meta["episode"], int(meta["frame"]))
    return out


def batches(packed: Path, **kw) -> list:
    kw = {"batch_size": 6, "image_size": SIZE, "seed": 4, **kw}
    return list(CARLAWebData(str(packed), **kw))


def rows(batch_list) -> list[tuple[int, object]]:
    return [(i, b) for b in batch_list for i in range(len(b)) if bool(b.valid[i])]


@functools.lru_cache(maxsize=None)
def route_measurements(route: Path) -> list[dict]:
    return [gz_json(p) for p in sorted((route / "measurements").glob("*.json.gz"))]


def _check_labels(b, i: int, route: Path, t: int, y: float, yaw: float) -> None:
    meas = route_measurements(route)
    m = meas[t]
    np.testing.assert_allclose(b.target_point[i], reference.garage_augment_target_point(
        m["target_point"], y, yaw), atol=1e-4)
    np.testing.assert_allclose(b.measurements["target_point"][i], b.target_point[i], atol=1e-6)
    np.testing.assert_allclose(b.measurements["aim_wp"][i], reference.garage_augment_target_point(
        m["aim_wp"], y, yaw), atol=1e-4)
    # the saved route moves with the camera; batch.route is garage's smoothed one, smoothed
    # after the move (the twin's own pack-time version when the twin camera is served)
    n = int(b.measurements["route_raw_len"][i])
    assert n == len(m["route"])
    raw_route = b.measurements["route_raw"][i]
    np.testing.assert_allclose(raw_route[:n], reference.garage_augment_route(m["route"], y, yaw),
                               atol=1e-4)
    assert not raw_route[n:].any(), "route padding must stay zero"
    np.testing.assert_allclose(b.route[i], reference.garage_route(m["route"], y, yaw), atol=1e-4)
    wp = reference.garage_waypoints(meas, t, 8, y, yaw)
    np.testing.assert_allclose(b.waypoints[i], wp, atol=1e-4)
    np.testing.assert_allclose(b.waypoints_diff[i], np.diff(np.vstack([[0, 0], wp]), axis=0),
                               atol=1e-4)


def _check_lidar_boxes(b, i: int, route: Path, t: int, y: float, yaw: float) -> None:
    cloud = laspy.read(str(route / "lidar" / f"{t:04d}.laz")).xyz
    n = int(b.lidar_len[i])
    assert n == len(cloud) and not b.lidar[i, n:].any()
    np.testing.assert_allclose(b.lidar[i, :n], garage_align(cloud, y, yaw), atol=1e-4)
    entries = gz_json(route / "boxes" / f"{t:04d}.json.gz")
    assert int(b.boxes_len[i]) == len(entries)
    for row, entry in zip(b.boxes[i].numpy(), entries):
        pos, box_yaw = garage_box(entry, y, yaw)
        np.testing.assert_allclose(row[1:3], pos, atol=1e-4)
        assert row[7] == pytest.approx(box_yaw, abs=1e-5)
        assert row[3] == pytest.approx(entry["position"][2])   # height: garage leaves z alone


def _check_sensors(b, i: int, sample: dict, suffix: str, codecs: dict[str, str]) -> None:
    def dec(member):
        return codec_named(codecs[member]).decode(sample[member])
    np.testing.assert_array_equal(b.images[i, 0].permute(1, 2, 0), dec(f"front{suffix}.jpg"))
    np.testing.assert_array_equal(b.depth[i, 0], dec(f"depth{suffix}.png"))
    # batch.semantics holds garage's training classes (config.converter) of the saved ids
    classes = np.array([GARAGE_CLASSES.get(c, 0) for c in range(GARAGE_IDS)], np.uint8)
    np.testing.assert_array_equal(b.semantics[i, 0], classes[dec(f"semantics{suffix}.png")])
    np.testing.assert_array_equal(b.bev[i], dec(f"bev{suffix}.png"))


@pytest.mark.parametrize("twin_p", [1.0, 0.0])
def test_the_chosen_set_and_its_labels_are_garages(packed_garage, raw_garage, twin_p):  # noqa: F811
    src = sources(packed_garage, raw_garage)
    codecs = json.loads((packed_garage / "manifest.json").read_text())["members"]
    got = batches(packed_garage, fields=ALL, twin_p=twin_p)
    moved = 0
    for i, b in rows(got):
        assert isinstance(b.camera_set, torch.Tensor) and b.camera_set.shape == (len(b),)
        assert b.camera_set.dtype == torch.int8 and int(b.camera_set[i]) == int(twin_p)
        sample, route, t = src[b.keys[i]]
        m = gz_json(route / "measurements" / f"{t:04d}.json.gz")
        y, yaw = ((m["augmentation_translation"], m["augmentation_rotation"]) if twin_p
                  else (0.0, 0.0))
        moved += abs(y) > 0.05
        _check_labels(b, i, route, t, y, yaw)
        _check_lidar_boxes(b, i, route, t, y, yaw)
        _check_sensors(b, i, sample, "_augmented" if twin_p else "", codecs)
    assert len(rows(got)) == len(src)
    assert (moved > len(src) // 2) == bool(twin_p)   # the moves were not all near zero


def test_the_lidar_histogram_is_of_the_moved_cloud(packed_garage, raw_garage):  # noqa: F811
    src = sources(packed_garage, raw_garage)
    for i, b in rows(batches(packed_garage, fields=["lidar"], lidar_histogram="garage",
                             twin_p=1.0)):
        _, route, t = src[b.keys[i]]
        m = gz_json(route / "measurements" / f"{t:04d}.json.gz")
        cloud = garage_align(laspy.read(str(route / "lidar" / f"{t:04d}.laz")).xyz,
                             m["augmentation_translation"], m["augmentation_rotation"])
        want = lidar_to_histogram_features(np.float32(cloud), "garage")
        assert b.lidar.shape[1:] == want.shape
        assert np.abs(b.lidar[i].numpy() - want).sum() <= 2 / 5   # a point on a bin edge


@pytest.fixture(scope="module")
def short_routes(tmp_path_factory) -> tuple[Path, Path]:
    """A garage pack whose saved routes have SHORT_ROUTE points (the end of a route), so
    the record pads them with zero rows."""
    raw = make_raw(tmp_path_factory.mktemp("raw_short"), "garage", episodes=2, frames=11,
                   seed=8)
    for path in raw.rglob("measurements/*.json.gz"):
        m = gz_json(path)
        m["route"] = m["route"][:SHORT_ROUTE]
        path.write_bytes(gzip.compress(json.dumps(m).encode()))
    out = tmp_path_factory.mktemp("packed_short") / "shards"
    run_pack(raw, out, layout="garage", max_samples=4)
    return raw, out


def test_route_padding_stays_zero_when_the_twin_moves_it(short_routes):
    raw, packed = short_routes
    src = sources(packed, raw)
    for i, b in rows(batches(packed, batch_size=2, fields=["route"], twin_p=1.0)):
        _, route, t = src[b.keys[i]]
        m = gz_json(route / "measurements" / f"{t:04d}.json.gz")
        y, yaw = m["augmentation_translation"], m["augmentation_rotation"]
        raw_route = b.measurements["route_raw"][i]
        assert int(b.measurements["route_raw_len"][i]) == SHORT_ROUTE
        assert not raw_route[SHORT_ROUTE:].any()
        np.testing.assert_allclose(raw_route[:SHORT_ROUTE], reference.garage_augment_route(
            m["route"], y, yaw), atol=1e-4)
        # garage pads a short route by its last point before smoothing: no zero rows here
        np.testing.assert_allclose(b.route[i], reference.garage_route(m["route"], y, yaw),
                                   atol=1e-4)


def _choices(packed: Path, epoch: int = 0, seed: int = 4, **kw) -> dict[str, int]:
    world = kw.pop("world_size", 1)
    out = {}
    for rank in range(world):
        data = CARLAWebData(str(packed), batch_size=3, image_size=SIZE, seed=seed, twin_p=0.5,
                            rank=rank, world_size=world, **kw)
        data.set_epoch(epoch)
        for b in data:
            out.update({k: int(c) for k, c, v in zip(b.keys, b.camera_set, b.valid) if v})
    return out


def test_the_choice_is_a_function_of_seed_epoch_and_key(packed_garage):  # noqa: F811
    base = _choices(packed_garage)
    assert 0.2 < sum(base.values()) / len(base) < 0.8      # p = 0.5 draws both sets
    for kw in (dict(num_workers=2), dict(world_size=2, num_workers=1), dict(shuffle_buffer=1)):
        other = _choices(packed_garage, **kw)
        common = base.keys() & other.keys()
        assert len(common) > len(base) // 2
        assert all(base[k] == other[k] for k in common), kw
    for changed in (_choices(packed_garage, epoch=1), _choices(packed_garage, seed=5)):
        common = base.keys() & changed.keys()
        assert sum(base[k] != changed[k] for k in common) >= 3


def test_eval_never_uses_the_twin(packed_garage):  # noqa: F811
    data = CARLAWebData(str(packed_garage), batch_size=4, mode="eval", image_size=SIZE,
                        twin_p=1.0)
    assert all(not b.camera_set[b.valid].any() for b in data)


def test_twin_p_is_checked(packed_garage, packed_tcp):  # noqa: F811
    with pytest.raises(ValueError, match="probability"):
        CARLAWebData(str(packed_garage), batch_size=4, image_size=SIZE, twin_p=1.5)
    with pytest.raises(ValueError, match="twin"):
        CARLAWebData(str(packed_tcp), batch_size=4, image_size=(48, 64), twin_p=0.5)
