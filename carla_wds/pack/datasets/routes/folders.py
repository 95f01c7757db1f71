"""Reading raw CARLA route folders: find routes, read measurements, plan each frame's fate.

Every frame found ends in exactly one place: a sample task, the route's tail (the last pred_len
frames, which have no full future), the head or the loader's tail (frames with a future that
the project's own loader does not serve: the layout's SampleRule, off with --all-frames), or a
`Skip` with its reason. `RoutePlan.check()` enforces that invariant for every route.
"""
from __future__ import annotations

import logging
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from ....schema import SchemaError, make_key
from ...errors import PackError, WrongLayout
from ...labels import layout_labels, non_finite_label
from ..poses import POSE_MEMBER, PosedTask, frame_pose
from .tracks import TRACKS_MEMBER, route_boxes, route_tracks
from .layout_parts import RouteFilter, SampleRule, lookup
from .layouts import Layout
from .measure import read_measurement, read_source, record_values, wrong_layout_key
from ...routes import FIX_MISSING, RoutePlan, Skip, frame_file
from ...archives import archive_ext
from ...sources import is_dir, is_file, listdir, read_json

log = logging.getLogger(__name__)
def find_routes(input_dir: str | Path, layout: Layout) -> list[str]:
    """Route folders (those holding the measurements folder) under input_dir, sorted, posix;
    PackError if there is none (archived.py reads archives of them)."""
    routes = route_folders(input_dir, layout)
    if not routes:
        raise WrongLayout(f"INPUT_DIR {input_dir}: no route folders found; expected folders "
                          f"holding a '{layout.measurements}/' folder (layout {layout.name}), "
                          "or .tar.gz / .zip archives of them",
                          "point INPUT_DIR at the dataset root or choose the right --layout")
    return routes


def route_folders(input_dir: str | Path, layout: Layout) -> list[str]:
    """Route folders under input_dir, sorted, posix; [] if none.

    Symlinked folders are followed (datasets are often assembled from links); a folder reached
    a second time, through a loop or a second link, is searched once and the repeat is logged.
    """
    root = Path(input_dir)
    if not root.is_dir():
        raise PackError(f"INPUT_DIR {root} is not a directory")
    routes, seen, archives = [], {}, []
    for dirpath, dirnames, files in os.walk(root, followlinks=True):
        real = os.path.realpath(dirpath)
        if real in seen:
            log.warning("%s is %s again (through a symlink); not searched twice", dirpath,
                        seen[real])
            dirnames.clear()
            continue
        seen[real] = dirpath
        dirnames.sort()
        archives += [Path(dirpath) / f for f in files if archive_ext(f)]
        if layout.measurements in dirnames:
            routes.append(Path(dirpath).relative_to(root).as_posix())
            dirnames.clear()   # a route's own subfolders are never routes
    if routes == ["."]:
        raise _one_route(root)
    if routes and archives:   # never a silent half: say what is not read
        log.warning("INPUT_DIR %s holds route folders and %d .tar.gz/.zip archives (e.g. %s); "
                    "the folders are packed, the archives are not read (pack them apart)",
                    root, len(archives), archives[0])
    return sorted(routes)


def _one_route(root: Path) -> PackError:
    """INPUT_DIR is itself a route folder: its name would be the route '.', and keys need the
    route's name, which only its parent's listing gives."""
    held = sorted(d.name + "/" for d in root.iterdir() if d.is_dir())
    name = root.resolve().name
    return PackError(f"INPUT_DIR {root} is one route ({name}): it holds the layout's per-frame "
                     f"folders ({', '.join(held[:6])}) directly, and a route is named after its "
                     f"folder. Fix: pass its parent folder ({root.resolve().parent}), which packs "
                     f"every route under it; or move {name} alone into a folder and pass that")


def _numbered(folder: Path, ext: str, prefix: str = "") -> tuple[dict[int, str], dict[int, str]]:
    """Files `<prefix><digits>.<ext>` of a folder by frame number (%04d and %05d alike), and
    the numbers two files claim (0005.json and 00005.json are both frame 5), each with a
    reason naming both files."""
    files, clash = {}, {}
    for name in sorted(listdir(folder)):
        if not name.startswith(prefix):
            continue
        stem, _, e = name[len(prefix):].partition(".")
        if e != ext or not stem.isdigit():
            continue
        t = int(stem)
        if t in files:
            clash[t] = (f"{folder.name}/{files[t]} and {folder.name}/{name} are both frame "
                        f"{t}; expected one {ext} file per frame number")
        else:
            files[t] = name
    return files, clash


