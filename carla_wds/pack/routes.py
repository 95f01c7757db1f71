"""Reading raw CARLA route folders: find routes, read measurements, plan each frame's fate.

Every frame found ends in exactly one of three places: a sample task, the route's tail (the last
pred_len frames, which have no full future), or a `Skip` with its reason. `RoutePlan.check()`
enforces that invariant for every route.
"""
from __future__ import annotations

import json
import logging
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..schema import N_COMMANDS, SchemaError, make_key
from .labels import F32_MAX, frame_labels, non_finite_label
from .layouts import Layout

log = logging.getLogger(__name__)
FIX_SKIP = "fix or remove the file, or pack with --on-error skip to record the frame and go on"


class PackError(RuntimeError):
    """A pack that cannot go on; the message names episode, frame, file, expectation and fix."""


@dataclass(frozen=True)
class Skip:
    episode: str
    frame: int | None
    file: str
    reason: str
    fix: str = FIX_SKIP
    derived: bool = False   # skipped only because another frame's file is bad

    def message(self) -> str:
        frame = "" if self.frame is None else f" frame {self.frame:04d}"
        return f"{self.episode}{frame}: {self.file}: {self.reason}. Fix: {self.fix}"

    def record(self) -> dict[str, Any]:
        return {"episode": self.episode, "frame": self.frame, "file": self.file,
                "reason": self.reason}


@dataclass
class FrameTask:
    episode: str
    frame: int
    key: str
    labels: dict[str, Any]
    image_paths: dict[str, str]    # camera -> absolute file path


@dataclass
class RoutePlan:
    episode: str
    n_frames: int = 0
    tail: int = 0
    tasks: list[FrameTask] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)
    nan_theta: int = 0
    void_command: int = 0

    def check(self) -> None:
        accounted = len(self.tasks) + self.tail + len(self.skipped)
        if accounted != self.n_frames:
            raise AssertionError(f"{self.episode}: {self.n_frames} frames found but "
                                 f"{accounted} accounted for; this is a carla-wds bug")


def find_routes(input_dir: str | Path, layout: Layout) -> list[str]:
    """Route folders (those holding the measurements folder) under input_dir, sorted, posix.

    Symlinked folders are followed (datasets are often assembled from links); a folder reached
    a second time, through a loop or a second link, is searched once and the repeat is logged.
    """
    root = Path(input_dir)
    if not root.is_dir():
        raise PackError(f"INPUT_DIR {root} is not a directory")
    routes, seen = [], {}
    for dirpath, dirnames, _ in os.walk(root, followlinks=True):
        real = os.path.realpath(dirpath)
        if real in seen:
            log.warning("%s is %s again (through a symlink); not searched twice", dirpath,
                        seen[real])
            dirnames.clear()
            continue
        seen[real] = dirpath
        dirnames.sort()
        if layout.measurements in dirnames:
            routes.append(Path(dirpath).relative_to(root).as_posix())
            dirnames.clear()   # a route's own subfolders are never routes
    if not routes:
        raise PackError(f"INPUT_DIR {root}: no route folders found; expected folders holding a "
                        f"'{layout.measurements}/' folder (layout {layout.name}). Fix: point "
                        "INPUT_DIR at the dataset root or choose the right --layout")
    return sorted(routes)


