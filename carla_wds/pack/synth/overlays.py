"""Synthetic overlay trees in each kind's real structure (pack/datasets/routes/overlays.py,
pack/datasets/bench2drive/overlays.py give the sources), over routes or clips that `synth`
wrote: `synth_overlay(out, kind, routes)`. The paths and the JSON's shape are the projects';
the words are made up.

Which frames get an entry is drawn per frame (`coverage`, seeded); `unmatched` entries name a
route no base holds, so that a pack-overlay run has some to count and list.
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any, Callable

import numpy as np

QA_CATEGORIES = ("perception", "prediction", "planning", "behavior")


def _qa(route: str, frame: int) -> dict[str, list[dict[str, Any]]]:
    """DriveLM's QA graph nodes (carla_vqa_generator_main.py's qa_item), a few per category."""
    return {c: [{"Q": f"What is important in {c} at frame {frame}?",
                 "A": f"The car ahead on {route[-12:]} — keep the lane.", "C": None,
                 "con_up": [], "con_down": [], "cluster": i, "layer": i}
                for i in range(1 + frame % 2)] for c in QA_CATEGORIES}


def _commentary(route: str, frame: int) -> dict[str, Any]:
    return {"commentary": f"Follow the road past the café, frame {frame}.",
            "commentary_template": "Follow the road past the <LOCATION>.",
            "placeholder": {"<LOCATION>": "café"}}


def _dreamer(route: str, frame: int) -> dict[str, Any]:
    return {"faster": {"dreamer_instruction": ["Drive faster.", "Speed up a little."],
                       "waypoints": "org", "route": "org", "safe_to_execute": frame % 3 != 0,
                       "dreamer_answer_safety": "That would be unsafe here."},
            "stop": {"dreamer_instruction": ["Stop now."], "waypoints": [[0.0, 0.0]] * 4,
                     "route": "org", "safe_to_execute": True}}


def _write_json(path: Path, value: Any, gz: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps(value, ensure_ascii=False, indent=1).encode("utf-8")
    path.write_bytes(gzip.compress(data, mtime=0) if gz else data)


def _simlingo(folder: str, content: Callable[[str, int], Any]):
    """SimLingo: <route path>/<folder>/NNNN.json.gz, the route path as under its data/."""
    def write(out: Path, rel: Path, frame: int) -> Path:
        path = out / rel / folder / f"{frame:04d}.json.gz"
        _write_json(path, content(rel.name, frame), gz=True)
        return path
    return write


def _drivelm(out: Path, rel: Path, frame: int) -> Path:
    """DriveLM-CARLA: <Town>/<Scenario>/<route prefix>/NNNN.json; CAM_FRONT the keyframe."""
    town = next((p for p in rel.parts if p.lower().startswith("town")), "Town01")
    prefix = "_".join(rel.name.split("_")[:2])
    path = out / town / "Scenario" / prefix / f"{frame:04d}.json"
    cams = ("CAM_FRONT", "CAM_FRONT_LEFT", "CAM_FRONT_RIGHT", "CAM_BACK", "CAM_BACK_LEFT",
            "CAM_BACK_RIGHT")
    value = {"key_object_infos": {}, "QA": _qa(rel.name, frame),
             "image_paths": {c: None for c in cams}}
    value["image_paths"]["CAM_FRONT"] = f"/database/data/{rel.as_posix()}/rgb/{frame:04d}.jpg"
    _write_json(path, value, gz=False)
    return path


def _b2d_vl(out: Path, rel: Path, frame: int) -> Path:
    """Bench2Drive-VL: <clip>/<frame:05d>.json."""
    path = out / rel.name / f"{frame:05d}.json"
    _write_json(path, {"QA": _qa(rel.name, frame)}, gz=False)
    return path


def _b2d_speed(out: Path, rel: Path, frame: int) -> Path:
    """Bench2Drive-Speed: <clip>/appended_anno/<frame:05d>.json.gz, the frame's anno with its
    speeds appended (here only a part of the anno: speed, and a box list standing for the
    rest, which the overlay leaves out)."""
    path = out / rel.name / "appended_anno" / f"{frame:05d}.json.gz"
    speed = 0.25 * (frame % 20)
    _write_json(path, {"speed": speed, "bounding_boxes": [{"class": "ego_vehicle"}],
                       "fut_speed": [speed + 0.1 * i for i in range(1, 5)],
                       "tendency_speed": speed + 0.4, "virtual_target_speed": speed + 1.5},
                gz=True)
    return path


WRITERS = {"simlingo_commentary": _simlingo("commentary", _commentary),
           "simlingo_drivelm": _simlingo("vqa", lambda r, f: {"QA": _qa(r, f)}),
           "simlingo_dreamer": _simlingo("dreamer", _dreamer),
           "drivelm": _drivelm, "b2d_vl": _b2d_vl, "b2d_speed": _b2d_speed}
# where a route's (clip's) frames are listed in its raw folder
_FRAMES = {"b2d_vl": "anno", "b2d_speed": "anno"}


def route_frames(route: Path, kind: str) -> list[int]:
    folder = route / _FRAMES.get(kind, "measurements")
    return sorted(int(p.name.split(".")[0]) for p in folder.iterdir()
                  if p.name.split(".")[0].isdigit())


def synth_overlay(out: str | Path, kind: str, routes: list[Path], root: str | Path,
                  coverage: float = 0.5, unmatched: int = 2, seed: int = 0) -> list[Path]:
    """Write KIND's tree under out for `routes` (folders under `root`, as synth wrote them):
    an entry for each frame with probability `coverage`, plus `unmatched` entries of a route
    no base holds. Returns the files written, sorted."""
    if kind not in WRITERS:
        raise ValueError(f"unknown overlay kind {kind!r}; valid: {sorted(WRITERS)}")
    out, root = Path(out), Path(root)
    rng = np.random.default_rng(seed)
    written = []
    for route in sorted(routes):
        rel = route.relative_to(root)
        for frame in route_frames(route, kind):
            if rng.random() < coverage:
                written.append(WRITERS[kind](out, rel, frame))
    ghost = Path(*rel.parts[:-1], "Town99_Rep0_missing_route_01") if routes else \
        Path("Town99_Rep0_missing_route_01")
    written += [WRITERS[kind](out, ghost, f) for f in range(unmatched)]
    return sorted(written)


def raw_routes(root: str | Path, kind: str) -> list[Path]:
    """The route (clip) folders under a folder synth wrote: those holding the frame files a
    kind's entries are written for (measurements/, or a clip's anno/)."""
    folder = _FRAMES.get(kind, "measurements")
    return sorted(p.parent for p in Path(root).rglob(folder) if p.is_dir())