def _frame_numbers(meas_dir: Path, episode: str, ext: str = "json"
                   ) -> tuple[dict[int, Path], list[Skip], dict[int, str]]:
    """Measurement files by frame, those whose names are no frame number, and clashes."""
    skipped = [Skip(episode, None, f"{meas_dir.name}/{name}",
                    f"file name is not a frame number; expected e.g. 0042.{ext}")
               for name in sorted(listdir(meas_dir))
               if name.partition(".")[2] == ext and not name.partition(".")[0].isdigit()]
    files, clash = _numbered(meas_dir, ext)
    return {t: meas_dir / n for t, n in files.items()}, skipped, clash


def _sensor_files(route: Path, layout: Layout
                  ) -> dict[str, tuple[str, tuple[str, str], dict, dict]]:
    """Per extra field (sensors and their twins, camera twins): (folder, (prefix, ext), files
    by frame, clashes)."""
    wanted = [(f"{cam}_augmented", folder, layout.image_ext, "")
              for cam, folder in layout.twins]
    for s in layout.sensors:
        wanted.append((s.name, s.folder, s.ext, s.prefix))
        if s.twin:
            wanted.append((f"{s.name}_augmented", s.twin, s.ext, s.prefix))
    out = {}
    for name, folder, ext, prefix in wanted:
        d = route / folder
        files, clash = _numbered(d, ext, prefix) if is_dir(d) else ({}, {})
        out[name] = (folder, (prefix, ext), files, clash)
    return out


def _sensors(t: int, like: Path, route: Path, sensor_files: dict
             ) -> tuple[dict[str, str], tuple[str, ...] | None]:
    """Frame t's file per extra field, or (file, reason[, fix]) of the first missing or
    doubled one; `like` is frame t's measurement file, whose digit count names the file."""
    paths = {}
    for name, (folder, (prefix, ext), files, clash) in sensor_files.items():
        if t in clash:
            return paths, (f"{folder}/{frame_file(like, t, ext, prefix)}", clash[t])
        if t not in files:
            return paths, (f"{folder}/{frame_file(like, t, ext, prefix)}",
                           f"missing {name} file ({folder}/ has {len(files)} files); "
                           f"expected one for every frame of {like.parent.name}/", FIX_MISSING)
        paths[name] = str(route / folder / files[t])
    return paths, None


class FilterFileError(ValueError):
    """A route filter's file that exists but cannot be read: bad input, not a filtered route."""


def route_filter_reason(route: Path, flt: RouteFilter) -> str:
    """Why a route is left out by the layout's filter, or "" to keep it (carla_garage's
    loader keeps only routes whose results file scores at least `min`; with `keep_also`, a
    project's rule may keep one the score drops: RouteFilter.reason). A results file it
    cannot read (carla_garage's loader stops on it) raises FilterFileError."""
    path = route / flt.file
    if not is_file(path):
        return f"no {flt.file}; the layout keeps only routes whose {flt.key} >= {flt.min:g}"
    if flt.keep_also:   # the score or the project's own rule (RouteFilter.reason)
        try:
            return flt.reason(read_json(path))
        except (ValueError, OSError) as exc:
            raise FilterFileError(f"unreadable ({exc})") from None
    try:
        score = lookup(read_json(path), flt.key)
    except (ValueError, OSError, KeyError) as exc:
        raise FilterFileError(f"unreadable ({exc}); expected a JSON object with {flt.key}"
                              ) from None
    if isinstance(score, bool) or not isinstance(score, (int, float)) or math.isnan(score):
        raise FilterFileError(f"{flt.key} is {str(score)[:40]!r}; expected a number")
    if not score >= flt.min:
        return f"{flt.file}: {flt.key} is {score:g} < {flt.min:g}"
    return ""


