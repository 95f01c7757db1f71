"""LEAD's `route` label and the perturbated twin's moved labels, written from
kesai-labs/lead@44891760 (no code of theirs):

- route (data_loader/carla_dataset.py l.397-418 with training/config_training.py l.702-706:
  smooth_route True, num_route_points_smoothing 20, num_route_points_prediction 10): the metas'
  `route` (the remaining dense route in the ego frame, expert.py l.2859-2882) cut to its first
  20 points, moved by the sample's perturbation (perturbate_route, the twin's move below; 0 for
  the normal cameras), then smooth_path (carla_dataset_utils.py l.1329-1366): exact duplicate
  points dropped keeping their first occurrence in order, then iterative_line_interpolation
  (l.1459-1551): 20 points, the first where a 2.5 m circle around (0, 0) cuts the line from
  (0, 0) to route[0], each next where a 1 m circle around the last output point cuts the full
  line from it to the next route point (one route point per output point); past the route's
  end, the line through its last two points. Of the two cuts, the one with the larger dot
  product with (current route point - previous one) wins. The first 10 are the label.
  Unlike carla_garage's smooth_path, route[0] is not replaced by the origin and the walk moves
  one route point per output point, so the two are different formulas.
- the twin (l.71-93, l.366-392, l.436-483): with the perturbated sensors every target point
  goes through perturbate_target_point, waypoints through perturbate_waypoints, the route as
  above: p' = R(rot)^T (p - (0, translation)), rot in degrees; future yaws through
  perturbate_yaws: normalize_angle(yaw - rot) into [-pi, pi).
"""
from __future__ import annotations

import math

import numpy as np

from ..routes.garage_route import circle_cuts

SMOOTHING_POINTS, PREDICTION_POINTS = 20, 10   # config_training.py l.704-706
FIRST_DISTANCE, STEP = 2.5, 1.0                # carla_dataset.py l.412; utils l.1549


def perturbed(points: np.ndarray, translation: float, rotation_deg: float) -> np.ndarray:
    """perturbate_route / _waypoints / _target_point on (..., 2) points: R(rot)^T (p - (0, y))."""
    a = math.radians(rotation_deg)
    rot = np.array([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]])
    return (np.asarray(points, np.float64) - np.array([0.0, translation])) @ rot


def perturbed_yaws(yaws: np.ndarray, rotation_deg: float) -> np.ndarray:
    """perturbate_yaws: each yaw minus the rotation, wrapped into [-pi, pi)."""
    x = np.mod(np.asarray(yaws, np.float64) - math.radians(rotation_deg), 2 * math.pi)
    return np.where(x > math.pi, x - 2 * math.pi, x)


def _deduplicated(route: np.ndarray) -> np.ndarray:
    _, first = np.unique(route, axis=0, return_index=True)
    return route[np.sort(first)]


def _next_point(center: np.ndarray, radius: float, line: tuple[np.ndarray, np.ndarray],
                direction: np.ndarray) -> np.ndarray:
    """The cut of the circle with the full line farther along `direction` (ValueError: none,
    where LEAD's loader raises 'No intersection found')."""
    p, q = line
    if not np.any(q - p):
        raise ValueError("repeats the point the route walk stands on; LEAD's smooth_path "
                         "divides by zero there")
    cuts = [p + t * (q - p) for t in circle_cuts(center, radius, p, q, segment=False)]
    if not cuts:
        raise ValueError("leaves the walk with no 1 m step along its last segment; LEAD's "
                         "smooth_path raises 'No intersection found'")
    return max(cuts, key=lambda c: float(c @ direction))


def smooth(route: np.ndarray, n: int = SMOOTHING_POINTS) -> np.ndarray:
    """LEAD's smooth_path of a (k, 2) ego-frame route: n points, 2.5 m then 1 m apart."""
    route = _deduplicated(np.asarray(route, np.float64))
    if len(route) < 2:
        raise ValueError(f"has {len(route)} distinct point(s); LEAD's smooth_path needs 2 to "
                         "extend its last segment (it stops with IndexError)")
    out, center, last = [], np.zeros(2), np.zeros(2)
    for k in range(n):
        if k < len(route):
            current = route[k]
            line = (center, current)
        else:                       # past the end: the line through the last two points
            current, last = route[-1], route[-2]
            line = (last, current)
        center = _next_point(center, FIRST_DISTANCE if k == 0 else STEP, line,
                             current - last)
        out.append(center)
        last = current
    return np.array(out)


def route_label(meta_route: object, translation: float = 0.0,
                rotation_deg: float = 0.0) -> np.ndarray:
    """data["route"]: the metas' route, cut, moved, smoothed, its first 10 points (10, 2)."""
    route = np.asarray(meta_route, np.float64)
    if route.ndim != 2 or route.shape[1] != 2 or not np.isfinite(route).all():
        raise ValueError(f"metas route has shape {list(route.shape)} or non-finite values; "
                         "expected finite [x, y] ego-frame points")
    moved = perturbed(route[:SMOOTHING_POINTS], translation, rotation_deg)
    return smooth(moved)[:PREDICTION_POINTS]


__all__ = ["PREDICTION_POINTS", "perturbed", "perturbed_yaws", "route_label", "smooth"]
