"""LEAD's routes: where they are under INPUT_DIR, which its loader trains on, and which frames.

From kesai-labs/lead@44891760:
- lead/data_buckets/abstract_bucket_collection.py iter_root: the data root holds scenario
  folders, each holding route folders; both are visited sorted. iter_route: a route has
  len(os.listdir(route/bboxes)) frames and serves range(skip_first, num_seq - skip_last).
- lead/training/config_training.py: skip_first = skip_last = num_way_points_prediction = 8
  when training the planner (carla_leaderboard_mode, use_planning_decoder; l.329-345); in
  pre-training (no planning decoder) both are 1, but then no waypoint label exists.
- lead/data_buckets/route_filtering.py route_not_finished / route_failed (both applied by
  the full post-train bucket collection): a route without results.json or metas/0000.pkl is
  left out, and so is a route whose results say it failed (`route_failure` below).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...archives import ZIP
from ...errors import PackError
from ...sources import is_dir, is_file, listdir, read_json

SKIP_FIRST = SKIP_LAST = 8   # num_way_points_prediction when the planner is trained
RESULTS = "results.json"
FRAME_FOLDER = "bboxes"      # the folder whose file count is the route's frame count
_MARKERS = ("bboxes", "metas", "rgb", RESULTS)


@dataclass(frozen=True)
class LeadRoute:
    """One route: `name` its path below INPUT_DIR ("scenario/route"), `path` its folder or
    its `.zip` (what is on disk: the cluster plan sizes it)."""
    name: str
    path: Path

    @property
    def archive(self) -> Path | None:
        """The route's zip, or None for a folder."""
        return self.path if self.path.name.endswith(ZIP) else None

    @property
    def folder(self) -> Path:
        """Where its files are read: the folder, or where the zip would be extracted (its
        path less `.zip`; archive.py serves the members there)."""
        return self.path.with_name(self.path.name[:-len(ZIP)]) if self.archive else self.path


def _is_route(path: Path) -> bool:
    return any((path / m).exists() for m in _MARKERS)


def _zip_route(zipped: Path, name: str) -> LeadRoute:
    return LeadRoute(name[:-len(ZIP)], zipped)


def _routes_in(child: Path) -> list[LeadRoute]:
    """The route folders and route zips one level below a scenario folder."""
    out = []
    for r in sorted(child.iterdir()):
        if r.is_symlink():
            continue
        if r.is_dir() and _is_route(r):
            out.append(LeadRoute(f"{child.name}/{r.name}", r))
        elif r.is_file() and r.name.endswith(ZIP):
            out.append(_zip_route(r, f"{child.name}/{r.name}"))
    return out


def find_routes(input_dir: str | Path) -> list[LeadRoute]:
    """The routes of INPUT_DIR: INPUT_DIR/<scenario>/<route> as LEAD's data root holds them
    (folders, or `<route>.zip` as ln2697/lead_carla distributes them, read in place), also a
    folder of routes or one route; sorted by (scenario, route) as iter_root. PackError when
    there are none."""
    root = Path(input_dir)
    if root.is_file() and root.name.endswith(ZIP):
        return [_zip_route(root, root.name)]
    if not root.is_dir():
        raise PackError(f"INPUT_DIR {root} is not a folder. Fix: point it at LEAD's data "
                        "folder (scenario folders holding route folders or route zips)")
    if _is_route(root):
        return [LeadRoute(root.name, root)]
    found: list[LeadRoute] = []
    for child in sorted(p for p in root.iterdir() if not p.is_symlink()):
        if child.is_dir() and _is_route(child):
            found.append(LeadRoute(child.name, child))
        elif child.is_dir():
            found += _routes_in(child)
        elif child.name.endswith(ZIP):
            found.append(_zip_route(child, child.name))
    if not found:
        raise PackError(f"INPUT_DIR {root}: no LEAD routes (a folder with bboxes/, metas/, "
                        "rgb/ or results.json, or a route .zip) in it or two levels down. Fix: "
                        "point it at LEAD's data folder (scenario folders holding routes)")
    return found


def route_failure(results: Any) -> str:
    """Why LEAD's route_failed leaves a route out ("" keeps it), from its results.json, in
    that function's order: an infraction other than min-speed ones (or, on a Completed route,
    min-speed and outside-lane ones), or a Failed status."""
    try:
        status = results["status"]
        score = float(results["scores"]["score_composed"])
        n = int(results["num_infractions"])
        infractions = results["infractions"]
        min_speed = len(infractions["min_speed_infractions"])
        outside = len(infractions["outside_route_lanes"])
    except (KeyError, TypeError, ValueError) as exc:
        return (f"{RESULTS} lacks {exc} (needs status, scores.score_composed, num_infractions, "
                "infractions.min_speed_infractions and .outside_route_lanes)")
    infraction = True
    if score == 100.0:
        infraction = False
    if score < 100.0 and n == min_speed:
        infraction = False
    if status == "Completed" and n == min_speed + outside:
        infraction = False
    if status == "Perfect":
        infraction = False
    if infraction or status in ("Failed", "Failed - Agent couldn't be set up",
                                "Failed - Simulation crashed", "Failed - Agent crashed"):
        return f"{RESULTS}: status {status!r}, score_composed {score:g}, {n} infraction(s)"
    return ""


def left_out(route: Path) -> str:
    """Why LEAD's post-train buckets leave this route out ("" keeps it)."""
    if not is_file(route / RESULTS):
        return f"no {RESULTS} (the route did not finish)"
    if not is_file(route / "metas" / "0000.pkl"):
        return "no metas/0000.pkl"
    try:
        results = read_json(route / RESULTS)
    except (ValueError, OSError) as exc:
        return f"{RESULTS} does not read ({exc})"
    return route_failure(results)


def frame_count(route: Path) -> int:
    """LEAD's num_seq: the number of entries in bboxes/ (0 without the folder)."""
    folder = route / FRAME_FOLDER
    return len(listdir(folder)) if is_dir(folder) else 0


def sample_frames(n: int, all_frames: bool) -> range:
    """The frames LEAD's loader serves of a route with n frames (--all-frames: every frame;
    the plan then keeps those whose metas hold a full future)."""
    return range(n) if all_frames else range(SKIP_FIRST, n - SKIP_LAST)


__all__ = ["LeadRoute", "RESULTS", "SKIP_FIRST", "SKIP_LAST", "find_routes", "frame_count",
           "left_out", "route_failure", "sample_frames"]