def _unreadable_filter(route: Path, episode: str, layout: Layout, reason: str) -> RoutePlan:
    """A route whose filter file is bad: each of its frames is skipped naming that file, so
    fail mode stops on it and skip mode counts and lists it (never a silent drop)."""
    flt = layout.route_filter
    fix = (f"restore the route's {flt.file} (or remove the route), or pack with --on-error "
           "skip to record its frames and go on")
    meas = route / layout.measurements
    frames, skipped, _ = _frame_numbers(meas, episode, layout.measurements_ext) \
        if is_dir(meas) else ({}, [], {})
    if not frames:
        return RoutePlan(episode, filtered=f"{flt.file}: {reason}")
    bad = [Skip(episode, t, flt.file, reason, fix=fix) for t in sorted(frames)]
    return RoutePlan(episode, n_frames=len(frames) + len(skipped), skipped=bad + skipped)


def _camera_files(route: Path, layout: Layout) -> dict[str, tuple[dict[int, str], dict]]:
    """Per camera: image file names by frame number, and frame-number clashes."""
    listed = {}
    for cam, folder in layout.cameras.items():
        cam_dir = route / folder
        listed[cam] = _numbered(cam_dir, layout.image_ext) if is_dir(cam_dir) else ({}, {})
    return listed


def plan_route(input_dir: str | Path, episode: str, layout: Layout, pred_len: int,
               dot_replacement: str | None = None, allow_pickle: bool = False,
               all_frames: bool = False) -> RoutePlan:
    """Read one route's measurements and decide, for every frame, sample, tail, head, the
    loader's tail (the layout's SampleRule; none with all_frames) or skip."""
    route = Path(input_dir) / episode
    if layout.route_filter is not None:
        try:
            reason = route_filter_reason(route, layout.route_filter)
        except FilterFileError as exc:
            return _unreadable_filter(route, episode, layout, str(exc))
        if reason:
            return RoutePlan(episode, filtered=reason)
    frames, skipped, clash = _frame_numbers(route / layout.measurements, episode,
                                            layout.measurements_ext)
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
    good, bad = _read_all(frames, layout, episode, plan, clash, route, allow_pickle)
    if wrong_layout_key(episode, bad, len(good)):
        raise PackError(wrong_layout_key(episode, bad, len(good)))
    rule = SampleRule() if all_frames else layout.samples
    _plan_frames(plan, frames, good, bad, route, layout, (pred_len, rule), key_of)
    plan.check()
    return plan


def _read_all(frames: dict[int, Path], layout: Layout, episode: str, plan: RoutePlan,
              clash: dict[int, str], route: Path, allow_pickle: bool
              ) -> tuple[dict[int, dict[str, Any]], dict[int, str]]:
    good, bad = {}, dict(clash)   # a frame with two files has no one measurement to trust
    listed = {s.name: _numbered(route / s.folder, s.ext)[0] if is_dir(route / s.folder)
              else {} for s in layout.sources}
    for t, path in frames.items():
        if t in bad:
            continue
        values, reason = read_measurement(path, layout)
        for source in layout.sources if values is not None else ():
            if t not in listed[source.name]:
                values, reason = None, (f"no {source.folder}/"
                                        f"{frame_file(path, t, source.ext)}; expected "
                                        f"one {source.name} file per measurement")
                break
            reason = read_source(route / source.folder / listed[source.name][t], layout,
                                 source.name, values, allow_pickle)
            if reason:
                values, reason = None, f"{source.folder}/{listed[source.name][t]}: {reason}"
                break
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
                 layout: Layout, sampling: tuple[int, SampleRule], key_of) -> None:
    pred_len, rule = sampling
    last = max(frames)
    cam_files = _camera_files(route, layout)
    sensor_files = _sensor_files(route, layout)
    meas = layout.measurements
    moving = _moving(good, route, layout, sensor_files)
    for t in sorted(frames):
        if t in bad:
            plan.skipped.append(Skip(plan.episode, t, f"{meas}/{frames[t].name}", bad[t]))
            continue
        if t + pred_len > last:
            plan.tail += 1
            continue
        # the project's loop: frame numbers from rule.head, ending rule.tail frames early
        if t < rule.head or t + pred_len + rule.tail > last:
            plan.head += t < rule.head
            plan.loader_tail += t >= rule.head
            continue
        future = [t + i for i in range(1, pred_len + 1) if t + i not in good]
        if future:
            what = "missing" if future[0] not in frames else f"unusable ({bad[future[0]]})"
            name = frames[future[0]].name if future[0] in frames else \
                frame_file(frames[t], future[0], layout.measurements_ext)
            plan.skipped.append(Skip(plan.episode, t, f"{meas}/{name}",
                                     f"future frame {future[0]:04d} is {what}; waypoints need "
                                     f"frames {t + 1}..{t + pred_len}", derived=True))
            continue
        images, problem = _images(t, frames[t], route, layout, cam_files)
        sensors, problem = _sensors(t, frames[t], route, sensor_files) if not problem \
            else ({}, problem)
        if problem:
            plan.skipped.append(Skip(plan.episode, t, *problem))
            continue
        labels = _labels(good, t, pred_len, plan.episode, layout)
        overflow = non_finite_label(labels)
        if overflow:
            plan.skipped.append(Skip(plan.episode, t, f"{meas}/{frames[t].name}",
                                     f"label {overflow} is not finite in float32 (computed from "
                                     f"frames {t}..{t + pred_len}, whose values are too far "
                                     "apart); expected coordinates in metres"))
            continue
        record = record_values([good[t + i] for i in range(pred_len + 1)], layout) \
            if layout.measurement_fields else None
        arrays = _arrays(t, good[t], layout, moving)
        if isinstance(arrays, str):
            plan.skipped.append(Skip(plan.episode, t, f"{meas}/{frames[t].name}", arrays))
            continue
        plan.tasks.append(PosedTask(plan.episode, t, key_of(t), labels, images, sensors, record,
                                    arrays))


