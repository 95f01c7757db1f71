"""TCP's own data preparation and loader on synth tcp_roach routes (OpenDriveLab/TCP@73cc1dd).

Runs tools/gen_data.py gen_sub_folder (writes packed_data.npy per town folder, as TCP's README
says to) and then TCP/data.py CARLA_Data (img_aug=False) over every index. Shims: the module
global `data_path`, which gen_data.py's __main__ sets, is set on the imported module; nothing else.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np

from tools.golden import common

REPO = "OpenDriveLab/TCP"
COMMIT = "73cc1ddfb615439b3f035c0285f5c9ffce350418"
BLOBS = {"TCP/data.py": "0fcebd482a2df57469176b29b5a1ca9e2b70d466",
         "TCP/augment.py": "260a1fe18646affe1c9b376f4537ce5dafeb403b",
         "tools/gen_data.py": "770d6d5044b770b862b0b9090126a2a037ce8be5"}
# 2 Hz routes: 10 frames give 10 - 4 = 6 samples each
SYNTH = {"layout": "tcp_roach", "episodes": 2, "frames": 10, "seed": 24, "image_size": [48, 64]}


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _sample(item: dict, img_path: str) -> dict:
    parts = img_path.strip("/").split("/")          # Town01/routes_town01_00/rgb/0003.png
    command = int(np.argmax(np.asarray(item["target_command"])))
    return {"route": "/".join(parts[:-2]), "frame": int(parts[-1].split(".")[0]),
            "waypoints": common.f32(item["waypoints"]),
            "target_point": common.f32(item["target_point"]),
            "command": command, "speed": common.f32(item["speed"]),
            "action": common.f32(item["action"]),
            "action_mu": common.f32(item["action_mu"]),
            "action_sigma": common.f32(item["action_sigma"]),
            "future_action_mu": common.f32(item["future_action_mu"]),
            "future_action_sigma": common.f32(item["future_action_sigma"]),
            "value": common.f32(item["value"]),
            "feature_sha256": common.f32_digest(item["feature"]),
            "future_feature_sha256": common.f32_digest(np.stack(item["future_feature"]))}


def run(repo_dir: Path, raw: Path) -> list[dict]:
    """Every sample TCP's CARLA_Data serves on the routes under raw."""
    common.check_pinned(repo_dir, BLOBS, COMMIT)
    sys.path.insert(0, str(repo_dir))
    gen = _load(repo_dir / "tools" / "gen_data.py", "tcp_gen_data")
    gen.data_path = str(raw)          # gen_data.py's __main__ sets this global
    towns = sorted(p for p in raw.iterdir() if p.is_dir())
    for town in towns:
        gen.gen_sub_folder(str(town))
    from TCP.data import CARLA_Data   # noqa: E402 - their package, from repo_dir
    data = CARLA_Data(root=str(raw), data_folders=[str(t) for t in towns], img_aug=False)
    return [_sample(data[i], data.front_img[i][0]) for i in range(len(data))]
