"""Map vectors per sample at load time (issue 42): CARLAWebData(..., overlays=Overlays(map=
MAP_PACK)) on a real synth Bench2Drive pack and a real map pack of the synth's maps. Each
sample's VAD map GT and UniAD lane GT equal their get_map_info written here again from
Bench2DriveZoo@10a2e5d (B2D_vad_dataset.py l.245-300, B2D_e2e_dataset.py l.290-366,
prepare_B2D.py l.147-190 and l.252, map_utils/struct.py l.76-93) on their inputs: the clip's
own anno world2lidar and the synth's raw map read with numpy's unpickler (trusted here),
resampled with shapely as theirs. Also the refusals and the loader's promises."""
from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import cv2
import numpy as np
import pytest
from shapely.geometry import LineString

from carla_wds.load import CARLAWebData, Overlays
from carla_wds.pack.datasets.bench2drive.hdmap_pack import pack_maps
from tests.conftest import run_pack
from tests.helpers import all_keys, shared_raw

CLASSES = {"Broken": 0, "Solid": 1, "SolidSolid": 2, "Center": 3, "TrafficLight": 4,
           "StopSign": 5}                                   # B2D_vad_dataset.py l.57
PC_RANGE = np.array([-15.0, -30.0, -2.0, 15.0, 30.0, 2.0])  # VAD_base_e2e_b2d.py l.9
FIXED_NUM = 20                                               # VAD_base_e2e_b2d.py l.131
LEFT2RIGHT = np.diag([1.0, -1.0, 1.0, 1.0])
LEFTHAND_EGO_TO_LIDAR = np.array([[0, 1, 0, 0], [1, 0, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1.0]])


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> Path:
    # test_hdmap's clips (read only): towns Town12 and Town13
    return shared_raw(tmp_path_factory, "bench2drive", episodes=3, frames=30, seed=5,
                      image_size=(54, 96))


