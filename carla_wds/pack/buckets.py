"""Buckets by sample key, recorded at pack time in the manifest (issue 29).

SimLingo balances its data over buckets listed in a pickle of paths from its authors'
machine, which loads 0 samples anywhere else. Here every sample's bucket values are computed
while it is packed and stored in its shard's manifest entry, run-length encoded in pack order
(`"buckets": {"speed": [["stopped", 12], ["slow", 30], ...], ...}`): the n-th sample of a
shard is the n-th of its runs, so a bucket is a set of sample positions, never of paths.

Buckets (values are strings; a value that cannot be known is "unknown"):
- `command`: the route command (schema.ROAD_OPTIONS name, e.g. LANEFOLLOW);
- `speed`: the ego speed in m/s, binned by BINS["speed"];
- `accel`: the speed change from the route's previous sample over the time between them
  (frame numbers / the keys' frame rate, key_rate_hz: 10 Hz on Bench2Drive, whose keys count
  source frames), binned by BINS["accel"];
- `yaw_rate`: the heading change from the previous sample's ego pose (ego2world) per second,
  binned by BINS["yaw_rate"]; in CARLA's left-handed world a right turn increases yaw, so the
  bins read `right` for positive rates (packs without poses: "unknown");
- `start`: "from_stop" when the ego moves (>= START_MOVING m/s) and was stopped (< the speed
  bins' first edge) within START_WINDOW s before, in the same route; else "other";
- `town`: the first TownNN token of the route name; `scenario`: a Bench2Drive clip's scenario
  (the name before _TownNN_), a `Scenario<N>` token of the route path, else "none";
- `leading`: the class of the nearest box ahead in the ego's corridor (a car or a walker with
  0 < x < LEADING_AHEAD m and |y| < LEADING_HALF_WIDTH m in the box table's ego frame, x forward):
  "car", "walker" or "none"; "unknown" in packs without boxes.
- `crossing`: the class of the nearest car or walker ahead (0 < x < CROSS_AHEAD m,
  |y| < CROSS_LATERAL m) that moves (speed >= CROSS_MOVING m/s) across the ego's path: its
  heading at least CROSS_ANGLE off the ego's, its sideways velocity towards the corridor, and
  the corridor within CROSS_HORIZON s at that velocity (0 s when already inside): "car",
  "walker" or "none"; "unknown" in packs without boxes. From the box table's own columns
  (`yaw` from x towards y in the table's ego frame, `speed`), so one frame is enough; rows
  without a speed (FILL) never count.
"""
from __future__ import annotations

import io
import json
import math
import re
from bisect import bisect_right
from collections import Counter
from typing import Any, Mapping

import numpy as np

from ..modalities.boxes import BOX_CLASSES, CORE_COLUMNS
from ..schema import ROAD_OPTIONS
from .. import sequence
from ..sequence import split_key

# (upper edges, names): a value v gets names[bisect_right(edges, v)]
BINS: dict[str, tuple[tuple[float, ...], tuple[str, ...]]] = {
    "speed": ((0.1, 2.0, 5.0, 8.0), ("stopped", "slow", "medium", "fast", "very_fast")),
    "accel": ((-2.0, -0.5, 0.5, 2.0), ("brake_hard", "brake", "steady", "accelerate",
                                        "accelerate_hard")),
    "yaw_rate": ((-0.3, -0.05, 0.05, 0.3), ("left_sharp", "left", "straight", "right",
                                             "right_sharp")),
}
NAMES = ("command", "speed", "accel", "yaw_rate", "start", "town", "scenario", "leading",
         "crossing")
