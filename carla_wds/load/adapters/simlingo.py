"""adapter="simlingo": SimLingo's `Data_Driving` per-sample output, before its processor and
collate (RenzKa/simlingo@eb2b89a simlingo_training/dataloader/dataset_driving.py
Data_Driving.__getitem__, dataset_base.py BaseDataset; values of config.py DatasetBaseConfig
and config/experiment/simlingo_seed1.yaml). Written from their formulas; checked against their
loader's output in tests/load/adapters/test_simlingo_model.py (golden: tools/golden/simlingo.py).

Each batch is torch's default collate of one dict per sample (a DatasetOutput's fields, with
the two strings of its conversation as `prompt` and `answer`); `simlingo_samples(batch)` gives
the per-sample records their `DataModule.dl_collate_fn` (datamodule.py l.230-343) takes, one
per row, with DatasetOutput's fields (custom_types.py l.5-19) in its order:
- image_ff: uint8 (1, 3, H', W), the front camera with the bottom 4.8/16 cut off
  (load_images l.457-464: cut_bottom_quarter, on in their experiment, and always with
  img_shift_augmentation); image_ff_org_size: uint8 (1, 3, 512, 1024), uncut;
- waypoints: float64 (10, 2), the 10 frames after t in the served camera's frame
  (load_waypoints l.389-394); waypoints_1d: float64 (10, 2), the cumulative distance along
  (0, 0) and those waypoints, 0 in y (l.401-406; the move of the twin keeps distances);
- path: route_adjusted, float64 (20, 2) (load_route l.416-439); target_points: float64 (2, 2),
  target_point and target_point_next (dataset_driving.py l.75-78, get_navigational_conditioning
  l.485-488); speed: the frame's speed (a float);
- conversation and answer: their chat dicts around prompt and answer (dataset_driving.py
  l.280-302); placeholder_values {'<TARGET_POINT>': target_points} (l.496-497);
  measurement_path: the frame's measurements file under the data root; dataset 'driving'.

The prompt (dataset_driving.py l.234-272, route_as 'target_point_command'; simlingo_prompts.py):
"Current speed: {round(speed, 1)} m/s. {option} Predict the waypoints.", answer "Waypoints:",
with option one of "Target waypoint: <TARGET_POINT><TARGET_POINT>." and the command sentence,
drawn from the sample's generator. With a `simlingo_commentary` overlay (`overlays=`), a
sample whose entry exists (on a route that is not a validation route, l.88) takes the
commentary branch with probability 1/2 (their prompt_probabilities with use_commentary).
Their template-driven options (an LMDrive command option, commentary rephrasing) need their
data/augmented_templates files: `adapters.simlingo_adapter(folder)` registers the adapter
with them (with_templates below); adapter="simlingo" serves without.

Not served as theirs (docs/adapters/simlingo.md): QA, and the re-weighting of prompt types
after 10,000 samples (a per-worker counter in their dataset).
With augment=True: their colour augmentation (image_augmenter(prob=0.5), the same seven
imgaug steps as carla_garage's) and the camera twin at img_shift_augmentation_prob 0.5.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ...manifest import Manifest
from .garage import NAME as TWIN
from .garage import augment_points
from .garage_model import camera
from .model import ModelAdapter, _pack_arg
from .simlingo_prompts import Templates, commentary_text, prompt_answer, target_options

SOURCE = "RenzKa/simlingo@eb2b89a simlingo_training/dataloader/dataset_driving.py"
OVERLAY = "simlingo_commentary"       # the overlay kind of their commentary/ tree
SHIFT_PROB = 0.5                      # config.py img_shift_augmentation_prob
PLACEHOLDER = "<TARGET_POINT>"
NEEDS = ("target_point", "target_point_next", "route_adjusted", "command", "next_command",
         "augmentation_translation", "augmentation_rotation")


class SimLingoSample(NamedTuple):
    """One sample as Data_Driving.__getitem__ returns it: DatasetOutput's fields, in its
    order (custom_types.py l.5-19), so their dl_collate_fn reads it by attribute."""
    conversation: list
    answer: list
    image_ff: np.ndarray
    image_ff_org_size: np.ndarray
    waypoints: np.ndarray
    waypoints_1d: np.ndarray
    path: np.ndarray
    target_points: np.ndarray
    speed: float
    placeholder_values: dict
    measurement_path: str
    dataset: str
    qa_templates: Any = None
    eval_infos: Any = None


def waypoints_1d(waypoints: np.ndarray, origin: np.ndarray) -> np.ndarray:
    """load_waypoints l.401-406: cumulative distance from the ego (origin, in the served
    camera's frame) through each waypoint, as (d, 0) rows."""
    steps = np.diff(np.vstack([origin, waypoints]), axis=0)
    out = np.zeros((len(waypoints), 2))
    out[:, 0] = np.cumsum(np.linalg.norm(steps, axis=1))
    return out


def measurement_path(key: str) -> str:
    """The sample's measurements file under the data root, from its key (route__frame)."""
    route, _, frame = key.rpartition("__")
    return f"{route.replace('__', '/')}/measurements/{int(frame):04d}.json.gz"


def images(image: np.ndarray, augment: bool, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """load_images l.441-479: (colour-augmented) uint8 (1, 3, H, W) and its cut copy."""
    org = camera(image, augment, rng)[None]
    keep = int(org.shape[2] - (org.shape[2] * 4.8) // 16)
    return {"image_ff": np.ascontiguousarray(org[:, :, :keep]), "image_ff_org_size": org}


def simlingo_sample(adapter: ModelAdapter, s: dict, rng: np.random.Generator) -> dict:
    """One sample (module docstring) as collatable values; simlingo_samples rebuilds theirs."""
    m = s["measurements"]
    path = measurement_path(s["key"])
    tp = np.stack([np.asarray(m["target_point"], np.float64),
                   np.asarray(m["target_point_next"], np.float64)])
    waypoints = np.asarray(s["waypoints"], np.float64)
    origin = np.zeros((1, 2))
    if int(s.get("camera_set", 0)):   # the ego seen from the twin camera
        origin = augment_points(origin, float(m["augmentation_translation"]),
                                float(m["augmentation_rotation"])).astype(np.float64)
    speed, templates = float(s["speed"]), getattr(adapter, "templates", Templates())
    # their order of draws: commentary, navigational options, prompt (simlingo_prompts.py)
    commentary = commentary_text((s.get("fields") or {}).get(OVERLAY), path, templates, rng)
    options = target_options(tp, int(m["command"]), int(m["next_command"]), templates, rng)
    prompt, answer = prompt_answer(speed, options, commentary, rng)
    return {**images(s["images"][0], bool(s.get("augment")), rng),
            "waypoints": waypoints, "waypoints_1d": waypoints_1d(waypoints, origin),
            "path": np.asarray(m["route_adjusted"], np.float64), "target_points": tp,
            "speed": speed, "prompt": prompt, "answer": answer,
            "measurement_path": path, "dataset": "driving"}


def _row(value: Any, i: int) -> Any:
    return value[i].numpy() if hasattr(value, "numpy") else value[i]


def simlingo_samples(batch: dict) -> list[SimLingoSample]:
    """The batch's rows as Data_Driving's per-sample outputs, the list their
    DataModule.dl_collate_fn takes (padding rows too: batch["valid"] marks them)."""
    out = []
    for i in range(len(batch["key"])):
        prompt, answer = batch["prompt"][i], batch["answer"][i]
        tp = _row(batch["target_points"], i)
        said = [{"role": "assistant", "content": [{"type": "text", "text": answer}]}]
        out.append(SimLingoSample(
            conversation=[{"role": "user", "content": [{"type": "text", "text": prompt},
                                                       {"type": "image"}]}, *said],
            answer=said, image_ff=_row(batch["image_ff"], i),
            image_ff_org_size=_row(batch["image_ff_org_size"], i),
            waypoints=_row(batch["waypoints"], i), waypoints_1d=_row(batch["waypoints_1d"], i),
            path=_row(batch["path"], i), target_points=tp, speed=float(batch["speed"][i]),
            placeholder_values={PLACEHOLDER: tp}, measurement_path=batch["measurement_path"][i],
            dataset=batch["dataset"][i]))
    return out


@dataclass(frozen=True)
class SimLingoAdapter(ModelAdapter):
    """ModelAdapter with their template files (simlingo_prompts.Templates; none by default)
    and two more pack checks: the frames SimLingo serves and no others, and the cameras as
    saved (their loader never resizes)."""
    templates: Templates = Templates()

    def check(self, manifest: Manifest) -> None:
        super().check(manifest)
        if _pack_arg(manifest, "all_frames"):
            self._refuse(manifest.where, "were packed with --all-frames; it serves only the "
                         "frames SimLingo's loader serves (leave --all-frames out)")
        resize = _pack_arg(manifest, "resize")
        if resize:
            self._refuse(manifest.where, f"were packed with --resize "
                         f"{'x'.join(str(v) for v in resize)}; SimLingo reads its cameras as "
                         "saved (leave --resize out)")


SIMLINGO = SimLingoAdapter(
    name="simlingo", source=SOURCE, layouts=("garage_lb2_simlingo",), image_size=(512, 1024),
    transform=simlingo_sample, cameras=("front",), fields=("measurements",), needs=NEEDS,
    pred_len=10,
    pack="carla-wds pack RAW OUT --layout garage_lb2_simlingo (SimLingo's routes under "
         "data/simlingo/, every frame: leave --stride and --all-frames out)",
    extra_keys=("valid", "key", "prompt", "answer"),
    own_augment=True, augment_load_adapters=((TWIN, SHIFT_PROB),))


def with_templates(folder: str | Path, lmdrive: bool = True, commentary: bool = True
                   ) -> SimLingoAdapter:
    """adapter="simlingo" with their template-driven options on (config.py
    use_lmdrive_commands, commentary_augmentation, as their experiment sets them), read from
    their data/augmented_templates folder; named after the templates' content."""
    templates = Templates.read(folder, lmdrive, commentary)
    text = json.dumps([templates.lmdrive, templates.commentary], sort_keys=True)
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:10]
    return replace(SIMLINGO, name=f"simlingo+templates-{digest}", templates=templates)
