"""Bench2DriveZoo's prepare_B2D.py gengrate_map on synth Bench2Drive HD maps (Thinklab-SJTU/Bench2DriveZoo@10a2e5d).

Runs mmcv/datasets/prepare_B2D.py `gengrate_map` (l.147-190: the map_infos VAD and UniAD read
their map labels from) on the maps/ folder carla-wds's synth writes beside its clips, and reads
back the pickle it writes (our own temporary file). Shims as tools/golden/b2d_prepare.py's
(OUT_DIR a temporary folder, open3d an empty stub, matplotlib's get_cmap), plus pyquaternion
as a stub whose Quaternion raises if used: prepare_B2D imports it at the top, and gengrate_map
never calls it.

One record per town ("route" the town, "frame" 0): its lane and trigger volume types in their
order, each polyline's length, and the sha256 of its points' little-endian float64 bytes
(their np.array of the file's floats, y negated), for lane_points, lane_sample_points,
trigger_volumes_points and trigger_volumes_sample_points, all in their order.
"""
from __future__ import annotations

import hashlib
import importlib
import pickle
import sys
import tempfile
import types
from pathlib import Path

import numpy as np

from tools.golden import b2d_prepare, common

REPO = b2d_prepare.REPO
COMMIT = b2d_prepare.COMMIT
BLOBS = b2d_prepare.BLOBS
# the clips (and so the towns' maps) of tests.helpers.shared_raw's bench2drive folder, which
# tests/pack/datasets/bench2drive/test_hdmap.py reads
SYNTH = {"layout": "bench2drive", "episodes": 3, "frames": 30, "seed": 5, "image_size": [54, 96]}
KEYS = ("lane_points", "lane_sample_points", "trigger_volumes_points",
        "trigger_volumes_sample_points")


def digest(parts: list) -> str:
    """sha256 over each part's little-endian float64 bytes, in order."""
    h = hashlib.sha256()
    for part in parts:
        h.update(np.ascontiguousarray(part, dtype="<f8").tobytes())
    return h.hexdigest()


def record(town: str, info: dict) -> dict:
    out = {"route": town, "frame": 0, "lane_types": [str(t) for t in info["lane_types"]],
           "trigger_volumes_types": [str(t) for t in info["trigger_volumes_types"]]}
    for key in KEYS:
        out[f"{key}_sha256"] = digest(info[key])
        out[f"{key}_lengths"] = [int(len(np.atleast_2d(p))) for p in info[key]]
    return out


def _pyquaternion_stub() -> None:
    class Quaternion:
        def __init__(self, *args, **kw):
            raise NotImplementedError("pyquaternion is stubbed: gengrate_map never uses it")
    module = types.ModuleType("pyquaternion")
    module.Quaternion = Quaternion
    sys.modules.setdefault("pyquaternion", module)


def run(repo_dir: Path, raw: Path) -> list[dict]:
    """map_infos per town, as gengrate_map writes them for raw/maps."""
    common.check_pinned(repo_dir, BLOBS, COMMIT)
    common.stub_modules(["open3d"])
    _pyquaternion_stub()
    b2d_prepare._matplotlib_get_cmap()
    sys.path.insert(0, str(repo_dir / "mmcv" / "datasets"))   # it imports vis_utils flat
    prep = importlib.import_module("prepare_B2D")
    with tempfile.TemporaryDirectory(prefix="golden_b2d_maps_") as out:
        prep.OUT_DIR = out
        prep.gengrate_map(str(raw / "maps"))
        with open(Path(out) / "b2d_map_infos.pkl", "rb") as f:
            infos = pickle.load(f)    # written just above by gengrate_map, from our maps
    return [record(town, info) for town, info in sorted(infos.items())]
