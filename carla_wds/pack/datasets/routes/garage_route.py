"""carla_garage's route label: the saved route as its loader serves it (smooth_route = True).

carla_garage (TransFuser++) saves up to 20 ego-frame points of the remaining dense route per
frame (`route`); its loader (autonomousvision/carla_garage@1448bed team_code/data.py
__getitem__ l.670-684) pads a short route to config.num_route_points = 20 by repeating its last
point (or keeps the first 20), moves it with the sample's camera augmentation
(augment_route: R(yaw).T @ (p - (0, y))), and, with config.smooth_route = True (config.py
l.260), resamples it with smooth_path / iterative_line_interpolation (data.py l.1066-1137):

- the first point becomes the vehicle origin (0, 0) ("it can be behind the vehicle during lane
  changes"), then exact duplicate points are dropped, keeping their first occurrence in order;
- walking the polyline from (0, 0), the first output point is where a circle of radius
  dense_route_planner_min_distance - 1 = 3.5 - 1 = 2.5 m (config.py l.496) around (0, 0) cuts
  it, each next one where a 1 m circle around the previous output point cuts it, taking the
  cut farther along the segment; past the last point the last segment is extended as a line
  (transfuser_utils.py l.763 circle_line_segment_intersection, the circle-line formula of
  mathworld's Circle-LineIntersection);
- always 20 points, so the result has no padding.

Written here from that description (no code of theirs). Two named formulas use it: the route of
the frame's own camera and the route of its augmented twin camera (the frame's
augmentation_translation / augmentation_rotation), so a loader swapping in the twin camera
serves garage's route for that camera without smoothing anything itself.
"""
from __future__ import annotations

from typing import Any

import numpy as np

NUM_ROUTE_POINTS = 20          # config.py num_route_points
FIRST_DISTANCE = 3.5 - 1.0     # config.py dense_route_planner_min_distance - 1.0 (data.py)
STEP = 1.0                     # data.py: "each point to be 1 m away from the last"
_TANGENT_TOL = 1e-9            # transfuser_utils.py circle_line_segment_intersection


def padded(points: Any, n: int = NUM_ROUTE_POINTS) -> np.ndarray:
    """The saved route as garage's loader takes it: (n, 2) float64, a short one padded by
    repeating its last point, a long one cut to its first n (ValueError when not [k, 2])."""
    arr = np.asarray(points, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[1] != 2 or len(arr) == 0:
        raise ValueError(f"has shape {list(arr.shape)}; expected a list of 1 to {n} [x, y] "
                         "points (garage's loader indexes its last point)")
    if not np.isfinite(arr).all():
        raise ValueError("holds NaN or infinite values; expected finite numbers")
    if len(arr) >= n:
        return arr[:n].copy()
    return np.vstack([arr, np.repeat(arr[-1:], n - len(arr), axis=0)])


def augmented(route: np.ndarray, y: float, yaw_deg: float) -> np.ndarray:
    """augment_route: R(yaw).T @ (p - (0, y)) row by row (y in m, yaw in degrees)."""
    a = np.deg2rad(yaw_deg)
    rot = np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
    return (route - np.array([0.0, y])) @ rot


def circle_cuts(center: np.ndarray, radius: float, p: np.ndarray, q: np.ndarray,
          segment: bool) -> list[float]:
    """Where the line p + t (q - p) meets the circle, as parameters t (0..1 on the segment
    when `segment`); a tangent (|discriminant| <= 1e-9, as garage's) counts once."""
    d, f = q - p, p - center
    dd = float(d @ d)
    cross = float(f[0] * d[1] - f[1] * d[0])
    disc = radius * radius * dd - cross * cross      # garage's discriminant, same scale
    if disc < 0:
        return []
    mid, half = -float(f @ d) / dd, np.sqrt(disc) / dd
    ts = [mid] if abs(disc) <= _TANGENT_TOL else [mid - half, mid + half]
    return [t for t in ts if 0.0 <= t <= 1.0] if segment else ts


def smooth_path(route: np.ndarray, n: int = NUM_ROUTE_POINTS) -> np.ndarray:
    """garage's smooth_path of an (k, 2) route: n points, 2.5 m then 1 m apart (float64).
    ValueError where garage's loader has no answer: fewer than 2 distinct points (it raises
    IndexError) or a walk that never ends (its loop would run forever)."""
    route = np.array(route, dtype=np.float64)
    route[0] = 0.0
    _, first = np.unique(route, axis=0, return_index=True)
    route = route[np.sort(first)]
    if len(route) < 2:
        raise ValueError("has no point apart from the vehicle's position; garage's smooth_path "
                         "needs two distinct points (its loader stops with IndexError)")
    out: list[np.ndarray] = []
    center, radius = np.zeros(2), FIRST_DISTANCE
    i, cur, prev = 0, route[0], route[0]
    steps = 8 * (len(route) + n) + 16   # each step advances along the route, adds, or both
    while len(out) < n:
        steps -= 1
        if steps < 0:
            raise ValueError("never yields 20 points: garage's smooth_path would loop forever "
                             "on it")
        if np.linalg.norm(cur - center) < radius:
            i, prev = i + 1, cur
        if i < len(route):
            cur = route[i]
            p, q, segment = prev, cur, True
        else:   # past the end: the last segment, extended
            cur, prev = route[-1], route[-2]
            p, q, segment = prev, cur, False
        ts = circle_cuts(center, radius, p, q, segment)
        if ts:
            center = p + max(ts) * (q - p)   # the cut farther along the segment
            out.append(center)
            radius = STEP
    return np.array(out)


def _route_of(raw: Any, y: float, yaw_deg: float) -> np.ndarray:
    return smooth_path(augmented(padded(raw), y, yaw_deg)).astype(np.float32)


def _number(frame: dict, key: str) -> float:
    value = frame.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not np.isfinite(value):
        raise ValueError(f"needs the frame's {key} as a finite number; found {value!r}")
    return float(value)


def smooth_route(raw: Any, frame: dict) -> np.ndarray:
    """Formula garage_smooth_route: the route garage's loader gives with the frame's own
    camera (no augmentation), (20, 2) float32 in the vehicle frame."""
    return _route_of(raw, 0.0, 0.0)


def smooth_route_augmented(raw: Any, frame: dict) -> np.ndarray:
    """Formula garage_smooth_route_augmented: the route garage's loader gives with the
    frame's augmented twin camera (its augmentation_translation m, augmentation_rotation
    deg), (20, 2) float32."""
    return _route_of(raw, _number(frame, "augmentation_translation"),
                     _number(frame, "augmentation_rotation"))
