"""The language overlays of the carla_garage family (garage, garage_lb2: PDM-Lite data), for
`carla-wds pack-overlay --kind ...` (pack/overlay.py). Each kind's paths and JSON structure
as its project writes and reads them:

SimLingo (RenzKa/simlingo @ eb2b89a): the driving data sits under `data/`, the labels under
`commentary/`, `dreamer/` and `drivelm/`, one `.json.gz` per frame, found from a frame's
measurements file by path replacement:
- simlingo_commentary: `measurements` -> `commentary`, `data/` -> `commentary/`
  (simlingo_training/dataloader/dataset_driving.py:86); a dict with what their loader reads
  (dataset_driving.py:101-117, commentary_augmentation on by default, config.py:53):
  `commentary` a str (:101, str.replace at :116-117), `commentary_template` a str (looked up
  in the templates at :106; a str as their generator writes it, dataset_generation/
  language_labels/commentary/carla_commentary_generator.py:368) and `placeholder` an object
  of str -> str (:108-110: `key in commentary`, `commentary.replace(key, value)`; written at
  :373). An entry without them fails in their training; pack-overlay refuses it, naming the
  file and the key (the README's other keys, image, cause_object, ..., are never read);
- simlingo_drivelm: `measurements` -> `vqa`, `data/` -> `drivelm/` (dataset_driving.py:121);
  a dict whose `QA` maps a category to a list of {"Q", "A", ...} (dataset_driving.py:133-135);
- simlingo_dreamer: `measurements` -> `dreamer`, `data/` -> `dreamer/` (dataset_base.py:286,
  dreamer_folder = 'dreamer' at :50); a dict of instruction options, each a dict with
  `dreamer_instruction`, `waypoints`, `route`, `safe_to_execute`, ...
  (simlingo_training/dataloader/dataset_dreamer.py:85-117).
So an entry is `<route path>/<label folder>/NNNN.json.gz`: the route folder is the part
before the label folder, the frame the file's stem.

DriveLM-CARLA (OpenDriveLab/DriveLM, branch DriveLM-CARLA @ 0737c33): one `.json` per
keyframe, `<out>/<Town>/<Scenario>/<route prefix>/NNNN.json`, where the route prefix keeps
only the first two `_` parts of the route folder's name (vqa_dataset/
carla_vqa_generator_main.py:220-227), so the path cannot name the route; the file's
`image_paths.CAM_FRONT` is the keyframe's own `.../<route folder>/rgb/NNNN.jpg`, which does
(:185-196). The rest: `QA` with `perception`, `prediction`, `planning` and `behavior` lists
of {"Q", "A", "C", "con_up", "con_down", "cluster", "layer"} and `key_object_infos`.
"""
from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

from ...overlay_kinds import Located, OverlayKind, route_and_frame

_JSON_GZ = ".json.gz"


def _route_folder_entry(label_folder: str):
    """locate: `<route path>/<label_folder>/NNNN.json.gz` -> (route path, NNNN)."""
    def locate(rel: PurePosixPath, value: Any) -> Located | str:
        parts = rel.parts
        if len(parts) < 3 or parts[-2] != label_folder:
            return f"file {rel}: not in a {label_folder}/ folder of a route"
        return route_and_frame(parts[:-2], parts[-1][:-len(_JSON_GZ)], str(rel))
    return locate


_ABSENT = object()


def _commentary(value: Any) -> str | None:
    """SimLingo's commentary schema, as their loader reads it (module docstring)."""
    if not isinstance(value, dict) or not isinstance(value.get("commentary"), str):
        return "expected a JSON object with a 'commentary' string"
    template = value.get("commentary_template", _ABSENT)
    if not isinstance(template, str):
        return (f"'commentary_template' is {_what(template)}; expected a string (their loader "
                "looks it up in its commentary templates)")
    placeholder = value.get("placeholder", _ABSENT)
    if not isinstance(placeholder, dict):
        return (f"'placeholder' is {_what(placeholder)}; expected an object of placeholder -> "
                "replacement strings (their loader replaces each in the template)")
    bad = [k for k, v in placeholder.items() if not isinstance(v, str)]
    if bad:
        return (f"'placeholder' entry {bad[0]!r} is {_what(placeholder[bad[0]])}; expected a "
                "string (their loader replaces the placeholder with it)")
    return None


def _what(value: Any) -> str:
    """A JSON value's kind, for a message."""
    if value is _ABSENT:
        return "missing"
    names = {type(None): "null", bool: "a boolean", int: "a number", float: "a number",
             str: "a string", list: "a list", dict: "an object"}
    return names.get(type(value), type(value).__name__)


def _qa(value: Any) -> str | None:
    qa = value.get("QA") if isinstance(value, dict) else None
    if not isinstance(qa, dict) or not all(isinstance(v, list) for v in qa.values()):
        return "expected a JSON object whose 'QA' maps categories to lists of Q/A pairs"
    return None


def _dreamer(value: Any) -> str | None:
    if not isinstance(value, dict) or not all(
            isinstance(o, dict) and "dreamer_instruction" in o for o in value.values()):
        return "expected a JSON object of options, each with a 'dreamer_instruction'"
    return None


def _keyframe(rel: PurePosixPath, value: Any) -> Located | str:
    """DriveLM-CARLA: the keyframe named by image_paths.CAM_FRONT (module docstring)."""
    front = (value.get("image_paths") or {}).get("CAM_FRONT")
    if not isinstance(front, str) or not front.endswith(".jpg"):
        return f"file {rel}: image_paths.CAM_FRONT names no .../rgb/NNNN.jpg"
    parts = PurePosixPath(front.replace("\\", "/")).parts
    if len(parts) < 3 or parts[-2] != "rgb":
        return f"file {rel}: image_paths.CAM_FRONT {front!r} is not .../rgb/NNNN.jpg"
    return route_and_frame(parts[:-2], parts[-1][:-len(".jpg")], str(rel))


def _drivelm_check(value: Any) -> str | None:
    return _qa(value) or (None if isinstance(value.get("image_paths"), dict) else
                          "expected a JSON object with 'image_paths' (DriveLM-CARLA)")


_SIMLINGO = "RenzKa/simlingo simlingo_training/dataloader/"
KINDS = {
    "simlingo_commentary": OverlayKind(
        "simlingo_commentary", _SIMLINGO + "dataset_driving.py:86-117", (_JSON_GZ,),
        _route_folder_entry("commentary"), _commentary),
    "simlingo_drivelm": OverlayKind(
        "simlingo_drivelm", _SIMLINGO + "dataset_driving.py:121-135", (_JSON_GZ,),
        _route_folder_entry("vqa"), _qa),
    "simlingo_dreamer": OverlayKind(
        "simlingo_dreamer", _SIMLINGO + "dataset_base.py:286, dataset_dreamer.py:85-117",
        (_JSON_GZ,), _route_folder_entry("dreamer"), _dreamer),
    "drivelm": OverlayKind(
        "drivelm", "OpenDriveLab/DriveLM@DriveLM-CARLA vqa_dataset/"
        "carla_vqa_generator_main.py:170-227", (".json",), _keyframe, _drivelm_check),
}
