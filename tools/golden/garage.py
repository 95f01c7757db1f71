"""carla_garage's own loader on synth garage routes (autonomousvision/carla_garage@1448bed).

Runs team_code/data.py CARLA_Data with team_code/config.py GlobalConfig().initialize(root,
setting='all') and these settings, so that each index is deterministic: augment = 0 (the
un-augmented camera, which its loader serves with probability 1 - augment_percentage),
use_color_aug = 0, and use_wp_gru = True (its option that makes the loader return ego_waypoints;
the sample set and every other label do not depend on it). Shims: `carla` is a stub module
(config.py builds a weather table from carla.WeatherParameters; the data path never calls CARLA).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from tools.golden import common

REPO = "autonomousvision/carla_garage"
COMMIT = "1448bed63642bfe7c25e49e79e15713b20d104e6"
BLOBS = {"team_code/data.py": "77f8e7e915977f041ec7c487855b428e720a7d9e",
         "team_code/config.py": "1f5eb16ddf64427665245e274f593c79bc970f0b",
         "team_code/transfuser_utils.py": "a4dfacbca2787872010b21e8192ed608930bb83d",
         "team_code/gaussian_target.py": "adea40dc1c5c0150227bd74da33c00df6cb1d825",
         "team_code/center_net.py": "0bdcd6dd7072e67a2c4f28b8323fa3332fd470eb"}
# 4 Hz routes; garage skips the first 10 frames and the last pred_len + seq_len = 9
SYNTH = {"layout": "garage", "episodes": 2, "frames": 24, "seed": 24, "image_size": [48, 64]}
SETTINGS = {"augment": 0, "use_color_aug": 0, "use_wp_gru": True}
EXTRA = {"settings": SETTINGS}


def _hist(ids: np.ndarray) -> dict[str, int]:
    values, counts = np.unique(np.asarray(ids), return_counts=True)
    return {str(int(v)): int(c) for v, c in zip(values, counts)}


def _sample(item: dict, meas_dir: str, start: int, raw: Path) -> dict:
    route = str(Path(meas_dir).parent.relative_to(raw))
    return {"route": route, "frame": int(start),
            "waypoints": common.f32(item["ego_waypoints"]),
            "target_point": common.f32(item["target_point"]),
            "aim_wp": common.f32(item["aim_wp"]),
            "route_points": common.f32(item["route"]),
            "command": int(np.argmax(item["command"])),
            "next_command": int(np.argmax(item["next_command"])),
            "speed": common.f32(item["speed"]), "theta": common.f32(item["theta"]),
            "steer": common.f32(item["steer"]), "throttle": common.f32(item["throttle"]),
            "brake": bool(item["brake"]), "junction": bool(item["junction"]),
            "semantics_hist": _hist(item["semantic"]),
            "bev_semantics_hist": _hist(item["bev_semantic"])}


def run(repo_dir: Path, raw: Path) -> list[dict]:
    """Every sample carla_garage's CARLA_Data serves on the routes under raw."""
    common.check_pinned(repo_dir, BLOBS, COMMIT)
    common.stub_attr_module("carla")
    common.numpy2_aliases()
    sys.path.insert(0, str(repo_dir / "team_code"))   # their modules import each other flat
    from config import GlobalConfig   # noqa: E402 - theirs, from repo_dir
    from data import CARLA_Data       # noqa: E402
    config = GlobalConfig()
    config.initialize(root_dir=str(raw), setting="all",
                      **SETTINGS)
    data = CARLA_Data(root=config.train_data, config=config)
    return [_sample(data[i], str(data.measurements[i][0], "utf-8"), data.sample_start[i], raw)
            for i in range(len(data))]