@pytest.fixture(scope="module")
def shards(raw, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("map_vectors") / "shards"
    run_pack(raw / "archives", out, layout="bench2drive", stride=1)
    return out


@pytest.fixture(scope="module")
def maps(raw, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("map_vectors_pack") / "maps"
    pack_maps(raw / "maps", out, allow_pickle=True, progress=False)
    return out


def their_map_info(path: Path) -> dict:
    """prepare_B2D.py gengrate_map l.151-188 on one file."""
    info = {"lane_points": [], "lane_sample_points": [], "lane_types": [],
            "trigger_volumes_points": [], "trigger_volumes_types": []}
    for road in dict(np.load(path, allow_pickle=True)["arr"]).values():
        for lane_id, lane in road.items():
            if lane_id == "Trigger_Volumes":
                for volume in lane:
                    points = np.array(volume["Points"], np.float64)
                    points[:, 1] *= -1
                    info["trigger_volumes_points"].append(points)
                    info["trigger_volumes_types"].append(volume["Type"])
                continue
            for single in lane:
                points = np.array([p[0] for p in single["Points"]], np.float64)
                points[:, 1] *= -1
                n = len(points)
                idx = [50 * i for i in range(n // 50 + 1)] if n % 50 else \
                    [50 * i for i in range(n // 50)]
                info["lane_points"].append(points)
                info["lane_sample_points"].append(points[idx + [n - 1]])
                info["lane_types"].append(single["Type"])
    return info


def their_vectors(info: dict, world2lidar: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """B2D_vad_dataset.py get_map_info l.245-300 and LiDARInstanceLines'
    fixed_num_sampled_points (struct.py l.76-93)."""
    ego_xy = np.linalg.inv(world2lidar)[0:2, 3]
    r = PC_RANGE
    chosen = [i for i, s in enumerate(info["lane_sample_points"])
              if np.min(np.linalg.norm(s[:, 0:2] - ego_xy, axis=-1)) < 50]
    lines, labels = [], []

    def in_range(p):
        return (p[:, 0] > r[0]) & (p[:, 0] < r[3]) & (p[:, 1] > r[1]) & (p[:, 1] < r[4])
    for i in chosen:
        if info["lane_types"][i] not in CLASSES:
            continue
        p = info["lane_points"][i]
        p = (world2lidar @ np.concatenate([p, np.ones((len(p), 1))], axis=-1).T).T
        kept = p[in_range(p), 0:2]
        if len(kept) > 1:
            lines.append(LineString(kept))
            labels.append(CLASSES[info["lane_types"][i]])
    for p, kind in zip(info["trigger_volumes_points"], info["trigger_volumes_types"]):
        if kind not in CLASSES:
            continue
        p = (world2lidar @ np.concatenate([p, np.ones((len(p), 1))], axis=-1).T).T
        if in_range(p).all():
            lines.append(LineString(np.concatenate((p[:, 0:2], p[0:1, 0:2]), axis=0)))
            labels.append(CLASSES[kind])
    pts = np.array([[list(line.interpolate(d).coords)[0]
                     for d in np.linspace(0, line.length, FIXED_NUM)] for line in lines],
                   np.float64).reshape(-1, FIXED_NUM, 2).astype(np.float32)
    pts[..., 0] = np.clip(pts[..., 0], -15, 15)
    pts[..., 1] = np.clip(pts[..., 1], -30, 30)
    return pts, np.array(labels, np.int64)


def their_lanes(info: dict, world2lidar: np.ndarray) -> tuple[np.ndarray, ...]:
    """UniAD's B2D_e2e_dataset.py get_map_info l.290-366 (base_e2e_b2d.py l.9, l.11; bev
    (200, 200), l.30): (masks, labels, bboxes)."""
    ego_xy = np.linalg.inv(world2lidar)[0:2, 3]
    r, patch, bev = np.array([-51.2, -51.2, -5.0, 51.2, 51.2, 3.0]), [102.4, 102.4], (200, 200)
    masks, labels, boxes = [], [], []

    def add(points, kind, volume):
        p = (world2lidar @ np.concatenate([points, np.ones((len(points), 1))], axis=-1).T).T
        mask = (p[:, 0] > r[0]) & (p[:, 0] < r[3]) & (p[:, 1] > r[1]) & (p[:, 1] < r[4])
        kept = p[mask, 0:2]
        if (mask.all() if volume else len(kept) > 1):
            gt = np.zeros(bev, dtype=np.uint8)
            norm = np.zeros_like(kept)
            norm[:, 0] = (kept[:, 0] + patch[0] / 2) * (bev[0] / patch[0])
            norm[:, 1] = (kept[:, 1] + patch[1] / 2) * (bev[1] / patch[1])
            if volume:
                cv2.fillConvexPoly(gt, norm.astype(np.int32), color=1)
            else:
                cv2.polylines(gt, [norm.astype(np.int32)], False, color=1, thickness=2)
            ys, xs = np.where(gt == 1)
            masks.append(gt)
            labels.append(CLASSES[kind])
            boxes.append([min(xs), min(ys), max(xs), max(ys)])
    for i, s in enumerate(info["lane_sample_points"]):
        if np.min(np.linalg.norm(s[:, 0:2] - ego_xy, axis=-1)) < 100 and \
                info["lane_types"][i] in CLASSES:
            add(info["lane_points"][i], info["lane_types"][i], False)
    for p, kind in zip(info["trigger_volumes_points"], info["trigger_volumes_types"]):
        if kind in CLASSES:
            add(p, kind, True)
    if not masks:
        masks, labels, boxes = [np.zeros(bev, dtype=np.uint8)], [-1], [[0, 0, 0, 0]]
    return np.stack(masks), np.array(labels), np.array(boxes)


def their_world2lidar(raw: Path, key: str) -> np.ndarray:
    """prepare_B2D.py l.252 on the frame's own anno."""
    clip, frame = key.rsplit("__", 1)
    with gzip.open(raw / "v1" / clip / "anno" / f"{int(frame):05d}.json.gz", "rt") as f:
        anno = json.load(f)
    return LEFTHAND_EGO_TO_LIDAR @ np.array(anno["sensors"]["LIDAR_TOP"]["world2lidar"]) \
        @ LEFT2RIGHT


def served_rows(shards: Path, maps: Path, map_gt=None, **kw
                ) -> dict[str, dict[str, np.ndarray]]:
    out = {}
    for batch in CARLAWebData(str(shards), batch_size=4, mode="eval",
                              overlays=Overlays(map=str(maps), map_gt=map_gt), **kw):
        names = [n for n in batch.fields if n.startswith(("map_", "gt_lane_"))]
        for i, (key, ok) in enumerate(zip(batch.keys, batch.valid.tolist())):
            if ok:
                out[key] = {n: batch.fields[n][i].numpy() for n in names}
    return out


def served(shards: Path, maps: Path, **kw) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    out = {}
    for batch in CARLAWebData(str(shards), batch_size=4, mode="eval",
                              overlays=Overlays(map=str(maps)), **kw):
        for key, ok, pts, labels in zip(batch.keys, batch.valid.tolist(),
                                        batch.fields["map_pts"], batch.fields["map_labels"]):
            if ok:
                assert key not in out
                out[key] = (pts.numpy(), labels.numpy())
    return out


@pytest.mark.parametrize("workers", [0, 2])
def test_vad_map_vectors_equal_their_get_map_info(raw, shards, maps, workers):
    infos = {t: their_map_info(raw / "maps" / f"{t}_HD_map.npz") for t in ("Town12", "Town13")}
    got = served(shards, maps, num_workers=workers)
    assert sorted(got) == sorted(all_keys(shards))
    seen = set()
    for key, (pts, labels) in got.items():
        want_pts, want_labels = their_vectors(infos[key.split("_")[1]],
                                              their_world2lidar(raw, key))
        assert pts.dtype == np.float32 and labels.dtype == np.int64, key
        assert labels.tolist() == want_labels.tolist(), key
        np.testing.assert_allclose(pts, want_pts, atol=2e-5, err_msg=key)
        seen |= set(labels.tolist())
    assert {0, 1, 3} <= seen and seen & {4, 5}, seen   # lanes and trigger volumes both met


def test_uniad_lane_labels_equal_their_get_map_info(raw, shards, maps):
    infos = {t: their_map_info(raw / "maps" / f"{t}_HD_map.npz") for t in ("Town12", "Town13")}
    got = served_rows(shards, maps, num_workers=1)
    assert sorted(got) == sorted(all_keys(shards))
    seen = set()
    for key, row in got.items():
        masks, labels, boxes = their_lanes(infos[key.split("_")[1]],
                                           their_world2lidar(raw, key))
        assert row["gt_lane_masks"].dtype == np.uint8 and row["gt_lane_masks"].shape[1:] == \
            (200, 200), key
        assert row["gt_lane_labels"].tolist() == labels.tolist(), key
        assert row["gt_lane_bboxes"].tolist() == boxes.tolist(), key
        np.testing.assert_array_equal(row["gt_lane_masks"], masks, err_msg=key)
        seen |= set(labels.tolist())
    assert {0, 1, 3} <= seen and seen & {4, 5}, seen


VAD_KEYS, UNIAD_KEYS = {"map_pts", "map_labels"}, {"gt_lane_labels", "gt_lane_bboxes",
                                                   "gt_lane_masks"}


def test_map_gt_computes_only_the_named_models_arrays(shards, maps):
    """Overlays(map_gt=("vad",)) serves VAD's arrays alone, ("uniad",) UniAD's, each equal to
    the same arrays served with both."""
    both = served_rows(shards, maps)
    for parts, keys in ((("vad",), VAD_KEYS), (("uniad",), UNIAD_KEYS), ("vad", VAD_KEYS)):
        got = served_rows(shards, maps, map_gt=parts)
        assert sorted(got) == sorted(both)
        for key, row in got.items():
            assert set(row) == keys, (parts, key)
            for name in keys:
                np.testing.assert_array_equal(row[name], both[key][name], err_msg=key)
    assert all(set(row) == VAD_KEYS | UNIAD_KEYS for row in both.values())


@pytest.mark.parametrize("overlays, says", [
    ({"map_gt": ("vad", "occ")}, "expected some of ['vad', 'uniad']"),
    ({"map_gt": ()}, "expected some of ['vad', 'uniad']"),
    ({"map_gt": ("vad",), "map": None}, "without map=")])
def test_a_wrong_map_gt_is_refused_in_one_line(shards, maps, overlays, says):
    with pytest.raises(ValueError) as exc:
        CARLAWebData(str(shards), batch_size=4,
                     overlays=Overlays(**{"map": str(maps), **overlays}))
    assert says in str(exc.value) and "\n" not in str(exc.value), exc.value


def test_history_windows_get_each_frames_own_map(shards, maps):
    plain = served(shards, maps)
    seen = 0
    for batch in CARLAWebData(str(shards), batch_size=4, mode="eval",
                              overlays=Overlays(map=str(maps)), history=2):
        for frames, pts, labels in zip(batch.frame_keys, batch.fields["map_pts"],
                                       batch.fields["map_labels"]):
            assert len(pts) == len(labels) == 3
            for key, p, lab in zip(frames, pts, labels):
                if not key:   # padding: before the route's start
                    assert p is None and lab is None
                    continue
                assert lab.tolist() == plain[key][1].tolist()
                np.testing.assert_array_equal(p.numpy(), plain[key][0])
                seen += 1
    assert seen > len(plain)


def test_loader_promises_hold_with_map(shards, maps):
    data = CARLAWebData(str(shards), batch_size=5, mode="eval", num_workers=2,
                        overlays=Overlays(map=str(maps)))
    batches = list(data)
    assert len(batches) == len(data)
    keys = [k for b in batches for k, ok in zip(b.keys, b.valid.tolist()) if ok]
    assert sorted(keys) == sorted(all_keys(shards)) and len(set(keys)) == len(keys)
    for b in batches:   # one entry per row; None exactly where a row is padding
        assert [p is not None for p in b.fields["map_pts"]] == b.valid.tolist()
    train = CARLAWebData(str(shards), batch_size=4, mode="train", num_workers=1,
                         overlays=Overlays(map=str(maps)), seed=3)
    assert sum(1 for _ in train) == len(train)


def test_a_town_without_map_is_refused_in_one_line(raw, shards, tmp_path):
    for town, at_construction in (("Town12", True), ("Town13", False)):
        kept = tmp_path / f"without_{town}"
        kept.mkdir()
        for f in (raw / "maps").iterdir():
            if not f.name.startswith(town):
                shutil.copy(f, kept / f.name)
        pack = tmp_path / f"pack_{town}"
        pack_maps(kept, pack, allow_pickle=True, progress=False)
        with pytest.raises(ValueError, match=f"names the town '{town}', which has no map") as e:
            data = CARLAWebData(str(shards), batch_size=4, mode="eval",
                                overlays=Overlays(map=str(pack)))
            assert not at_construction, "the first shard's first sample names it"
            list(data)
        assert "\n" not in str(e.value) and "Fix:" in str(e.value)


def test_a_folder_that_is_not_a_map_pack_is_refused(shards, maps, tmp_path):
    with pytest.raises(ValueError, match="holds no maps.json") as e:
        CARLAWebData(str(shards), batch_size=4, overlays=Overlays(map=str(tmp_path)))
    assert "\n" not in str(e.value)
    bad = tmp_path / "bad"
    shutil.copytree(maps, bad)
    town = next(bad.glob("*.npz"))
    town.write_bytes(town.read_bytes()[:-10])
    with pytest.raises(ValueError, match="does not match the sha256"):
        served(shards, bad)


def test_the_distance_rule_looks_at_sample_points_only():
    """A lane crossing the range counts only when one of its sample points (every 50th and
    the last) lies within 50 m (VAD) / 100 m (UniAD) of the LiDAR: built by hand, the rules
    the synth's short lanes never reach, against the rewrites above."""
    from carla_wds.datasets.bench2drive_map import TownArrays, map_gt
    ego2world = np.eye(4)   # the LiDAR at (-0.39, 0, 1.84) in CARLA's world
    lanes = [np.stack([np.linspace(-120, 120, n), np.full(n, y), np.zeros(n)], 1)
             for n, y in ((101, 3.0), (61, -4.0), (400, 8.0), (4, 1.0))]
    lanes[3][:, 0] = [60.0, 10.0, -10.0, -60.0]   # sample points (0 and 3) 60 m off
    types = ["Broken", "Solid", "Center", "SolidSolid"]
    volume = np.array([[5.0, 5.0, 0.0], [7.0, 5.0, 0.0], [7.0, 7.0, 0.0], [5.0, 7.0, 0.0]])
    right = [p * [1, -1, 1] for p in lanes]            # the pack's frame: y negated
    town = TownArrays(np.concatenate(right), np.cumsum([0] + [len(p) for p in right]),
                      tuple(types), volume * [1, -1, 1], np.array([0, 4]), ("StopSign",))
    info = {"lane_points": right, "lane_types": types,
            "lane_sample_points": [p[[*range(0, len(p), 50)][:len(p) // 50 +
                                     (1 if len(p) % 50 else 0)] + [len(p) - 1]]
                                   for p in right],
            "trigger_volumes_points": [volume * [1, -1, 1]],
            "trigger_volumes_types": ["StopSign"]}
    mount = np.eye(4)
    mount[:3, 3] = (-0.39, 0.0, 1.84)
    w2l = LEFTHAND_EGO_TO_LIDAR @ np.linalg.inv(ego2world @ mount) @ LEFT2RIGHT
    got = map_gt(town, ego2world)
    want_pts, want_labels = their_vectors(info, w2l)
    masks, labels, boxes = their_lanes(info, w2l)
    # VAD: the 61- and 3-point lanes cross the range but their sample points lie 60-80 m off
    assert got["map_labels"].tolist() == want_labels.tolist() == [0, 3, 5]
    np.testing.assert_allclose(got["map_pts"], want_pts, atol=1e-5)
    assert got["gt_lane_labels"].tolist() == labels.tolist() == [0, 1, 3, 2, 5]   # 100 m
    assert got["gt_lane_bboxes"].tolist() == boxes.tolist()
    np.testing.assert_array_equal(got["gt_lane_masks"], masks)