def _read_measurement(path: Path, layout: Layout) -> tuple[dict[str, float] | None, str]:
    """Our named fields from one measurement JSON, or (None, reason)."""
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return None, f"malformed JSON ({exc}); expected a JSON object of measurements"
    if not isinstance(data, dict):
        return None, f"expected a JSON object, found {type(data).__name__}"
    values = {}
    for ours, theirs in layout.fields.items():
        if theirs not in data:
            return None, (f"missing measurement field {theirs!r}; expected fields "
                          f"{sorted(layout.fields.values())}")
        value = data[theirs]
        if isinstance(value, bool) or not isinstance(value, (int, float)) and value is not None:
            return None, f"field {theirs!r} is {value!r}; expected a number"
        values[ours] = math.nan if value is None else float(value)
    # NaN or null theta is CARLA's "no compass reading", which TCP maps to 0 (counted as
    # nan_theta by the planner); an infinite theta is no reading at all but a corrupt value,
    # so it is a bad measurement like an infinite x.
    bad = [layout.fields[k] for k in ("x", "y", "speed", "target_x", "target_y")
           if not math.isfinite(values[k])] + (
        [layout.fields["theta"]] if math.isinf(values["theta"]) else [])
    if bad:
        return None, f"non-finite value in {bad}; expected finite numbers"
    # Labels are stored as float32: a value past its range would become an infinity there.
    huge = [layout.fields[k] for k in ("x", "y", "speed", "target_x", "target_y")
            if abs(values[k]) > F32_MAX]
    if huge:
        return None, (f"value beyond float32 range (|v| > {F32_MAX:.3g}) in {huge}; expected "
                      "coordinates in metres and speeds in m/s")
    if not math.isfinite(values["command"]) or values["command"] != int(values["command"]):
        return None, f"command {values['command']} is not an integer RoadOption"
    if not (values["command"] < 0 or 1 <= values["command"] <= N_COMMANDS):
        return None, (f"field {layout.fields['command']!r} is {int(values['command'])}; expected a "
                      f"CARLA RoadOption: -1 (VOID) or 1..{N_COMMANDS}")
    return values, ""


def _numbered(folder: Path, ext: str) -> tuple[dict[int, str], dict[int, str]]:
    """Files `<digits>.<ext>` of a folder by frame number, and the numbers two files claim
    (0005.json and 00005.json are both frame 5), each with a reason naming both files."""
    files, clash = {}, {}
    for name in sorted(os.listdir(folder)):
        stem, _, e = name.partition(".")
        if e != ext or not stem.isdigit():
            continue
        t = int(stem)
        if t in files:
            clash[t] = (f"{folder.name}/{files[t]} and {folder.name}/{name} are both frame "
                        f"{t}; expected one {ext} file per frame number")
        else:
            files[t] = name
    return files, clash


def _frame_numbers(meas_dir: Path, episode: str
                   ) -> tuple[dict[int, Path], list[Skip], dict[int, str]]:
    """Measurement files by frame, those whose names are no frame number, and clashes."""
    skipped = [Skip(episode, None, f"measurements/{name}",
                    "file name is not a frame number; expected e.g. 0042.json")
               for name in sorted(os.listdir(meas_dir))
               if name.partition(".")[2] == "json" and not name.partition(".")[0].isdigit()]
    files, clash = _numbered(meas_dir, "json")
    return {t: meas_dir / n for t, n in files.items()}, skipped, clash


def _camera_files(route: Path, layout: Layout) -> dict[str, tuple[dict[int, str], dict]]:
    """Per camera: image file names by frame number, and frame-number clashes."""
    listed = {}
    for cam, folder in layout.cameras.items():
        cam_dir = route / folder
        listed[cam] = _numbered(cam_dir, layout.image_ext) if cam_dir.is_dir() else ({}, {})
    return listed


def plan_route(input_dir: str | Path, episode: str, layout: Layout, pred_len: int,
               dot_replacement: str | None = None) -> RoutePlan:
    """Read one route's measurements and decide, for every frame, sample, tail or skip."""
    route = Path(input_dir) / episode
    frames, skipped, clash = _frame_numbers(route / layout.measurements, episode)
    plan = RoutePlan(episode, n_frames=len(frames) + len(skipped), skipped=skipped)
    try:
        key_of = lambda t: make_key(episode, t, dot_replacement)  # noqa: E731
        key_of(0)
    except SchemaError as exc:
        # the error's parts, not its text: Skip.message() adds the fix itself
        plan.skipped += [Skip(episode, t, episode, exc.reason,
                              fix=exc.fix or "rename the route folder") for t in sorted(frames)]
        return plan
    if len(frames) < pred_len + 1:
        plan.skipped += [Skip(episode, t, f"{layout.measurements}/", f"route has {len(frames)} "
                              f"frames; needs at least pred_len + 1 = {pred_len + 1}",
                              fix="remove the route, or pack with --on-error skip")
                         for t in sorted(frames)]
        return plan
    good, bad = _read_all(frames, layout, episode, plan, clash)
    _plan_frames(plan, frames, good, bad, route, layout, pred_len, key_of)
    plan.check()
    return plan


