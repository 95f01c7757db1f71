"""Bench2DriveZoo's prepare_B2D.py preprocess on synth bench2drive clips (Thinklab-SJTU/Bench2DriveZoo@10a2e5d).

Branch uniad/vad, commit 10a2e5d (its head). Runs mmcv/datasets/prepare_B2D.py `preprocess`
(the per-frame info dict VAD and UniAD train on: ego state, commands, the expert's controls,
boxes) on the clip folders v1/<clip>, with its defaults (MAX_DISTANCE 75, FILTER_Z_SHRESHOLD 10,
FILTER_INVISINLE True), and reads back the pickle it writes (our own temporary file). Shims: the
module globals DATAROOT and OUT_DIR (its __main__'s paths) point at the clips and a temporary
folder; `open3d`, which vis_utils.py imports for drawing only, is an empty stub module;
matplotlib.cm.get_cmap (gone in matplotlib 3.9) is matplotlib.colormaps.get_cmap;
vis_utils's WINDOW_WIDTH/HEIGHT (1600x900, B2D's cameras) are the synth's image size; the
mmcv package is not imported (the two files are loaded flat, as its __main__ runs them).

Each box is recorded as prepare_B2D keeps it: int id, type_id, wlh size, speed (|(vx, vy)|),
num_points, and its centre moved from prepare's LiDAR frame into its right-handed ego frame by
the frame's own lidar2ego (the one matrix product done here, so that the centre compares with
carla-wds's ego-frame table under --handedness right).
"""
from __future__ import annotations

import importlib
import pickle
import sys
import tempfile
from pathlib import Path

import numpy as np

from tools.golden import common

REPO = "Thinklab-SJTU/Bench2DriveZoo"
COMMIT = "10a2e5d8e5e8277cd53024f453c633ce75858599"
BLOBS = {"mmcv/datasets/prepare_B2D.py": "8054400691e4fade5b848598242e8247a88307f6",
         "mmcv/datasets/vis_utils.py": "281703fc12d27d167fafc7563fe0e516816deb3e"}
# 3 clips (a 4th would class its ego 'vehicle', on which preprocess stops: KeyError 'distance')
# of 28 frames: carla-wds packs frames 0 .. 7 of each (a full 2 s future, --all-frames)
SYNTH = {"layout": "bench2drive", "episodes": 3, "frames": 28, "seed": 24,
         "image_size": [90, 160]}
EXTRA = {"settings": {"MAX_DISTANCE": 75, "FILTER_Z_SHRESHOLD": 10, "FILTER_INVISINLE": True}}


def _box(info: dict, k: int) -> dict:
    box = info["gt_boxes"][k]
    centre = info["sensors"]["LIDAR_TOP"]["lidar2ego"] @ np.append(box[:3], 1.0)
    return {"id": int(info["gt_ids"][k]), "type_id": str(info["gt_names"][k]),
            "centre": common.f32(centre[:3]), "size_wlh": common.f32(box[3:6]),
            "speed": common.f32(np.hypot(box[7], box[8])),
            "num_points": int(info["num_points"][k])}


def _number(value) -> float | None:
    return None if value is None else common.f32(value)


def _sample(info: dict) -> dict:
    vel = info["ego_vel"]
    return {"route": info["folder"].split("/")[-1], "frame": int(info["frame_idx"]),
            "command_far": int(info["command_far"]), "command_near": int(info["command_near"]),
            "command_far_xy": common.f32(info["command_far_xy"]),
            "command_near_xy": common.f32(info["command_near_xy"]),
            "ego_yaw": common.f32(info["ego_yaw"]),
            "ego_translation": common.f32(info["ego_translation"]),
            "speed": _number(vel[0]), "ego_accel": common.f32(info["ego_accel"]),
            "ego_rotation_rate": common.f32(info["ego_rotation_rate"]),
            "ego_size": common.f32(info["ego_size"]),
            "throttle": common.f32(info["throttle"]), "steer": common.f32(info["steer"]),
            "brake": common.f32(info["brake"]),
            "boxes": sorted((_box(info, k) for k in range(len(info["gt_ids"]))),
                            key=lambda b: b["id"])}


def _matplotlib_get_cmap() -> None:
    """matplotlib.cm.get_cmap (removed in matplotlib 3.9; vis_utils.py calls it at import) as
    the function its deprecation message names, matplotlib.colormaps.get_cmap."""
    import matplotlib
    from matplotlib import cm
    if not hasattr(cm, "get_cmap"):
        cm.get_cmap = matplotlib.colormaps.get_cmap


def run(repo_dir: Path, raw: Path) -> list[dict]:
    """Every frame info prepare_B2D's preprocess writes for the clip folders under raw/v1."""
    common.check_pinned(repo_dir, BLOBS, COMMIT)
    common.stub_modules(["open3d"])
    _matplotlib_get_cmap()
    sys.path.insert(0, str(repo_dir / "mmcv" / "datasets"))   # it imports vis_utils flat
    prep = importlib.import_module("prepare_B2D")
    vis = sys.modules["vis_utils"]    # its canvas: B2D's 1600x900 cameras, here the synth's
    vis.WINDOW_HEIGHT, vis.WINDOW_WIDTH = SYNTH["image_size"]   # (H, W)
    folders = sorted(f"v1/{p.name}" for p in (raw / "v1").iterdir() if p.is_dir())
    with tempfile.TemporaryDirectory(prefix="golden_b2d_infos_") as out:
        prep.DATAROOT, prep.OUT_DIR = str(raw), out
        prep.preprocess(folders, 0, "tmp", "train")
        with open(Path(out) / "tmp" / "b2d_infos_train_0.pkl", "rb") as f:
            infos = pickle.load(f)    # written just above by preprocess, from our clips
    return [_sample(info) for info in infos]
