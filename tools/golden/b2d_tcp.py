"""Bench2DriveZoo's TCP port on synth bench2drive clips (Thinklab-SJTU/Bench2DriveZoo@31278ff).

Branch tcp/admlp, commit 31278ff (its head). Runs tools/gen_tcp_data.py gen_single_route on each
extracted clip folder (v1/<clip>) and gen_sub_folder on their results (it writes
tcp_bench2drive-train.npy into the working folder, as its __main__ does), then TCP/data.py
CARLA_Data(root, data_path, img_aug=False) over every index. Shims: gen_single_route's `count`
is a multiprocessing.Value as its __main__ passes; the working folder is a temporary one; the
clip folders are given directly instead of get_folder_path's hard-coded 'YOUR_PATH' and
val_list (the synth's clip names are in neither split of it). Nothing else.
"""
from __future__ import annotations

import importlib
import multiprocessing as mp
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

from tools.golden import common

REPO = "Thinklab-SJTU/Bench2DriveZoo"
COMMIT = "31278ffeb0fda22a1e43d3f59c1cb7f997baf2d3"
BLOBS = {"TCP/data.py": "a0ea190a303d8cdbff91257cb07131651c426963",
         "TCP/augment.py": "fcadf95ac5992fa7b05a22648be9a7449fc84df7",
         "tools/gen_tcp_data.py": "e6bbafcace6f1fa36159de7d287729b1e34cd2eb"}
# 10 Hz clips: the port serves frames 0 .. n - 27 of each (every frame, not only keyframes);
# 3 clips cover the synth's quirks: a NaN compass (clip 1) and `speed: null` (clip 2), frame 5
SYNTH = {"layout": "bench2drive", "episodes": 3, "frames": 40, "seed": 24,
         "image_size": [36, 64]}


def _sample(item: dict, img_path: str) -> dict:
    parts = Path(img_path).parts                     # .../v1/<clip>/camera/rgb_front/00003.jpg
    speed = item["speed"]                            # the anno's value as is: null stays None
    return {"route": parts[-4], "frame": int(parts[-1].split(".")[0]),
            "waypoints": common.f32(item["waypoints"]),
            "target_point": common.f32(item["target_point"]),
            "command": int(np.argmax(np.asarray(item["target_command"]))),
            "speed": None if speed is None else common.f32(speed),
            "action": common.f32(item["action"]),
            "action_index": int(item["action_index"]),
            "future_action_index": [int(a) for a in item["future_action_index"]],
            "value": common.f32(item["value"]),
            "feature_len": int(np.asarray(item["feature"]).size),
            "feature_sha256": common.f32_digest(item["feature"]),
            "future_feature_sha256": common.f32_digest(np.stack(item["future_feature"]))}


def clip_routes(repo_dir: Path, raw: Path):
    """Pins checked, their code importable; their gen_tcp_data module and its
    gen_single_route result for each clip folder under raw/v1 (sorted), `count` a
    multiprocessing.Value as its __main__ passes. Shared with tools/golden/b2d_tcp_batches.py."""
    common.check_pinned(repo_dir, BLOBS, COMMIT)
    sys.path[:0] = [str(repo_dir), str(repo_dir / "tools")]   # TCP.data; gen_tcp_data (flat)
    gen = importlib.import_module("gen_tcp_data")
    count = mp.Value("d", 0)
    clips = sorted(p for p in (raw / "v1").iterdir() if p.is_dir())
    return gen, [gen.gen_single_route(str(clip), count) for clip in clips]


def run(repo_dir: Path, raw: Path) -> list[dict]:
    """Every sample the port's CARLA_Data serves on the clip folders under raw/v1."""
    gen, routes = clip_routes(repo_dir, raw)
    from TCP.data import CARLA_Data   # noqa: E402 - their package, from repo_dir
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="golden_b2d_npy_") as work:
        os.chdir(work)                # gen_sub_folder saves into the working folder
        try:
            gen.gen_sub_folder(routes)
            data = CARLA_Data(root=str(raw), data_path=str(Path(work) / "tcp_bench2drive-train.npy"),
                              img_aug=False)
            return [_sample(data[i], data.front_img[i][0]) for i in range(len(data))]
        finally:
            os.chdir(cwd)
