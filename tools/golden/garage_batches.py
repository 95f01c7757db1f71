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
import gzip
import json
import logging
import sys
import tempfile
from pathlib import Path

from tools.golden import batches, common, garage

BATCH_SIZE = 4
# TransFuser++'s camera size (config.py camera_width/height: their loader never resizes);
# 4 Hz routes: 24 frames give range(10, 24 - 8 - 1) = 5 samples a route; add_signals puts the
# lights and stop signs the synth lacks into every boxes file
SYNTH = {"layout": "garage", "episodes": 2, "frames": 24, "seed": 26, "image_size": [256, 1024]}
LARGE = ("rgb", "depth", "semantic", "bev_semantic", "lidar")
# --twin: every sample from the augmented camera set (augment=1 with augment_percentage=1.0,
# so their `random.random() <= augment_percentage` always picks it: still deterministic)
TWIN = {**garage.SETTINGS, "augment": 1, "augment_percentage": 1.0}


def _signal(cls: str, frame: int, x: float, y: float, z: float, **kw) -> dict:
    """One boxes entry shaped as carla_garage's data agent writes it (get_bounding_boxes)."""
    entry = {"class": cls, "extent": [0.6, 0.4, 1.5] if cls != "car" else [2.2, 1.0, 0.8],
             "position": [x + 0.37 * (frame % 7), y - 0.21 * (frame % 5), z],
             "yaw": 0.5 * (frame % 13) - 3.0, "distance": 10.0, "id": 9000 + len(kw)}
    entry.update(kw)
    return entry


def _signals(frame: int) -> list[dict]:
    """Boxes each of their filter's rules keeps or drops (the synth writes cars and walkers
    only): red and yellow lights that affect the ego (kept), a green one and one that does
    not affect it (dropped), stop signs that do (kept) and do not (dropped), a walker with
    LiDAR hits, a braking car with 8 hits (kept), cars with 7 hits, beyond 32 m or above 4 m
    (dropped)."""
    light, stop = "traffic_light", "stop_sign"
    return [_signal(light, frame, 14.0, 2.5, 3.0, state="Red", affects_ego=True),
            _signal(light, frame, 15.0, -6.0, 3.0, state="Yellow", affects_ego=True),
            _signal(light, frame, 16.0, 5.0, 3.0, state="Green", affects_ego=True),
            _signal(light, frame, 17.0, 6.0, 3.0, state="Red", affects_ego=False),
            _signal(stop, frame, 8.0, 4.0, 0.5, affects_ego=True),
            _signal(stop, frame, 9.0, -4.0, 0.5, affects_ego=False),
            _signal("walker", frame, 6.0, -2.0, 0.0, num_points=30, speed=1.3),
            _signal("car", frame, -12.0, 3.5, 0.0, num_points=8, speed=2.0, brake=True),
            _signal("car", frame, -14.0, -3.5, 0.0, num_points=7, speed=2.0, brake=False),
            _signal("car", frame, 40.0, 0.0, 0.0, num_points=90, speed=2.0, brake=False),
            _signal("car", frame, 5.0, 8.0, 4.5, num_points=90, speed=2.0, brake=False)]


def add_signals(raw: Path) -> None:
    """Append _signals(frame) to every boxes file under raw (gzip with mtime 0: the routes'
    hash stays a function of their content)."""
    for path in sorted(raw.rglob("boxes/*.json.gz")):
        boxes = json.loads(gzip.decompress(path.read_bytes()))
        boxes += _signals(int(path.name.split(".")[0]))
        path.write_bytes(gzip.compress(json.dumps(boxes).encode(), mtime=0))


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
    with tempfile.TemporaryDirectory(prefix="golden_batches_garage_") as tmp:
        raw = Path(tmp) / "raw"
        common.synth_routes(raw, SYNTH)
        add_signals(raw)
        raw_sha = common.tree_sha256(raw)
        data, ids = _their_loader(repo_dir.resolve(), raw, settings)
        out, structure = batches.collect(data, ids, BATCH_SIZE, LARGE)
    meta = {"project": "garage", "repo": garage.REPO, "commit": garage.COMMIT,
            "files": garage.BLOBS, "settings": settings, "synth": SYNTH,
            "raw_sha256": raw_sha, "edit": "add_signals", "batch_size": BATCH_SIZE, "keys": list(structure[0]),
            "structure": structure, "large": list(LARGE),
            "regenerate": "python -m tools.golden.garage_batches --repo-dir "
                          f"PATH_AT_{garage.COMMIT[:7]}" + (" --twin" if settings == TWIN else "")}
    return batches.save(out, meta, out_path)


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