def _arrays(t: int, values: dict[str, Any], layout: Layout, moving: tuple[dict, dict] | None
            ) -> dict[str, np.ndarray] | str:
    """The members computed from frame t's measurement (its ego pose) and, with the layout's
    tracks, from the route's other frames; or why the frame has none."""
    if not layout.pose:
        return {}
    try:
        out = {POSE_MEMBER: frame_pose(values, layout.pose)}
    except SchemaError as exc:   # an ego_matrix that is no rigid transform
        return exc.reason
    tracks = route_tracks(t, *moving, layout.tracks) if moving else None
    if tracks is not None:
        out[TRACKS_MEMBER] = tracks
    return out


def _moving(good: dict[int, dict[str, Any]], route: Path, layout: Layout, sensor_files: dict
            ) -> tuple[dict, dict] | None:
    """For the layout's tracks: every readable frame's box table and ego pose (None: none)."""
    if layout.tracks is None:
        return None
    sensor = next(s for s in layout.sensors if s.name == layout.tracks.sensor)
    folder, _, files, _ = sensor_files[sensor.name]
    tables = route_boxes({t: str(route / folder / n) for t, n in files.items() if t in good},
                         sensor.read, sensor.ext.endswith(".gz"))
    poses = {}
    for t in tables:
        try:
            poses[t] = frame_pose(good[t], layout.pose)
        except SchemaError:   # that frame is skipped for its own pose
            continue
    return tables, poses


def _images(t: int, like: Path, route: Path, layout: Layout, cam_files: dict
            ) -> tuple[dict[str, str], tuple[str, ...] | None]:
    """Frame t's image path per camera, or (file, reason[, fix]) of the first missing or
    doubled one; `like` is frame t's measurement file, whose digit count names the file."""
    images = {}
    for cam, folder in layout.cameras.items():
        files, clash = cam_files[cam]
        if t in clash:
            return images, (f"{folder}/{frame_file(like, t, layout.image_ext)}", clash[t])
        if t not in files:
            return images, (f"{folder}/{frame_file(like, t, layout.image_ext)}",
                            "missing camera file; expected a "
                            f"{layout.image_ext} image for every camera", FIX_MISSING)
        images[cam] = str(route / folder / files[t])
    return images, None


def _labels(good: dict[int, dict[str, Any]], t: int, pred_len: int, episode: str,
            layout: Layout) -> dict:
    now = good[t]
    xy = [(good[t + i]["x"], good[t + i]["y"]) for i in range(pred_len + 1)]
    mats = [good[t + i]["ego_matrix"] for i in range(pred_len + 1)] \
        if layout.waypoints_from == "ego_matrix" else None
    with np.errstate(over="ignore", invalid="ignore"):   # overflow is checked on the result
        labels = layout_labels(xy, now["theta"], (now["target_x"], now["target_y"]),
                               int(now["command"]), pred_len, mats, layout.waypoint_origin,
                               layout.target_from == "ego")
    labels["speed"] = now["speed"]
    labels["meta"] = {"episode": episode, "frame": t, "command": int(now["command"])}
    return labels
