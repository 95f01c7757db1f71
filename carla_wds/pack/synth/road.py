"""The synthetic road of carla_wds.pack.synth: a lane centreline made of straights, junction
crossings, junction turns and gentle bends, sampled every DS metres of arc length.

Re-exported by world.py (see its docstring for the world frame convention).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

DS = 0.5                 # m between samples of the road centreline
LEAD_IN = 120.0          # m of straight road behind the start, seen by the rear camera
MAX_SPEED = 10.0

_STRAIGHT, _JUNCTION, _TURN, _BEND = 0, 1, 2, 3


@dataclass
class _Road:
    """Lane centreline sampled every DS metres of arc length, starting at s = -LEAD_IN."""
    x: np.ndarray
    y: np.ndarray
    heading: np.ndarray
    kind: np.ndarray      # segment kind of each sample
    curv: np.ndarray      # 1/m; > 0 turns right (theta grows), < 0 left
    vmax: np.ndarray      # comfortable speed on that segment

    def index(self, s: float) -> int:
        return int(np.clip(round((s + LEAD_IN) / DS), 0, len(self.x) - 1))

    def at(self, s: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        grid = np.arange(len(self.x)) * DS - LEAD_IN
        return (np.interp(s, grid, self.x), np.interp(s, grid, self.y),
                np.interp(s, grid, self.heading))


def _segments(rng: np.random.Generator, length: float) -> list[tuple[int, float, float, float]]:
    """(kind, length m, curvature 1/m, vmax m/s) until the road is `length` long."""
    segs = [(_STRAIGHT, LEAD_IN + rng.uniform(10.0, 40.0), 0.0, rng.uniform(7.0, MAX_SPEED))]
    total = segs[0][1]
    while total < length:
        r = rng.random()
        sign = 1.0 if rng.random() < 0.5 else -1.0
        if r < 0.3:
            new = [(_STRAIGHT, rng.uniform(15.0, 60.0), 0.0, rng.uniform(6.0, MAX_SPEED))]
        elif r < 0.45:
            new = [(_JUNCTION, rng.uniform(12.0, 25.0), 0.0, rng.uniform(5.0, 8.0))]
        elif r < 0.8:
            # Junction turns: radius >= 9 m keeps the far road edge (5.25 m) off the centre.
            radius, angle = rng.uniform(9.0, 25.0), math.radians(rng.uniform(60.0, 100.0))
            new = [(_TURN, radius * angle, sign / radius, min(6.0, math.sqrt(2.5 * radius))),
                   (_STRAIGHT, rng.uniform(10.0, 40.0), 0.0, rng.uniform(6.0, MAX_SPEED))]
        else:
            radius, angle = rng.uniform(40.0, 120.0), math.radians(rng.uniform(10.0, 35.0))
            new = [(_BEND, radius * angle, sign / radius, min(MAX_SPEED, math.sqrt(3 * radius)))]
        segs += new
        total += sum(seg[1] for seg in new)
    return segs


def _make_road(rng: np.random.Generator, length: float) -> _Road:
    segs = _segments(rng, length)
    ends = np.cumsum([seg[1] for seg in segs]) - LEAD_IN
    n = int(math.ceil((ends[-1] + LEAD_IN) / DS)) + 1
    s = np.arange(n) * DS - LEAD_IN
    seg_of = np.minimum(np.searchsorted(ends, s, side="right"), len(segs) - 1)
    table = np.array(segs)
    curv = table[seg_of[:-1], 2]
    heading = rng.uniform(-math.pi, math.pi) + np.concatenate([[0.0], np.cumsum(curv * DS)])
    mid = heading[:-1] + curv * DS / 2   # midpoint rule keeps arcs circular
    x = np.concatenate([[0.0], np.cumsum(DS * np.cos(mid))])
    y = np.concatenate([[0.0], np.cumsum(DS * np.sin(mid))])
    start = np.round(rng.uniform(-200.0, 200.0, 2), 1)   # towns are not centred on the ego
    i0 = int(round(LEAD_IN / DS))
    return _Road(x - x[i0] + start[0], y - y[i0] + start[1], heading,
                 table[seg_of, 0].astype(int), table[seg_of, 2],
                 table[seg_of, 3])
