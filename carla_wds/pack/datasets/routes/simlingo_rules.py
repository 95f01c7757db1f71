"""SimLingo's rules over carla_garage's leaderboard_2 data (the `garage_lb2_simlingo` layout):
its route filter and its route labels, written here from RenzKa/simlingo@eb2b89a
simlingo_training/dataloader/dataset_base.py (no code of theirs).

- Route filter (l.229-262): a route without results.json.gz is left out; one whose
  scores.score_composed < 100 is kept only when scores.score_route > 94 ("we allow 6% of the
  route score to be missing") and num_infractions equals the number of its
  infractions.min_speed_infractions plus infractions.outside_route_lanes (the leaderboard's
  RouteRecord keys, leaderboard/utils/statistics_manager.py PENALTY_NAME_DICT): the only
  infractions are driving too slowly or outside the route's lanes.
- Routes (load_route l.416-439, equal_spacing_route l.539-551): `route` is the saved
  route_original padded to num_route_points = 20 by its last point (or cut to its first 20),
  `route_adjusted` the saved route as it is (SimLingo saves up to 40 points); each moved by
  the sample's camera augmentation (augment_route l.677-684: R(yaw).T (p - (0, y))) and
  resampled by equal_spacing_route: (0, 0) put in front, the polyline's cumulative length
  (plus 1e-4 per point, "prevents dists not being strictly increasing") interpolated at
  0, 1, ..., 19 m, np.interp holding the last point past the end.
- Target points (dataset_driving.py l.75-78): target_point and target_point_next both go
  through augment_target_point (dataset_base.py l.686-694), R(yaw).T (p - (0, y)), the same
  move as the routes' (the twin's target_point_next is a formula here because the camera-twin
  load adapter moves carla_garage's labels only, and garage's loader never reads it).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .garage_route import augmented, padded

SCORE_ROUTE_MIN = 94.0          # dataset_base.py: score_route > 94.0
MINOR_INFRACTIONS = ("min_speed_infractions", "outside_route_lanes")
N_POINTS = 20                   # x = np.arange(0, 20, 1)


def _count(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float, list)):
        raise ValueError(f"{what} is {str(value)[:40]!r}; expected "
                         + ("a list of infractions" if what.startswith("infractions")
                            else "a number"))
    return len(value) if isinstance(value, list) else value


def keeps_minor_infractions(results: Any) -> bool:
    """Route rule simlingo_minor_infractions: SimLingo keeps this imperfect route (see the
    module docstring); ValueError naming the key the results file lacks."""
    try:
        scores, infractions = results["scores"], results["infractions"]
        score_route = scores["score_route"]
        total = _count(results["num_infractions"], "num_infractions")
        minor = sum(_count(infractions[k], f"infractions.{k}") for k in MINOR_INFRACTIONS)
    except (KeyError, TypeError) as exc:
        raise ValueError(f"no {exc.args[0] if exc.args else 'key'}; expected the "
                         "leaderboard's scores.score_route, num_infractions and "
                         f"infractions.{{{','.join(MINOR_INFRACTIONS)}}}") from None
    if isinstance(score_route, bool) or not isinstance(score_route, (int, float)):
        raise ValueError(f"scores.score_route is {str(score_route)[:40]!r}; expected a number")
    return bool(score_route > SCORE_ROUTE_MIN and total == minor)


def equal_spacing(points: np.ndarray) -> np.ndarray:
    """equal_spacing_route: (20, 2) points 1 m apart along (0, 0) + points (float64)."""
    route = np.concatenate([np.zeros((1, 2)), np.asarray(points, np.float64)])
    steps = np.linalg.norm(np.diff(route, axis=0), axis=1)
    dists = np.concatenate([[0.0], np.cumsum(steps)]) + np.arange(len(route)) * 1e-4
    x = np.arange(0, N_POINTS, 1)
    return np.stack([np.interp(x, dists, route[:, 0]), np.interp(x, dists, route[:, 1])], 1)


def _points(raw: Any) -> np.ndarray:
    arr = np.asarray(raw, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[1] != 2 or len(arr) == 0 or not np.isfinite(arr).all():
        raise ValueError(f"has shape {list(arr.shape)} or non-finite values; expected a list "
                         "of finite [x, y] points (SimLingo's loader indexes its last point)")
    return arr


def _aug(frame: dict) -> tuple[float, float]:
    out = []
    for key in ("augmentation_translation", "augmentation_rotation"):
        value = frame.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not np.isfinite(value):
            raise ValueError(f"needs the frame's {key} as a finite number; found {value!r}")
        out.append(float(value))
    return out[0], out[1]


def route(raw: Any, frame: dict) -> np.ndarray:
    """Formula simlingo_route (from route_original): SimLingo's `route` with the frame's own
    camera, (20, 2)."""
    return equal_spacing(padded(_points(raw), N_POINTS))


def route_augmented(raw: Any, frame: dict) -> np.ndarray:
    """Formula simlingo_route_augmented: SimLingo's `route` with the augmented twin camera."""
    return equal_spacing(augmented(padded(_points(raw), N_POINTS), *_aug(frame)))


def route_adjusted(raw: Any, frame: dict) -> np.ndarray:
    """Formula simlingo_route_adjusted (from route): SimLingo's `route_adjusted_org`."""
    return equal_spacing(_points(raw))


def route_adjusted_augmented(raw: Any, frame: dict) -> np.ndarray:
    """Formula simlingo_route_adjusted_augmented: SimLingo's `route_adjusted` with the twin."""
    return equal_spacing(augmented(_points(raw), *_aug(frame)))


def points_augmented(raw: Any, frame: dict) -> np.ndarray:
    """Formula simlingo_points_augmented: saved [x, y] points (route_original as saved) moved
    with the twin camera, as many as saved (augment_route before load_route pads or cuts)."""
    return augmented(_points(raw), *_aug(frame))


def point_augmented(raw: Any, frame: dict) -> np.ndarray:
    """Formula simlingo_point_augmented: a saved [x, y] point (target_point_next) as SimLingo
    serves it with the twin camera, (2,)."""
    point = np.asarray(raw, dtype=np.float64)
    if point.shape != (2,) or not np.isfinite(point).all():
        raise ValueError(f"has shape {list(point.shape)} or non-finite values; expected a "
                         "finite [x, y] point")
    return augmented(point[None], *_aug(frame))[0]
