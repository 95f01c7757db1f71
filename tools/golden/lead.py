"""Golden for `--layout lead`: LEAD's OWN loader (kesai-labs/lead@44891760,
lead/data_loader/carla_dataset.py CARLAData with build_buckets=True: the meta part of
__getitem__, which builds every label carla-wds packs) on small synthetic LEAD routes.

Run (tools/golden/README.md has the environment; LEAD's loader also needs beartype, jaxtyping,
diskcache, omegaconf, tqdm, and stubs of `carla` and `agents.navigation.local_planner`, which
this script installs in sys.modules - the loading path never calls the simulator):

    mkdir -p /tmp/golden_src/lead
    git --git-dir=MIRROR/kesai-labs+lead archive 44891760e45e10980033008547bfdc7975c24b54 \\
        lead/__init__.py lead/common lead/data_loader lead/data_buckets lead/training \\
        lead/tfv6 lead/expert/__init__.py lead/expert/config_expert.py | tar -x -C /tmp/golden_src/lead
    /tmp/golden_venv/bin/python -m tools.golden.lead --repo-dir /tmp/golden_src/lead

Writes tests/golden/lead.json: each sample's route and frame in the loader's order, and its
future_waypoints, future_yaws, target_point (+ next, previous), the smoothed `route`, command
one-hot and speed, float32-rounded; under "twin" the same labels with the perturbated sensors
(use_sensor_perburtation drawn every time: np.random.random shimmed to 0 in a second pass, and
build_buckets false for its one test of it, so the loader moves the labels and still returns
before loading sensors).
"""
from __future__ import annotations

import argparse
import enum
import json
import sys
import tempfile
import types
from pathlib import Path

from . import common

COMMIT = "44891760e45e10980033008547bfdc7975c24b54"
BLOBS = {  # the files whose code builds the labels, at COMMIT (git blob ids)
    "lead/data_loader/carla_dataset.py": "871ff91bd0d0377e907e0261099f10df8cb6bf65",
    "lead/data_loader/carla_dataset_utils.py": "3e68b85a90e8d878fa448d8fb300ebfcb5030003",
    "lead/data_buckets/abstract_bucket_collection.py": "582582e7728c9807ff5ed75100342aff1022f3ed",
    "lead/data_buckets/full_posttrain_bucket_collection.py": "9a3cdce087f10ba33a2dae31cd38b3f12addd27b",
    "lead/data_buckets/route_filtering.py": "180c5e0f5e09304cf7f2dfc13646c32e55e71383",
    "lead/data_buckets/bucket.py": "07473d4fe115acb6b5d5049953294b3c28916e3b",
    "lead/training/config_training.py": "2bfb15efb06cd5ae7b1bc9d013557bfee86f0200",
    "lead/common/common_utils.py": "6703e6aa14cce649daf39c1952a735902f1b7f78",
}
SYNTH = {"layout": "lead", "episodes": 4, "frames": 20, "seed": 3, "image_size": [32, 48]}
OUT = Path(__file__).resolve().parents[2] / "tests" / "golden" / "lead.json"


def _stubs() -> None:
    """`carla` (type hints and colour constants only) and the leaderboard's RoadOption."""
    made: dict[str, type] = {}

    def attr(name: str) -> type:
        if name.startswith("__"):
            raise AttributeError(name)
        return made.setdefault(name, type(name, (), {"__init__": lambda self, *a, **k: None}))
    carla = types.ModuleType("carla")
    carla.__getattr__ = attr  # type: ignore[attr-defined]
    sys.modules["carla"] = carla
    planner = types.ModuleType("agents.navigation.local_planner")
    planner.RoadOption = enum.IntEnum("RoadOption", {  # type: ignore[attr-defined]
        "VOID": -1, "LEFT": 1, "RIGHT": 2, "STRAIGHT": 3, "LANEFOLLOW": 4, "CHANGELANELEFT": 5,
        "CHANGELANERIGHT": 6})
    for name in ("agents", "agents.navigation"):
        sys.modules[name] = types.ModuleType(name)
    sys.modules["agents.navigation.local_planner"] = planner


def run(repo_dir: Path, data: Path) -> list[dict]:
    """LEAD's loader over data/<scenario>/<route>, in its order, its labels per sample."""
    sys.path.insert(0, str(repo_dir))
    _stubs()
    import numpy as np
    if not hasattr(np, "string_"):   # bucket.py's np.string_, gone in numpy 2: its alias
        np.string_ = np.bytes_
    from lead.data_loader.carla_dataset import CARLAData
    from lead.training.config_training import TrainingConfig

    config = TrainingConfig({"carla_root": str(data.parent), "use_planning_decoder": True,
                             "use_persistent_cache": False, "force_rebuild_bucket": True})
    dataset = CARLAData(root=str(data), config=config, random=False, build_buckets=True)
    out = []
    for i in range(len(dataset)):
        d = dataset[i]
        out.append({"route": d["route_dir"].split("/")[-2] + "/" + d["route_number"],
                    "frame": int(d["frame_number"]), **_moved(d),
                    "command": common.f32(d["command"]), "speed": common.f32(d["speed"])})
    draw = np.random.random
    np.random.random = lambda *a: 0.0   # every sample takes the perturbated sensors
    try:
        for i, sample in enumerate(out):
            dataset.build_buckets = _FalseOnce()
            d = dataset[i]
            assert d["perturbate_sensor"], "the twin pass did not perturbate"
            sample["twin"] = {**_moved(d), "translation": d["perturbation_translation"],
                              "rotation": d["perturbation_rotation"]}
    finally:
        np.random.random = draw
    return out


def _moved(d: dict) -> dict:
    """The labels the perturbated sensors move."""
    return {"waypoints": common.f32(d["future_waypoints"]),
            "future_yaws": common.f32(d["future_yaws"]), "route_points": common.f32(d["route"]),
            **{k: common.f32(d[k]) for k in ("target_point", "target_point_next",
                                             "target_point_previous")}}


class _FalseOnce:
    """build_buckets: false where __getitem__ first tests it (the perturbation draw), true
    after (its early return before the sensors)."""

    def __init__(self) -> None:
        self.tested = False

    def __bool__(self) -> bool:
        first, self.tested = not self.tested, True
        return not first


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo-dir", type=Path, required=True)
    args = parser.parse_args()
    common.check_pinned(args.repo_dir, BLOBS, COMMIT)
    from carla_wds.pack.synth import register_writer
    from carla_wds.pack.synth.lead import synth_dataset
    register_writer(SYNTH["layout"], synth_dataset)   # as the registry has it
    root = Path(tempfile.mkdtemp(prefix="golden_lead_")) / "carla_leaderboard2"
    raw_sha = common.synth_routes(root / "data", SYNTH)
    samples = run(args.repo_dir, root / "data")
    doc = {"schema": common.SCHEMA, "project": "kesai-labs/lead", "commit": COMMIT,
           "loader": "lead/data_loader/carla_dataset.py CARLAData(random=False, "
           "build_buckets=True), TrainingConfig(use_planning_decoder=True)",
           "files": BLOBS, "synth": SYNTH, "raw_sha256": raw_sha, "samples": samples}
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {OUT}: {len(samples)} samples")


if __name__ == "__main__":
    main()
