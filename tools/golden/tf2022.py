"""TransFuser 2022's own loader on synth transfuser2022 routes (autonomousvision/transfuser@22b3ccd).

Runs team_code_transfuser/data.py CARLA_Data with config.py GlobalConfig(root_dir, setting='all',
augment=False) (no rotation augmentation, so each index is deterministic). Shims: np.string_ is
numpy 2's np.bytes_ (numpy2_aliases); nothing else.

Batches mode (issue 26, the golden of CARLAWebData(adapter="transfuser2022")): their
DataLoader(CARLA_Data) with torch's default collate, batch 4, no shuffle, on synth routes at
their 960x160 camera strip, into tests/golden/transfuser2022_batches.npz (laid out as
tools/golden/batches.py writes it; the per-pixel keys in LARGE as each row's sha256 of float32
bytes). Not run in CI (their code at the pinned commit, cv2, skimage, ujson):

    /tmp/golden_venv/bin/python -m tools.golden.tf2022 --batches [--rotated] \
        --repo-dir /tmp/golden_src/transfuser

--rotated: augment=True with their random.random answering ROTATED in turn (every sample
turned 9.2 degrees): tests/golden/transfuser2022_batches_rotated.npz, the golden of their
rotation augmentation.
"""
from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import itertools
import types
from pathlib import Path

from tools.golden import common

REPO = "autonomousvision/transfuser"
COMMIT = "22b3ccdb7e806b42c9be2aa476b71546e8ec3620"
BLOBS = {"team_code_transfuser/data.py": "7313684e018f50c7ed3ac8ac8842080158045072",
         "team_code_transfuser/config.py": "6e075c7b9ce0ebed06a71f12361998fa2d7bbe71",
         "team_code_transfuser/utils.py": "4e65ddb1bbb3b41273672ab86a38fd389b8e1933"}
# TF 2022 serves range(2, num_seq - pred_len - seq_len - 2): 16 frames give frames 2..8
SYNTH = {"layout": "transfuser2022", "episodes": 2, "frames": 16, "seed": 24,
         "image_size": [48, 64]}
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


def _their_data(repo_dir: Path, raw: Path, rotated: bool = False):
    """Their CARLA_Data; rotated: augment=True with their `random.random` answering the
    ROTATED draws in turn (do_augment, then the degree), so every sample turns the same."""
    common.check_pinned(repo_dir, BLOBS, COMMIT)
    common.numpy2_aliases()
    sys.path.insert(0, str(repo_dir / "team_code_transfuser"))   # flat imports (utils)
    from config import GlobalConfig   # noqa: E402 - theirs, from repo_dir
    import data as their_data         # noqa: E402
    config = GlobalConfig(root_dir=str(raw), setting="all",
                          **({"augment": True} if rotated else SETTINGS))
    if rotated:   # a module global of theirs, set at run time (their file is unchanged)
        draws = itertools.cycle(ROTATED)
        their_data.random = types.SimpleNamespace(random=lambda: next(draws))
    return their_data.CARLA_Data(root=config.train_data, config=config)


def run(repo_dir: Path, raw: Path) -> list[dict]:
    """Every sample TransFuser 2022's CARLA_Data serves on the routes under raw."""
    data = _their_data(repo_dir, raw)
    return [_sample(data[i], str(data.measurements[i][0], "utf-8"), raw)
            for i in range(len(data))]


# batches mode: 960x160 as their data agent saves the strip; 12 frames give frames 2..4 a route
BATCH_SYNTH = {"layout": "transfuser2022", "episodes": 2, "frames": 12, "seed": 26,
               "image_size": [160, 960]}
BATCH_SIZE = 4
LARGE = ("rgb", "bev", "depth", "semantic", "lidar", "target_point_image")
# --rotated: random() > inv_augment_prob (0.1) augments; degree = (2 * 0.73 - 1) * 20 = 9.2,
# crop_shift = 9.2 / 60 * 320 = 49.07 columns
ROTATED = (0.95, 0.73)


def make_batches(repo_dir: Path, out_path: Path, rotated: bool = False) -> Path:
    """Their DataLoader's batches on BATCH_SYNTH routes -> out_path (module docstring)."""
    from tools.golden import batches
    with tempfile.TemporaryDirectory(prefix="golden_batches_tf2022_") as tmp:
        raw = Path(tmp) / "raw"
        raw_sha = common.synth_routes(raw, BATCH_SYNTH)
        data = _their_data(repo_dir.resolve(), raw, rotated)
        ids = []
        for i in range(len(data)):
            path = Path(str(data.measurements[i][0], "utf-8"))
            ids.append(f"{path.parent.parent.relative_to(raw)}/{int(path.stem)}")
        out, structure = batches.collect(data, ids, BATCH_SIZE, LARGE)
    meta = {"project": "transfuser2022", "repo": REPO, "commit": COMMIT, "files": BLOBS,
            "settings": {"augment": True, "random": ROTATED} if rotated else SETTINGS,
            "synth": BATCH_SYNTH, "raw_sha256": raw_sha,
            "batch_size": BATCH_SIZE, "keys": list(structure[0]), "structure": structure,
            "large": list(LARGE),
            "regenerate": f"python -m tools.golden.tf2022 --batches --repo-dir "
                          f"PATH_AT_{COMMIT[:7]}{' --rotated' * rotated}"}
    return batches.save(out, meta, out_path)


def main(argv: list[str] | None = None) -> int:
    """--batches --repo-dir DIR [--out NPZ] (the JSON golden: make_golden --project)."""
    ap = argparse.ArgumentParser(description="TransFuser 2022's loader: the batch golden")
    ap.add_argument("--batches", action="store_true", required=True)
    ap.add_argument("--repo-dir", required=True, type=Path, help=f"{REPO} at {COMMIT[:7]}")
    ap.add_argument("--rotated", action="store_true", help="their rotation, fixed draws")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    name = "transfuser2022_batches" + ("_rotated" if args.rotated else "") + ".npz"
    make_batches(args.repo_dir, args.out or Path("tests/golden") / name, args.rotated)
    return 0


if __name__ == "__main__":
    sys.exit(main())
