"""tests/reference.py, part 2: carla_garage (TransFuser++).

Sources, frames and the no-carla_wds rule: see tests/reference.py, which re-exports all of this.
"""
from __future__ import annotations

import numpy as np

from .reference_tcp_tf import rot2

# --------------------------------------------------------------------------------------------
# carla_garage (TransFuser++)
# --------------------------------------------------------------------------------------------

GARAGE_CARLA_FPS = 20                   # team_code/config.py carla_fps
GARAGE_DATA_SAVE_FREQ = 5               # config.py data_save_freq ("Released dataset was collected with 5")
GARAGE_NUM_ROUTE_POINTS = 20            # config.py num_route_points
GARAGE_DENSE_ROUTE_MIN_DISTANCE = 3.5   # config.py dense_route_planner_min_distance


def _garage_aug_rotation(yaw_aug_deg: float) -> np.ndarray:
    return rot2(np.deg2rad(yaw_aug_deg))


def garage_augment_target_point(tp, y_aug: float = 0.0, yaw_aug_deg: float = 0.0) -> np.ndarray:
    """autonomousvision/carla_garage@main 1448bed:team_code/data.py:CARLA_Data.augment_target_point:
    tp' = rot(deg2rad(yaw_aug_deg)).T @ (tp - (0, y_aug)). yaw is in DEGREES (the measurement's
    `augmentation_rotation`, U[-5, 5]); y_aug in metres (`augmentation_translation`, U[-1, 1]).
    A +y (right) camera shift moves points left (-y); a +yaw (right) turn rotates them to the left.
    Used for target_point and aim_wp. Returns (2,)."""
    R = _garage_aug_rotation(yaw_aug_deg)
    pos = np.expand_dims(np.asarray(tp, dtype=np.float64), axis=1)
    return np.squeeze(R.T @ (pos - np.array([[0.0], [y_aug]])))


def garage_augment_route(route, y_aug: float = 0.0, yaw_aug_deg: float = 0.0) -> np.ndarray:
    """autonomousvision/carla_garage@main 1448bed:team_code/data.py:CARLA_Data.augment_route:
    route' = (rot(deg2rad(yaw)).T @ (route - [[0, y_aug]]).T).T, row by row the same map as
    augment_target_point. Returns (N, 2)."""
    R = _garage_aug_rotation(yaw_aug_deg)
    route = np.asarray(route, dtype=np.float64)
    return (R.T @ (route - np.array([[0.0, y_aug]])).T).T


def garage_waypoints(meas: list[dict], t: int, pred_len: int = 8, y_aug: float = 0.0,
                     yaw_aug_deg: float = 0.0) -> np.ndarray:
    """carla_garage's `ego_waypoints` (pred_len, 2) for frame t (emitted only with use_wp_gru,
    default False; wp_dilation = 1, seq_len = 1).

    autonomousvision/carla_garage@main 1448bed:team_code/data.py:CARLA_Data.get_waypoints
    (called with loaded_measurements[seq_len - 1:], the current and the pred_len future ones):
      O = ego_matrix_t[:3]; wp_i = (O[:, :3].T @ (ego_matrix_{t+i}[:3, 3] - O[:, 3]))[:2],
      i = 1..pred_len (full 3x3 rotation: pitch and roll count);
      then wp_i' = rot(deg2rad(yaw_aug_deg)).T @ (wp_i - (0, y_aug)).
    CARLA vehicle frame: x forward, y right, origin at the vehicle; pred_len = int(2.0*20)//5 = 8.
    Unlike TF-2022 there is no virtual-LiDAR shift (config.py lidar_pos = [0, 0, 2.5], and
    docs/coordinate_systems.md: everything in the ego vehicle's CARLA frame).
    """
    origin = np.array(meas[t]["ego_matrix"], dtype=np.float64)[:3]
    origin_translation = origin[:, 3:4]
    origin_rotation = origin[:, :3]
    waypoints = []
    for i in range(1, pred_len + 1):
        waypoint = np.array(meas[t + i]["ego_matrix"], dtype=np.float64)[:3, 3:4]
        waypoints.append((origin_rotation.T @ (waypoint - origin_translation))[:2, 0])
    return np.array([garage_augment_target_point(w, y_aug, yaw_aug_deg) for w in waypoints],
                    dtype=np.float64).reshape(pred_len, 2)


def _circle_line_segment_intersection(circle_center, circle_radius, pt1, pt2, full_line=True,
                                      tangent_tol=1e-9):
    """carla_garage@main 1448bed:team_code/transfuser_utils.py:circle_line_segment_intersection, verbatim
    in arithmetic (intersection order, segment filter and tangent rule included)."""
    (p1x, p1y), (p2x, p2y), (cx, cy) = pt1, pt2, circle_center
    (x1, y1), (x2, y2) = (p1x - cx, p1y - cy), (p2x - cx, p2y - cy)
    dx, dy = (x2 - x1), (y2 - y1)
    dr = (dx**2 + dy**2)**.5
    big_d = x1 * y2 - x2 * y1
    discriminant = circle_radius**2 * dr**2 - big_d**2
    if discriminant < 0:
        return []
    intersections = [(cx + (big_d * dy + sign * (-1 if dy < 0 else 1) * dx * discriminant**.5) / dr**2,
                      cy + (-big_d * dx + sign * abs(dy) * discriminant**.5) / dr**2)
                     for sign in ((1, -1) if dy < 0 else (-1, 1))]
    if not full_line:
        fraction = [(xi - p1x) / dx if abs(dx) > abs(dy) else (yi - p1y) / dy for xi, yi in intersections]
        intersections = [pt for pt, frac in zip(intersections, fraction) if 0 <= frac <= 1]
    if len(intersections) == 2 and abs(discriminant) <= tangent_tol:
        return [intersections[0]]
    return intersections


