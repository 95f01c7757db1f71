"""SimLingo's own Data_Driving on synth garage_lb2_simlingo routes (RenzKa/simlingo@eb2b89a):
tests/golden/simlingo.json, the golden of adapter="simlingo" (tests/load/adapters/
test_simlingo_model.py).

    /tmp/golden_venv/bin/python -m tools.golden.simlingo --repo-dir /tmp/golden_src/simlingo

Builds simlingo_training/dataloader/dataset_driving.py Data_Driving (their BaseDataset: glob,
route filter, sample loop) with the settings below and calls its own __getitem__ on every
index, in three passes: the frame's own camera (img_shift_augmentation off), the augmented twin
(img_shift_augmentation_prob 1.0) and the commentary task (use_commentary on, a
simlingo_commentary tree that carla-wds's synth-overlay writes beside the routes). Their draws
are Python's `random`: random.choice is set, at run time, to pick option k for each k in turn,
and random.random to a scripted list per call, so every prompt they can build is recorded.
Shims: as tools/golden/garage_lb2.py (carla, shapely, imgaug stubbed; hydra's
get_original_cwd is a folder holding the routes as `database/` and their template files);
img_augmentation off (imgaug's colour draws are not theirs to fix).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from tools.golden import common
from tools.golden.garage_lb2 import COMMIT, REPO, _stubs

BLOBS = {"simlingo_training/dataloader/dataset_driving.py":
         "8f8a1d5a6e0abe8c1ce51777f7b0e248db2d6aff",
         "simlingo_training/dataloader/dataset_base.py":
         "1e3be76041af9653356f68a8e1e95641aff42bc9",
         "simlingo_training/utils/custom_types.py": "889e33f27dbcb67a8c5cbd35825e74ea9277b1de"}
# their camera size (1024x512, WxH), so nothing is resized; route 3 is left out by their filter
SYNTH = {"layout": "garage_lb2_simlingo", "episodes": 3, "frames": 28, "seed": 30,
         "image_size": [512, 1024]}
OVERLAY = {"kind": "simlingo_commentary", "coverage": 0.7, "unmatched": 0, "seed": 4}
# config.py DatasetBaseConfig and config/experiment/simlingo_seed1.yaml, what Data_Driving
# reads; the template-driven options off (lmdrive commands, commentary augmentation)
SETTINGS = {"bucket_name": "all", "split": "train", "skip_first_n_frames": 10, "pred_len": 11,
            "hist_len": 1, "num_route_points": 20, "use_old_towns": False,
            "use_only_old_towns": False, "use_town13": False, "use_commentary": False,
            "use_qa": False, "qa_augmentation": True, "commentary_augmentation": False,
            "use_lmdrive_commands": False, "route_as": "target_point_command",
            "cut_bottom_quarter": True, "img_augmentation": False, "img_augmentation_prob": 0.5,
            "img_shift_augmentation": False, "img_shift_augmentation_prob": 0.5,
            "use_1d_wps": False, "data_path": "database", "bucket_path": "data/buckets"}
PASSES = {"own": {}, "twin": {"img_shift_augmentation": True, "img_shift_augmentation_prob": 1.0},
          "commentary": {"use_commentary": True}}
# random.random() per __getitem__ call: the twin draw, then prompt_random and the commentary
# branch's two draws: driving; commentary predicted; commentary in the prompt (both forms)
BRANCHES = {"driving": [0.0, 0.99], "predict": [0.0, 0.1, 0.9],
            "prompt_option": [0.0, 0.1, 0.1, 0.1], "prompt_command": [0.0, 0.1, 0.1, 0.9]}
# the templates pass: their template-driven options on (use_lmdrive_commands,
# commentary_augmentation, as their experiment sets them), with template files in their
# formats written here (made-up words; their own files are theirs); each scenario is their
# random.random() draws after the twin draw and the indices random.choice picks, in call order
TEMPLATES = {"lmdrive.json": {str(i): [f"Go on with step {i}", f"After [x] meters, step {i}",
                                       f"Step {i} in [x] m"] for i in range(46)},
             "commentary_augmented.json": {"Follow the road past the <LOCATION>.": [
                 "Keep going past the <LOCATION>.",
                 "Pass the <LOCATION>.. and follow the road in in time.",
                 "Drive by the <OBJECT>."]}}
SCENARIOS = [[[0.1, 0.1, 0.1, 0.1], [1, 0, 1, 2]], [[0.9, 0.1, 0.9], [0, 1, 0, 1]],
             [[0.3, 0.9], [1, 1, 2, 0]], [[0.1, 0.1, 0.1, 0.9], [2, 1, 0, 0]]]
PAD = [[0.5] * 4, [0] * 4]
OUT = Path(__file__).resolve().parents[2] / "tests" / "golden" / "simlingo.json"


def sha(a: Any) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def _kind(value: Any) -> list:
    """A field's Python type, and dtype and shape for arrays."""
    if isinstance(value, np.ndarray):
        return [type(value).__name__, str(value.dtype), list(value.shape)]
    return [type(value).__name__]


def _scripted(draws: list[float], pick: int):
    it = iter(draws)
    random.random = lambda: next(it)
    random.choice = lambda seq: seq[min(pick, len(seq) - 1)]


def _item(ds, i: int, draws: list[float], pick: int):
    _scripted(draws, pick)
    return ds[i]


