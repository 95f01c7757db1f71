"""TransFuser 2022's own loader on synth transfuser2022 routes (autonomousvision/transfuser@22b3ccd).

Runs team_code_transfuser/data.py CARLA_Data with config.py GlobalConfig(root_dir, setting='all',
augment=False) (no rotation augmentation, so each index is deterministic). Shims: np.string_ is
numpy 2's np.bytes_ (numpy2_aliases); nothing else.
"""
from __future__ import annotations

import sys
from pathlib import Path

from tools.golden import common

REPO = "autonomousvision/transfuser"
COMMIT = "22b3ccdb7e806b42c9be2aa476b71546e8ec3620"
BLOBS = {"team_code_transfuser/data.py": "7313684e018f50c7ed3ac8ac8842080158045072",
         "team_code_transfuser/config.py": "6e075c7b9ce0ebed06a71f12361998fa2d7bbe71",
         "team_code_transfuser/utils.py": "4e65ddb1bbb3b41273672ab86a38fd389b8e1933"}
# TF 2022 serves range(2, num_seq - pred_len - seq_len - 2): 16 frames give frames 2..8
SYNTH = {"layout": "transfuser2022", "episodes": 2, "frames": 16, "seed": 24,
         "image_size": [64, 48]}
SETTINGS = {"augment": False}
EXTRA = {"settings": SETTINGS}


def _sample(item: dict, meas_file: str, raw: Path) -> dict:
    path = Path(meas_file)
    return {"route": str(path.parent.parent.relative_to(raw)), "frame": int(path.stem),
            "waypoints": common.f32(item["ego_waypoint"]),
            "target_point": common.f32(item["target_point"]),
            "speed": common.f32(item["speed"]), "theta": common.f32(item["theta"]),
            "steer": common.f32(item["steer"]), "throttle": common.f32(item["throttle"]),
            "brake": bool(item["brake"]), "light_hazard": bool(item["light"])}


def run(repo_dir: Path, raw: Path) -> list[dict]:
    """Every sample TransFuser 2022's CARLA_Data serves on the routes under raw."""
    common.check_pinned(repo_dir, BLOBS, COMMIT)
    common.numpy2_aliases()
    sys.path.insert(0, str(repo_dir / "team_code_transfuser"))   # flat imports (utils)
    from config import GlobalConfig   # noqa: E402 - theirs, from repo_dir
    from data import CARLA_Data       # noqa: E402
    config = GlobalConfig(root_dir=str(raw), setting="all", **SETTINGS)
    data = CARLA_Data(root=config.train_data, config=config)
    return [_sample(data[i], str(data.measurements[i][0], "utf-8"), raw)
            for i in range(len(data))]
