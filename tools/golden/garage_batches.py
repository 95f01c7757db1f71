"""Regenerate tests/golden/garage_batches.npz: carla_garage's own DataLoader(CARLA_Data) batches
(autonomousvision/carla_garage@1448bed team_code/data.py, torch's default collate, batch 4, no
shuffle) on small synth garage routes at TransFuser++'s 1024x256 camera: the golden of
CARLAWebData(adapter="garage") (issue 26; tests/load/adapters/test_garage_model.py).

    /tmp/golden_venv/bin/python -m tools.golden.garage_batches --repo-dir /tmp/golden_src/carla_garage [--twin]

Not run in CI: it needs their code at the pinned commit (blob ids checked, tools/golden/garage.py)
and their loader's packages (cv2, imgaug, laspy, ujson, sklearn). Their config as
tools/golden/garage.py sets it: GlobalConfig().initialize(root, setting='all', augment=0,
use_color_aug=0, use_wp_gru=True), so each index is deterministic. The npz is laid out as
tools/golden/batches.py writes it (`b{b}/{key}`, `b{b}/{key}#sha256` + `#mean` for the
large per-pixel keys, `b{b}/#ids`, `#meta`); the per-pixel keys whose bytes are compared by
hash are LARGE (camera, depth, semantics, BEV semantics, LiDAR histogram); the CenterNet
targets are stored whole (mostly zeros: they compress to little).
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
from pathlib import Path

import numpy as np

from tools.golden import batches, common, garage

BATCH_SIZE = 4
# TransFuser++'s camera size (config.py camera_width/height: their loader never resizes);
# 4 Hz routes: 24 frames give range(10, 24 - 8 - 1) = 5 samples a route
SYNTH = {"layout": "garage", "episodes": 2, "frames": 24, "seed": 26, "image_size": [1024, 256]}
LARGE = ("rgb", "depth", "semantic", "bev_semantic", "lidar")
# --twin: every sample from the augmented camera set (augment=1 with augment_percentage=1.0,
# so their `random.random() <= augment_percentage` always picks it: still deterministic)
TWIN = {**garage.SETTINGS, "augment": 1, "augment_percentage": 1.0}


def _their_loader(repo_dir: Path, raw: Path, settings: dict):
    """Their Dataset (as tools/golden/garage.py builds it) and each index's "route/frame"."""
    common.check_pinned(repo_dir, garage.BLOBS, garage.COMMIT)
    common.stub_attr_module("carla")
    common.numpy2_aliases()
    sys.path.insert(0, str(repo_dir / "team_code"))   # their modules import each other flat
    from config import GlobalConfig   # noqa: E402 - theirs, from repo_dir
    from data import CARLA_Data       # noqa: E402
    config = GlobalConfig()
    config.initialize(root_dir=str(raw), setting="all", **settings)
    data = CARLA_Data(root=config.train_data, config=config)
    ids = []
    for i in range(len(data)):
        route = Path(str(data.measurements[i][0], "utf-8")).parent.relative_to(raw)
        ids.append(f"{route}/{int(data.sample_start[i])}")
    return data, ids


def make(repo_dir: Path, out_path: Path, settings: dict) -> Path:
    import torch
    with tempfile.TemporaryDirectory(prefix="golden_batches_garage_") as tmp:
        raw = Path(tmp) / "raw"
        raw_sha = common.synth_routes(raw, SYNTH)
        data, ids = _their_loader(repo_dir.resolve(), raw, settings)
        loader = torch.utils.data.DataLoader(data, batch_size=BATCH_SIZE, shuffle=False)
        out: dict[str, np.ndarray] = {}
        structure = []
        for b, batch in enumerate(loader):
            structure.append({k: batches._record(out, f"b{b}/{k}", v, k in LARGE)
                              for k, v in batch.items()})
            out[f"b{b}/#ids"] = np.array(ids[b * BATCH_SIZE:(b + 1) * BATCH_SIZE], dtype="U200")
    meta = {"project": "garage", "repo": garage.REPO, "commit": garage.COMMIT,
            "files": garage.BLOBS, "settings": settings, "synth": SYNTH,
            "raw_sha256": raw_sha, "batch_size": BATCH_SIZE, "keys": list(structure[0]),
            "structure": structure, "large": list(LARGE),
            "regenerate": "python -m tools.golden.garage_batches --repo-dir "
                          f"PATH_AT_{garage.COMMIT[:7]}" + (" --twin" if settings == TWIN else "")}
    out["#meta"] = np.array(json.dumps(meta))
    np.savez_compressed(out_path, **out)
    logging.info("garage: %d batches -> %s (%d bytes)", len(structure), out_path,
                 out_path.stat().st_size)
    return out_path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo-dir", required=True, type=Path,
                    help="a checkout or `git archive` export of carla_garage at 1448bed")
    ap.add_argument("--twin", action="store_true",
                    help="every sample from the augmented camera set: garage_batches_twin.npz")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    name = "garage_batches_twin.npz" if args.twin else "garage_batches.npz"
    make(args.repo_dir, args.out or Path("tests/golden") / name,
         TWIN if args.twin else garage.SETTINGS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