START_MOVING, START_WINDOW = 0.5, 2.0   # m/s, s
LEADING_AHEAD, LEADING_HALF_WIDTH = 30.0, 2.0   # m
CROSS_AHEAD, CROSS_LATERAL, CROSS_MOVING = 20.0, 15.0, 0.5   # m, m, m/s
CROSS_ANGLE, CROSS_HORIZON = 30.0, 3.0   # degrees, s
_TOWN = re.compile(r"Town\d+\w*?(?=_|/|$)", re.IGNORECASE)
_CLIP_NAME = re.compile(r"^([A-Za-z]+)_Town\d+")
_SCENARIO = re.compile(r"Scenario\d+", re.IGNORECASE)


def binned(name: str, value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "unknown"
    edges, names = BINS[name]
    return names[bisect_right(edges, value)]


def town_and_scenario(route: str) -> tuple[str, str]:
    town = _TOWN.search(route)
    clip = _CLIP_NAME.match(route.rsplit("/", 1)[-1])
    scenario = clip.group(1) if clip else (_SCENARIO.search(route) or [None])[0]
    return (town.group(0).capitalize() if town else "unknown"), scenario or "none"


def _yaw(sample: Mapping[str, Any]) -> float | None:
    data = sample.get("ego2world.npy")
    if data is None:
        return None
    pose = np.load(io.BytesIO(bytes(data)), allow_pickle=False)
    return float(math.atan2(pose[1, 0], pose[0, 0]))


def _box_rows(sample: Mapping[str, Any]) -> np.ndarray | None:
    """The sample's box table (every layout's begins with the core columns), or None."""
    data = sample.get("boxes.npy")
    if data is None:
        return None
    rows = np.load(io.BytesIO(bytes(data)), allow_pickle=False)
    return rows if rows.ndim == 2 and rows.shape[1] >= len(CORE_COLUMNS) else None


_AGENTS = {BOX_CLASSES["car"]: "car", BOX_CLASSES["walker"]: "walker"}


def _nearest(cls: np.ndarray, x: np.ndarray, chosen: np.ndarray) -> str:
    if not chosen.any():
        return "none"
    return _AGENTS[int(cls[chosen][np.argmin(x[chosen])])]


def leading(sample: Mapping[str, Any]) -> str:
    """The class of the nearest car or walker ahead in the ego's corridor (module doc)."""
    rows = _box_rows(sample)
    if rows is None:
        return "unknown"
    cls, x, y = (rows[:, CORE_COLUMNS.index(c)] for c in ("class", "x", "y"))
    ahead = np.isin(cls, list(_AGENTS)) & (x > 0) & (x < LEADING_AHEAD) & (np.abs(y) < LEADING_HALF_WIDTH)
    return _nearest(cls, x, ahead)


def crossing(sample: Mapping[str, Any]) -> str:
    """The class of the nearest car or walker ahead moving across the ego's path (module
    doc)."""
    rows = _box_rows(sample)
    if rows is None:
        return "unknown"
    cls, x, y, yaw, speed = (rows[:, CORE_COLUMNS.index(c)]
                             for c in ("class", "x", "y", "yaw", "speed"))
    sideways = np.where(speed >= 0, speed, 0.0) * np.sin(yaw)   # velocity along y
    to_corridor = np.maximum(np.abs(y) - LEADING_HALF_WIDTH, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        reach = np.where(to_corridor > 0, to_corridor / np.abs(sideways), 0.0)
    across = (np.isin(cls, list(_AGENTS)) & (x > 0) & (x < CROSS_AHEAD)
              & (np.abs(y) < CROSS_LATERAL) & (speed >= CROSS_MOVING)
              & (np.abs(np.sin(yaw)) >= math.sin(math.radians(CROSS_ANGLE)))
              & ((y * sideways < 0) | (to_corridor == 0)) & (reach <= CROSS_HORIZON))
    return _nearest(cls, x, across)


def key_rate_hz(layout: Any) -> float:
    """Frame numbers per second of a layout's keys (sequence.key_rate_hz, the loader's rule
    too), its `rate_hz` where the spec records no valid rate."""
    spec = layout.spec_doc() if hasattr(layout, "spec_doc") else {}
    return sequence.key_rate_hz({**spec, "rate_hz": layout.rate_hz}) or float(layout.rate_hz)


class BucketCounter:
    """Each sample's bucket values, in stream order, shard by shard; the state carried from
    one shard to the next (the route's last samples) goes into the pack's journal, so a
    resumed pack records the same values as an uninterrupted one."""

    def __init__(self, rate_hz: float, state: Mapping[str, Any] | None = None) -> None:
        self.rate_hz = float(rate_hz)
        # route, then its recent (frame, speed, yaw) within START_WINDOW s, oldest first
        self.route = (state or {}).get("route")
        self.recent: list[list] = [list(r) for r in (state or {}).get("recent", [])]
        self.runs: dict[str, list[list]] = {n: [] for n in NAMES}

    def state(self) -> dict[str, Any]:
        return {"route": self.route, "recent": self.recent}

    def add(self, sample: Mapping[str, Any]) -> None:
        found = split_key(sample["__key__"])
        route, frame = found if found else (sample["__key__"], 0)
        meta = json.loads(bytes(sample["meta.json"]))
        speed = float(json.loads(bytes(sample["speed.json"])))
        yaw = _yaw(sample)
        if route != self.route:
            self.route, self.recent = route, []
        prev = self.recent[-1] if self.recent else None
        dt = (frame - prev[0]) / self.rate_hz if prev else 0.0
        accel = (speed - prev[1]) / dt if prev and dt > 0 else None
        turn = None
        if prev and dt > 0 and yaw is not None and prev[2] is not None:
            turn = math.remainder(yaw - prev[2], math.tau) / dt
        stopped_before = any(s < BINS["speed"][0][0] and (frame - f) / self.rate_hz < START_WINDOW
                             for f, s, _ in self.recent)
        town, scenario = town_and_scenario(meta.get("episode") or route)
        values = {"command": ROAD_OPTIONS.get(int(meta.get("command", -1)), "unknown"),
                  "speed": binned("speed", speed), "accel": binned("accel", accel),
                  "yaw_rate": binned("yaw_rate", turn),
                  "start": "from_stop" if speed >= START_MOVING and stopped_before else "other",
                  "town": town, "scenario": scenario, "leading": leading(sample),
                  "crossing": crossing(sample)}
        for name, value in values.items():
            runs = self.runs[name]
            if runs and runs[-1][0] == value:
                runs[-1][1] += 1
            else:
                runs.append([value, 1])
        self.recent = [r for r in self.recent if (frame - r[0]) / self.rate_hz < START_WINDOW]
        self.recent.append([frame, speed, yaw])

    def take(self) -> dict[str, list[list]]:
        """This shard's runs, and fresh ones for the next shard."""
        done, self.runs = self.runs, {n: [] for n in NAMES}
        return done


def bucket_doc(shards: list[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The manifest's `buckets`: the bins, and every bucket's sizes over the pack."""
    sizes: dict[str, Counter] = {n: Counter() for n in NAMES}
    seen = False
    for s in shards:
        for name, runs in (s.get("buckets") or {}).items():
            seen = True
            for value, n in runs:
                sizes.setdefault(name, Counter())[value] += n
    if not seen:
        return None
    return {"bins": {k: {"edges": list(e), "names": list(n)} for k, (e, n) in BINS.items()},
            "start": {"moving_m_s": START_MOVING, "window_s": START_WINDOW},
            "leading": {"ahead_m": LEADING_AHEAD, "half_width_m": LEADING_HALF_WIDTH},
            "crossing": {"ahead_m": CROSS_AHEAD, "lateral_m": CROSS_LATERAL,
                         "moving_m_s": CROSS_MOVING, "angle_deg": CROSS_ANGLE,
                         "horizon_s": CROSS_HORIZON},
            "sizes": {k: dict(sorted(v.items())) for k, v in sizes.items()}}
