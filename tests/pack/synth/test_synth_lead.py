"""`carla-wds synth --layout lead`: LEAD's route structure as its expert writes it
(kesai-labs/lead@44891760 expert_data.py), byte-identical for the same arguments."""
from __future__ import annotations

import json
import lzma
import pickle
import subprocess
import sys
import zipfile

import cv2
import numpy as np

from carla_wds.pack.synth.lead import write_route_zips
from tools.golden.common import tree_sha256


def _synth(out, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "carla_wds.cli", "synth", str(out), "--layout",
                           "lead", "--episodes", "2", "--frames", "3", "--image-size",
                           "16x24", *extra], capture_output=True, text=True, timeout=300)


def test_the_cli_writes_leads_route_structure_byte_identically(tmp_path):
    assert _synth(tmp_path / "a").returncode == 0
    assert _synth(tmp_path / "b").returncode == 0
    assert tree_sha256(tmp_path / "a") == tree_sha256(tmp_path / "b")
    route = tmp_path / "a" / "Accident" / "Town12_Rep0_3790_0_route0_01_10_05_46_05"
    assert sorted(p.name for p in route.iterdir()) == sorted([
        "bboxes", "depth", "depth_perturbated", "hdmap", "hdmap_perturbated", "lidar", "metas",
        "radar", "radar_perturbated", "results.json", "rgb", "rgb_perturbated", "semantics",
        "semantics_perturbated"])
    strip = cv2.imread(str(route / "rgb" / "0002.jpg"))
    assert strip.shape == (16, 3 * 24, 3)   # image_size is (H, W) of each camera
    assert cv2.imread(str(route / "depth" / "0002.png"), -1).shape == (4, 3 * 6)
    with lzma.open(route / "metas" / "0001.pkl") as f:   # our own file: plain pickle.load
        meta = pickle.load(f)
    assert isinstance(meta["future_positions"], np.ndarray) and meta["speed"] >= 0
    assert meta["sensor_information"]["num_cameras"] == 3
    with lzma.open(route / "bboxes" / "0001.pkl") as f:
        boxes = pickle.load(f)
    assert boxes[0]["class"] == "ego_car" and boxes[1]["future_positions"].dtype == np.float16
    # what LEAD's get_bbox_labels reads of each box (carla_dataset_utils.py, expert_data.py
    # l.1353-1570): brake a float, the grouped semantic id, the occlusion counts
    for box in boxes:
        assert isinstance(box["brake"], float) and 0.0 <= box["brake"] <= 1.0, box
        assert box["transfuser_semantics_id"] == (0 if box["class"] == "ego_car" else 1)
        assert {"num_points", "visible_pixels", "speed", "extent", "yaw", "position"} <= set(box)
    # semantics saved grouped (save_grouped_semantic): TransFuser's ids, road 2, lines 5
    for folder in ("semantics", "semantics_perturbated"):
        ids = set(np.unique(cv2.imread(str(route / folder / "0002.png"), -1)).tolist())
        assert ids <= set(range(10)) and 2 in ids, (folder, ids)
    # hdmap as their expert saves it (chauffeurnet.py): 256 x 256 at 2 px/m, ChauffeurNet ids
    # (no actors, none past 8: their loader's converter has 9 entries), forward along +column:
    # the road runs through the ego's row (128) ahead of it
    for folder in ("hdmap", "hdmap_perturbated"):
        hd = cv2.imread(str(route / folder / "0002.png"), -1)
        assert hd.shape == (256, 256) and set(np.unique(hd).tolist()) <= set(range(5)), folder
        assert (hd[120:136, 140:250] == 1).any() and (hd[120:136, 140:250] > 0).mean() > 0.5
    assert json.loads((route / "results.json").read_text())["status"] == "Perfect"
    zips = write_route_zips([route], tmp_path / "zips")
    with zipfile.ZipFile(zips[0]) as z:
        assert "data/carla_leaderboard2/data/Accident/" + route.name + "/metas/0001.pkl" \
            in z.namelist()


def test_a_bad_image_size_is_refused_before_anything_is_written(tmp_path):
    result = _synth(tmp_path / "out", "--image-size", "15x24")
    assert result.returncode != 0 and "multiples of 4" in result.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("*.jpg"))