def _scenario(ds, i: int, draws: list[float], picks: list[int]) -> list[str]:
    """Their texts for sample i under one scenario (SCENARIOS)."""
    d, p = iter([0.0, *draws, *PAD[0]]), iter([*picks, *PAD[1]])
    random.random = lambda: next(d)
    random.choice = lambda seq: seq[next(p)]
    return _texts(ds[i])


def _templates_pass(raw: Path, driving: type) -> list[dict]:
    """Data_Driving with their template options on, over TEMPLATES' files."""
    work = Path(tempfile.mkdtemp(prefix="golden_simlingo_tpl_"))
    (work / "data" / "augmented_templates").mkdir(parents=True)   # their file names
    for name, value in TEMPLATES.items():
        (work / "data" / "augmented_templates" / name).write_text(json.dumps(value))
    (work / "database").symlink_to(raw)
    # dataset_base.py imports get_original_cwd by name: its module global is the one to set
    sys.modules["simlingo_training.dataloader.dataset_base"].get_original_cwd = \
        lambda: str(work)
    random.seed(0)
    ds = driving(**{**SETTINGS, "use_commentary": True, "use_lmdrive_commands": True,
                          "commentary_augmentation": True})
    out = []
    for i in range(len(ds)):
        path = Path(str(ds.measurements[i][0], "utf-8")) / f"{int(ds.sample_start[i]):04d}.json.gz"
        out.append({"measurement_path": path.relative_to(work / "database").as_posix(),
                    "texts": [_scenario(ds, i, *sc) for sc in SCENARIOS]})
    return sorted(out, key=lambda s: s["measurement_path"])


def _record(out, root: Path) -> dict:
    rel = Path(out.measurement_path).relative_to(root).as_posix()
    return {"fields": {k: _kind(v) for k, v in out._asdict().items()},
            "measurement_path": rel, "dataset": out.dataset,
            "image_ff": sha(out.image_ff), "image_ff_org_size": sha(out.image_ff_org_size),
            "waypoints": np.asarray(out.waypoints).tolist(),
            "waypoints_1d": np.asarray(out.waypoints_1d).tolist(),
            "path": np.asarray(out.path).tolist(),
            "target_points": np.asarray(out.target_points).tolist(), "speed": out.speed,
            "placeholder_values": {k: np.asarray(v).tolist()
                                   for k, v in out.placeholder_values.items()}}


def _texts(out) -> list[str]:
    return [out.conversation[0]["content"][0]["text"], out.answer[0]["content"][0]["text"]]


def _pass(ds, root: Path, name: str) -> list[dict]:
    samples = []
    for i in range(len(ds)):
        out = _item(ds, i, BRANCHES["driving"], 0)
        rec = _record(out, root)
        assert out.conversation[1] == out.answer[0] and out.conversation[0]["content"][1] == \
            {"type": "image"}
        rec["prompts"] = {b: [_texts(_item(ds, i, d, k)) for k in range(2)]
                          for b, d in BRANCHES.items() if name == "commentary" or b == "driving"}
        samples.append(rec)
    return samples


def run(repo_dir: Path, raw: Path) -> dict[str, list[dict]]:
    """Every sample Data_Driving serves on the routes under raw, in each pass."""
    common.check_pinned(repo_dir, BLOBS, COMMIT)
    common.numpy2_aliases()
    work = Path(tempfile.mkdtemp(prefix="golden_simlingo_"))
    (work / "data").mkdir()
    (work / "data" / "augmented_templates").symlink_to(repo_dir / "data" /
                                                         "augmented_templates")
    (work / "database").symlink_to(raw)
    _stubs(work)
    sys.path.insert(0, str(repo_dir))
    from simlingo_training.dataloader.dataset_driving import Data_Driving  # noqa: E402
    out = {}
    for name, changes in PASSES.items():
        random.seed(0)   # their glob is shuffled with random; the order does not matter here
        ds = Data_Driving(**{**SETTINGS, **changes})
        out[name] = sorted(_pass(ds, work / "database", name),
                           key=lambda s: s["measurement_path"])
    out["templates"] = _templates_pass(raw, Data_Driving)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo-dir", type=Path, required=True)
    args = parser.parse_args()
    from carla_wds.pack.synth.overlays import raw_routes, synth_overlay
    raw = Path(tempfile.mkdtemp(prefix="golden_simlingo_raw_"))
    raw_sha = common.synth_routes(raw, SYNTH)
    kind = OVERLAY["kind"]
    synth_overlay(raw / "commentary", kind, raw_routes(raw / "data", kind), raw / "data",
                  coverage=OVERLAY["coverage"], unmatched=OVERLAY["unmatched"],
                  seed=OVERLAY["seed"])
    passes = run(args.repo_dir.resolve(), raw)
    doc = {"schema": common.SCHEMA, "project": "simlingo", "repo": REPO, "commit": COMMIT,
           "files": BLOBS, "synth": SYNTH, "overlay": OVERLAY, "settings": SETTINGS,
           "passes": PASSES, "branches": BRANCHES, "templates": TEMPLATES,
           "scenarios": SCENARIOS, "pad": PAD, "raw_sha256": raw_sha,
           "loader": "simlingo_training/dataloader/dataset_driving.py Data_Driving.__getitem__",
           "regenerate": "python -m tools.golden.simlingo --repo-dir PATH_TO_simlingo_AT_"
                         + COMMIT[:7], "samples": passes}
    common.write_golden(OUT, doc)
    print(f"wrote {OUT}: {sum(len(v) for v in passes.values())} samples")


if __name__ == "__main__":
    main()
