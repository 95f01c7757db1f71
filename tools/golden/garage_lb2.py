"""SimLingo's own loader on synth garage_lb2 routes (RenzKa/simlingo@eb2b89a).

Builds simlingo_training/dataloader/dataset_base.py BaseDataset (its route glob, route filter
and sample loop) with the settings below (config.py DatasetBaseConfig's values for what it
reads), then runs its own per-sample methods on every index: load_current_and_future_
measurements, load_waypoints, load_route and augment_target_point, with the frame's own camera
and with its augmented twin (the frame's augmentation_translation / _rotation, as
dataset_driving.py passes them). Shims: `carla` and `shapely` are stub modules
(transfuser_utils.py imports them; the data path never calls them), imgaug is a stub whose
augmenters are never applied here (no image is loaded), and hydra.utils.get_original_cwd
returns a folder holding the routes (`database/`) and the repository's own template files.
"""
from __future__ import annotations

import os
import sys
import tempfile
import types
from pathlib import Path

import numpy as np

from tools.golden import common

REPO = "RenzKa/simlingo"
COMMIT = "eb2b89aa90d500c35248b3d637d7db15ad9cadca"
BLOBS = {"simlingo_training/dataloader/dataset_base.py":
         "1e3be76041af9653356f68a8e1e95641aff42bc9",
         "simlingo_training/utils/transfuser_utils.py":
         "470a906a051454aadcc2094dfd4886ac05ea58ae",
         "simlingo_training/utils/projection.py": "9a14bea87e9601adfefbf11b630d838efdb4f0b5",
         "simlingo_training/utils/custom_types.py": "889e33f27dbcb67a8c5cbd35825e74ea9277b1de"}
# 4 Hz routes; SimLingo serves frames 10 .. n-14; route 1 scores 85 with a min-speed
# infraction only (SimLingo keeps it), route 3 a collision (left out)
SYNTH = {"layout": "garage_lb2_simlingo", "episodes": 4, "frames": 28, "seed": 30,
         "image_size": [32, 64]}
# config.py l.45-75 (DatasetBaseConfig), the values BaseDataset reads; bucket "all" (no
# bucket pickle), split "train" (routes_training), no language labels
SETTINGS = {"bucket_name": "all", "split": "train", "skip_first_n_frames": 10, "pred_len": 11,
            "hist_len": 1, "num_route_points": 20, "use_old_towns": False,
            "use_only_old_towns": False, "use_town13": False, "use_commentary": False,
            "use_qa": False, "use_lmdrive_commands": False, "img_augmentation_prob": 0.5,
            "data_path": "database", "bucket_path": "data/buckets"}
EXTRA = {"settings": SETTINGS}


def _stubs(workdir: Path) -> None:
    common.stub_attr_module("carla")
    common.stub_attr_module("shapely")
    common.stub_attr_module("shapely.geometry")
    hydra, utils = types.ModuleType("hydra"), types.ModuleType("hydra.utils")
    utils.get_original_cwd = lambda: str(workdir)
    hydra.utils = utils
    sys.modules.setdefault("hydra", hydra)
    sys.modules.setdefault("hydra.utils", utils)
    augmenters = types.ModuleType("imgaug.augmenters")

    def augmenter(name: str):
        if name.startswith("__"):   # inspect probes __file__ and the like
            raise AttributeError(name)
        return lambda *args, **kwargs: None
    augmenters.__getattr__ = augmenter
    imgaug = types.ModuleType("imgaug")
    imgaug.augmenters = augmenters
    sys.modules.setdefault("imgaug", imgaug)
    sys.modules.setdefault("imgaug.augmenters", augmenters)


def _labels(ds, i: int, twin: bool) -> dict:
    loaded, current, _ = ds.load_current_and_future_measurements(ds.measurements[i],
                                                                 ds.sample_start[i])
    y, yaw = ((current["augmentation_translation"], current["augmentation_rotation"]) if twin
              else (0.0, 0.0))
    data = ds.load_route(ds.load_waypoints({}, loaded, y, yaw), current, y, yaw)
    return {"waypoints": data["waypoints"], "route": data["route"],
            "route_adjusted": data["route_adjusted"],
            "target_point": ds.augment_target_point(np.array(current["target_point"]), y, yaw),
            "target_point_next": ds.augment_target_point(
                np.array(current["target_point_next"]), y, yaw),
            "command": current["command"], "next_command": current["next_command"],
            "speed": current["speed"]}


def _sample(ds, i: int, root: Path) -> dict:
    meas_dir = Path(str(ds.measurements[i][0], "utf-8"))
    own, twin = _labels(ds, i, False), _labels(ds, i, True)
    out = {"route": meas_dir.parent.relative_to(root).as_posix(),
           "frame": int(ds.sample_start[i]),
           "command": int(own["command"]), "next_command": int(own["next_command"]),
           "speed": common.f32(own["speed"])}
    for name in ("waypoints", "route", "route_adjusted", "target_point", "target_point_next"):
        out[name if name != "route" else "route_points"] = common.f32(own[name])
    for name in ("waypoints", "route", "route_adjusted", "target_point", "target_point_next"):
        out[f"{name}_augmented"] = common.f32(twin[name])
    return out


def run(repo_dir: Path, raw: Path) -> list[dict]:
    """Every sample SimLingo's BaseDataset serves on the routes under raw, with its labels."""
    common.check_pinned(repo_dir, BLOBS, COMMIT)
    common.numpy2_aliases()
    with tempfile.TemporaryDirectory(prefix="golden_simlingo_") as tmp:
        work = Path(tmp)
        (work / "data").mkdir()
        os.symlink(repo_dir / "data" / "augmented_templates", work / "data" /
                   "augmented_templates")
        os.symlink(raw, work / "database")
        _stubs(work)
        sys.path.insert(0, str(repo_dir))
        from simlingo_training.dataloader.dataset_base import BaseDataset  # noqa: E402 - theirs
        ds = BaseDataset(dreamer=False, evaluation=False, **SETTINGS)
        root = work / "database"
        return [_sample(ds, i, root) for i in range(len(ds))]