def _read_all(frames: dict[int, Path], layout: Layout, episode: str, plan: RoutePlan,
              clash: dict[int, str]) -> tuple[dict[int, dict[str, float]], dict[int, str]]:
    good, bad = {}, dict(clash)   # a frame with two files has no one measurement to trust
    for t, path in frames.items():
        if t in bad:
            continue
        values, reason = _read_measurement(path, layout)
        if values is None:
            bad[t] = reason
            continue
        if not math.isfinite(values["theta"]):
            values["theta"] = 0.0   # TCP's rule; counted so it is never silent
            plan.nan_theta += 1
        if values["command"] < 0:
            plan.void_command += 1
        good[t] = values
    return good, bad


def _plan_frames(plan: RoutePlan, frames: dict[int, Path], good: dict, bad: dict, route: Path,
                 layout: Layout, pred_len: int, key_of) -> None:
    last = max(frames)
    cam_files = _camera_files(route, layout)
    meas = layout.measurements
    for t in sorted(frames):
        if t in bad:
            plan.skipped.append(Skip(plan.episode, t, f"{meas}/{frames[t].name}", bad[t]))
            continue
        if t + pred_len > last:
            plan.tail += 1
            continue
        future = [t + i for i in range(1, pred_len + 1) if t + i not in good]
        if future:
            what = "missing" if future[0] not in frames else f"unusable ({bad[future[0]]})"
            plan.skipped.append(Skip(plan.episode, t, f"{meas}/{future[0]:04d}.json",
                                     f"future frame {future[0]:04d} is {what}; waypoints need "
                                     f"frames {t + 1}..{t + pred_len}", derived=True))
            continue
        images, problem = _images(t, route, layout, cam_files)
        if problem:
            plan.skipped.append(Skip(plan.episode, t, *problem))
            continue
        labels = _labels(good, t, pred_len, plan.episode)
        overflow = non_finite_label(labels)
        if overflow:
            plan.skipped.append(Skip(plan.episode, t, f"{meas}/{frames[t].name}",
                                     f"label {overflow} is not finite in float32 (computed from "
                                     f"frames {t}..{t + pred_len}, whose values are too far "
                                     "apart); expected coordinates in metres"))
            continue
        plan.tasks.append(FrameTask(plan.episode, t, key_of(t), labels, images))


def _images(t: int, route: Path, layout: Layout, cam_files: dict
            ) -> tuple[dict[str, str], tuple[str, str] | None]:
    """Frame t's image path per camera, or (file, reason) of the first missing or doubled one."""
    images = {}
    for cam, folder in layout.cameras.items():
        files, clash = cam_files[cam]
        if t in clash:
            return images, (f"{folder}/{t:04d}.{layout.image_ext}", clash[t])
        if t not in files:
            return images, (f"{folder}/{t:04d}.{layout.image_ext}", "missing camera file; "
                            f"expected a {layout.image_ext} image for every camera")
        images[cam] = str(route / folder / files[t])
    return images, None


def _labels(good: dict[int, dict[str, float]], t: int, pred_len: int, episode: str) -> dict:
    now = good[t]
    xy = [(good[t + i]["x"], good[t + i]["y"]) for i in range(pred_len + 1)]
    with np.errstate(over="ignore", invalid="ignore"):   # overflow is checked on the result
        labels = frame_labels(xy, now["theta"], (now["target_x"], now["target_y"]),
                              int(now["command"]), pred_len)
    labels["speed"] = now["speed"]
    labels["meta"] = {"episode": episode, "frame": t, "command": int(now["command"])}
    return labels