def _garage_iterative_line_interpolation(route: np.ndarray, num_route_points: int,
                                         min_distance_first: float, max_steps: int = 100_000) -> np.ndarray:
    """carla_garage@main 1448bed:team_code/data.py:CARLA_Data.iterative_line_interpolation.

    Walks the polyline from (0, 0): the first point where a circle of radius
    dense_route_planner_min_distance - 1 = 2.5 m around the origin cuts the route, then each next
    point 1 m (straight-line) from the previous one; past the last route point it extends the
    last segment as a full line. Always returns exactly num_route_points points.
    garage has no step limit (a route whose extension misses the circle loops forever); here
    max_steps raises RuntimeError instead.
    """
    points = []
    min_distance = min_distance_first
    last_interpolated_point = np.array([0.0, 0.0])
    current_route_index = 0
    current_point = route[current_route_index]
    last_point = route[current_route_index]
    for _ in range(max_steps):
        if len(points) >= num_route_points:
            return np.array(points)
        dist = np.linalg.norm(current_point - last_interpolated_point)
        if dist < min_distance:
            current_route_index += 1
            last_point = current_point
        if current_route_index < route.shape[0]:
            current_point = route[current_route_index]
            intersection = _circle_line_segment_intersection(last_interpolated_point, min_distance,
                                                             last_point, current_point, full_line=False)
        else:
            current_point = route[-1]
            last_point = route[-2]
            intersection = _circle_line_segment_intersection(last_interpolated_point, min_distance,
                                                             last_point, current_point, full_line=True)
        if len(intersection) > 1:
            point_1, point_2 = np.array(intersection[0]), np.array(intersection[1])
            direction = current_point - last_point
            intersection_point = point_1 if np.dot(point_1, direction) > np.dot(point_2, direction) else point_2
            add_point = True
        elif len(intersection) == 1:
            intersection_point = np.array(intersection[0])
            add_point = True
        else:
            add_point = False
        if add_point:
            last_interpolated_point = intersection_point
            points.append(intersection_point)
            min_distance = 1.0
    raise RuntimeError("garage's route interpolation does not terminate on this route")


def garage_route(route_points, y_aug: float = 0.0, yaw_aug_deg: float = 0.0,
                 num_route_points: int = GARAGE_NUM_ROUTE_POINTS, smooth_route: bool = True,
                 dense_route_planner_min_distance: float = GARAGE_DENSE_ROUTE_MIN_DISTANCE) -> np.ndarray:
    """carla_garage's `route` (num_route_points, 2) ("checkpoints" target) from measurement['route'].

    autonomousvision/carla_garage@main 1448bed:team_code/data.py:CARLA_Data.__getitem__ (use_plant_labels
    False), augment_route, smooth_path, iterative_line_interpolation:
      1. fewer than 20 points: pad by repeating the last one; else keep the first 20;
      2. augment_route (y shift, yaw in degrees);
      3. smooth_route (default True) -> smooth_path: route[0] = (0, 0); exact-duplicate rows
         removed keeping first occurrences in order (np.unique(axis=0, return_index)); then
         iterative_line_interpolation: first point 2.5 m from (0, 0) on the polyline, then one
         every 1 m, extrapolating the last segment, so always exactly 20 points.
         No spline, despite the config comment. smooth_route False: step 2's result is returned.
    An empty route raises (garage indexes route[-1]); one that dedupes to a single point raises
    IndexError (garage indexes route[-2]).
    """
    route = route_points
    if len(route) < num_route_points:
        num_missing = num_route_points - len(route)
        route = np.array(route, dtype=np.float64)
        route = np.vstack((route, np.tile(route[-1], (num_missing, 1))))
    else:
        route = np.array(route[:num_route_points], dtype=np.float64)
    route = garage_augment_route(route, y_aug, yaw_aug_deg)
    if not smooth_route:
        return route
    route = route.copy()
    route[0, 0] = 0.0
    route[0, 1] = 0.0
    _, indices = np.unique(route, return_index=True, axis=0)
    route = route[np.sort(indices)]
    return _garage_iterative_line_interpolation(route, num_route_points, dense_route_planner_min_distance - 1.0)


def garage_command_one_hot(command: int) -> np.ndarray:
    """carla_garage@main 1448bed:team_code/transfuser_utils.py:command_to_one_hot: < 0 -> 4, minus 1,
    and anything outside 0..5 becomes 3 (LANEFOLLOW), unlike TCP, which asserts.

    The loader reads `command` / `next_command` as saved. The one-step lag is the collector's:
    team_code/autopilot.py run_step appends far_command to a deque(maxlen=2) only when the
    target point changes, and save() writes self.commands[-2], i.e. the command of the previous
    target point (4 = LANEFOLLOW until two targets have been seen). Nothing to redo here."""
    command = int(command)
    if command < 0:
        command = 4
    command -= 1
    if command not in (0, 1, 2, 3, 4, 5):
        command = 3
    out = np.zeros(6, dtype=np.float64)
    out[command] = 1.0
    return out
