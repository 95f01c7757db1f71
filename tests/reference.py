"""Independent float64 references of each CARLA dataset project's own label formulas.

Each function is a transcription of the named project's code (plain numpy, float64), fed the
decoded JSON dicts as they are on disk. Nothing here imports carla_wds: the packer's tests
compare its stored labels against these, so a mistake in the packer cannot hide in both.

Sources (snapshots read with `git show <commit>:<path>`; default branches unless named):
- OpenDriveLab/TCP@main 73cc1dd: tools/gen_data.py, TCP/data.py, leaderboard/team_code/
  roach_ap_agent.py (save: theta = compass), planner.py (GNSS mean/scale)
- autonomousvision/transfuser@2022 22b3ccd (default branch): team_code_transfuser/data.py,
  utils.py, config.py, model.py; team_code_autopilot/autopilot.py, data_agent.py
- autonomousvision/transfuser@cvpr2021 9a90951: transfuser/data.py, train.py
- autonomousvision/carla_garage@main 1448bed: team_code/data.py, transfuser_utils.py, config.py,
  autopilot.py, docs/coordinate_systems.md
- Thinklab-SJTU/Bench2DriveZoo@uniad/vad 10a2e5d: mmcv/datasets/prepare_B2D.py (left2right)

Ego frames (2D, metres; see docs/coordinates.md, and `convert` below):
- "tcp":            x = right, y = backward (forward is -y), origin at the vehicle (GNSS at 0,0,0).
                    TCP's waypoints and target_point, TF-2021's, and TF-2022's target_point.
- "transfuser2022": x = forward, y = right, origin 1.3 m ahead of the vehicle origin
                    (the "virtual LiDAR"). TF-2022's ego_waypoint.
- "garage":         x = forward, y = right (CARLA's left-handed vehicle frame), origin at the
                    vehicle. carla_garage's ego_waypoints, target_point, aim_wp, route.
- "b2d":            x = forward, y = left (right-handed, nuScenes/Bench2Drive ego), origin at the
                    vehicle (prepare_B2D.py: world2ego = left2right @ world2ego @ left2right,
                    left2right = diag(1, -1, 1, 1)). For reference only.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

# --------------------------------------------------------------------------------------------
# shared helpers
# --------------------------------------------------------------------------------------------


def rot2(angle: float) -> np.ndarray:
    """[[cos a, -sin a], [sin a, cos a]] in float64 (the matrix every one of these projects writes)."""
    c, s = math.cos(angle), math.sin(angle)
    return np.array([[c, -s], [s, c]], dtype=np.float64)


def carla_matrix(x: float, y: float, z: float, yaw_deg: float, pitch_deg: float = 0.0,
                 roll_deg: float = 0.0) -> list[list[float]]:
    """carla.Transform.get_matrix() (LibCarla geom/Transform.h GetMatrix; angles in degrees),
    as a plain nested list like the `ego_matrix` fields the agents json-dump. For building tests."""
    cy, sy = math.cos(math.radians(yaw_deg)), math.sin(math.radians(yaw_deg))
    cr, sr = math.cos(math.radians(roll_deg)), math.sin(math.radians(roll_deg))
    cp, sp = math.cos(math.radians(pitch_deg)), math.sin(math.radians(pitch_deg))
    return [[cp * cy, cy * sp * sr - sy * cr, -(cy * sp * cr + sy * sr), x],
            [cp * sy, sy * sp * sr + cy * cr, cy * sr - sy * sp * cr, y],
            [sp, -cp * sr, cp * cr, z],
            [0.0, 0.0, 0.0, 1.0]]


# --------------------------------------------------------------------------------------------
# TCP
# --------------------------------------------------------------------------------------------

TCP_FUTURE_FRAMES = 4   # tools/gen_data.py FUTURE_FRAMES
TCP_INPUT_FRAMES = 1    # tools/gen_data.py INPUT_FRAMES


def tcp_labels(meas: list[dict], t: int, pred_len: int = TCP_FUTURE_FRAMES) -> dict:
    """TCP's waypoints (pred_len, 2), target_point (2,) and target_command one-hot (6,) for frame t.

    Checked against OpenDriveLab/TCP@main 73cc1dd.
    OpenDriveLab/TCP@main:tools/gen_data.py:gen_single_route stores the positions swapped:
      input_x = meas['y'], input_y = meas['x'], future_x/y likewise for t+1..t+4,
      x_target <- meas['y_target'], y_target <- meas['x_target'].
    OpenDriveLab/TCP@main:TCP/data.py:CARLA_Data.__getitem__ then swaps them back:
      theta = input_theta, set to 0 where np.isnan;  R = rot(pi/2 + theta);
      waypoint i = R.T @ [future_y[i] - ego_y, future_x[i] - ego_x]
      target_point = target_point_aim = R.T @ [y_command - ego_y, x_command - ego_x]
      (an earlier `target_point` with -1*(x_command - ego_x) is computed and overwritten);
      command < 0 -> 4 (LANEFOLLOW), then command - 1 is the one-hot index (asserted in 0..5).
    Net effect, in the measurement fields: waypoint i = R.T @ (p[t+i] - p[t]) with p = (x, y),
    target = R.T @ ((x_target, y_target) - p[t]). This is transcribed literally (swap included).
    p = (x, y) is the scaled GNSS (latitude, longitude) ~ (north, east) = (-y_world, x_world)
    (planner.py: scale 111324.6/111319.5, mean 0) and theta the IMU compass (0 = north, +pi/2 =
    east, so CARLA yaw = theta - pi/2); R.T then gives (right, backward): the "tcp" frame.
    Only the current theta is NaN-fixed (future thetas are not used).

    TCP calls np.isnan(theta), which raises on a JSON null; so does this (ValueError).
    """
    m = meas[t]
    # gen_data.py: the swap
    input_x, input_y = float(m["y"]), float(m["x"])
    future_x = [float(meas[t + i]["y"]) for i in range(1, pred_len + 1)]
    future_y = [float(meas[t + i]["x"]) for i in range(1, pred_len + 1)]
    x_command, y_command = float(m["y_target"]), float(m["x_target"])
    theta = m["theta"]
    if theta is None:
        raise ValueError("theta is null: TCP's np.isnan(theta) cannot read it")
    theta = float(theta)
    # data.py
    if np.isnan(theta):
        theta = 0.0
    ego_x, ego_y = input_x, input_y
    R = rot2(np.pi / 2 + theta)
    waypoints = np.array([R.T @ np.array([future_y[i] - ego_y, future_x[i] - ego_x])
                          for i in range(pred_len)], dtype=np.float64).reshape(pred_len, 2)
    target_point = R.T @ np.array([y_command - ego_y, x_command - ego_x])
    command = int(m["target_command"])
    if command < 0:
        command = 4
    command -= 1
    if command not in (0, 1, 2, 3, 4, 5):
        raise ValueError(f"target_command {m['target_command']} fails TCP's assert")
    onehot = np.zeros(6, dtype=np.float64)
    onehot[command] = 1.0
    return {"waypoints": waypoints, "target_point": target_point, "target_command": onehot,
            "speed": float(m["speed"]), "theta": theta}


def tcp_brake_override(action_mu, action_sigma, only_ap_brake):
    """The (mu, sigma) TCP/data.py returns after its "only the rule-based detector braked" override.

    OpenDriveLab/TCP@main 73cc1dd:TCP/data.py:CARLA_Data.__getitem__:
      current:  if only_ap_brake:        action_mu[0] = 0.8; action_sigma[0] = 5.5
      future:   for i: if future_only_ap_brake[i]: future_action_mu[i][0] = 0.8; ...sigma = 5.5
    ("the average value of roach braking action"). Index 0 is the acceleration Beta's (alpha, beta).
    TCP writes into its cached arrays in place (idempotent); this returns float64 copies.

    only_ap_brake a bool: one step, (mu (2,), sigma (2,)). A sequence of bools: per future step,
    (list of mu, list of sigma).
    """
    if isinstance(only_ap_brake, (bool, np.bool_)):
        mu = np.array(action_mu, dtype=np.float64).copy()
        sigma = np.array(action_sigma, dtype=np.float64).copy()
        if only_ap_brake:
            mu[0] = 0.8
            sigma[0] = 5.5
        return mu, sigma
    mus, sigmas = [], []
    for mu_i, sigma_i, flag in zip(action_mu, action_sigma, only_ap_brake, strict=True):
        mu_i, sigma_i = tcp_brake_override(mu_i, sigma_i, bool(flag))
        mus.append(mu_i)
        sigmas.append(sigma_i)
    return mus, sigmas


# --------------------------------------------------------------------------------------------
# TransFuser (CVPR 2021 and 2022)
# --------------------------------------------------------------------------------------------

TF2022_LIDAR_POS = (1.3, 0.0, 2.5)   # team_code_transfuser/config.py lidar_pos; utils.py
TF2022_PRED_LEN = 4                  # config.py pred_len
TF2022_SEQ_LEN = 1                   # config.py seq_len


def _tf2022_ego_entries(frames: Sequence, t: int, pred_len: int) -> list:
    """get_waypoints(labels[t:t+pred_len+1], pred_len+1)'s list for the ego id, as 4x4 arrays.

    label_raw frames (lists of dicts): the ego is entry 0 of frame t (`ego_id = labels[0][0]['id']`);
    each later frame contributes every entry with that id, in order, and the list is padded with
    the identity (flag False) up to pred_len + 1. Measurement dicts: their own `ego_matrix`.
    """
    window = frames[t:t + pred_len + 1]
    if len(window) != pred_len + 1:
        raise IndexError(f"frame {t} needs {pred_len} future frames")
    if isinstance(window[0], dict):
        return [np.array(f["ego_matrix"], dtype=np.float64) for f in window]
    ego_id = window[0][0]["id"]
    entries = [np.array(window[0][0]["ego_matrix"], dtype=np.float64)]
    for frame in window[1:]:
        entries += [np.array(e["ego_matrix"], dtype=np.float64) for e in frame if e["id"] == ego_id]
    while len(entries) < pred_len + 1:
        entries.append(np.eye(4))
    return entries


def transfuser2022_waypoints(label_raw_or_meas: Sequence, t: int, pred_len: int = TF2022_PRED_LEN,
                             aug_deg: float = 0.0, meas: Sequence[dict] | None = None) -> dict:
    """TF-2022's `ego_waypoint` (pred_len, 2) and `target_point` (2,) for frame t (seq_len = 1).

    Checked against autonomousvision/transfuser@2022 22b3ccd.
    autonomousvision/transfuser@2022:team_code_transfuser/data.py:CARLA_Data.__getitem__,
    get_waypoints, transform_waypoints; utils.py:get_vehicle_to_virtual_lidar_transform:
      the loader reads `ego_matrix` (carla.Transform.get_matrix() of the vehicle, world frame,
      team_code_autopilot/data_agent.py:get_bev_cars) from label_raw/NNNN.json for frames
      t..t+pred_len (entry 0 = ego, matched by id; data.py loads seq_len + pred_len label files);
      T = inv(virtual_lidar_to_vehicle) = translation (-1.3, 0, -2.5);
      ego_waypoint[i-1] = (T @ inv(M_t) @ M_{t+i})[:2, 3], i = 1..pred_len
        = (R_t^T (p_{t+i} - p_t))[:2] - (1.3, 0): CARLA axes (x forward, y right), full 3x3
        rotation, origin 1.3 m ahead of the vehicle;
      augmentation (rad = deg2rad(aug_deg), aug_max_rotation 20, applied with probability 0.9):
        ego_waypoint = ([[cos rad, sin rad], [-sin rad, cos rad]] @ ego_waypoint.T).T.
    target_point, from measurements/NNNN.json (x, y = scaled GNSS, theta = compass):
      ego_theta = theta + rad;  R = rot(pi/2 + ego_theta);
      target_point = R.T @ [x_command - x, y_command - y]   -> the TCP frame (x right, y back),
      NOT the ego_waypoint frame, and NOT shifted by the 1.3 m (only draw_target_point adds 1.3
      to its y for target_point_image); model.py forward_gru flips target_point[:, 1], which
      gives (right, forward), still not ego_waypoint's (forward - 1.3, right).
    No NaN fix on theta here (team_code_autopilot/autopilot.py tick already wrote 0 for a NaN
    compass).

    label_raw_or_meas: label_raw frames (lists of dicts) or measurement dicts (both carry the
    ego's `ego_matrix`). target_point needs measurement dicts: `meas`, or the frames themselves
    when they are measurement dicts; otherwise it is None.
    """
    entries = _tf2022_ego_entries(label_raw_or_meas, t, pred_len)
    T = np.linalg.inv(np.array([[1.0, 0.0, 0.0, TF2022_LIDAR_POS[0]],
                                [0.0, 1.0, 0.0, TF2022_LIDAR_POS[1]],
                                [0.0, 0.0, 1.0, TF2022_LIDAR_POS[2]],
                                [0.0, 0.0, 0.0, 1.0]]))
    inv0 = np.linalg.inv(entries[0])
    wps = np.array([(T @ inv0 @ m)[:2, 3] for m in entries[1:]], dtype=np.float64)
    rad = np.deg2rad(aug_deg)
    degree_matrix = np.array([[np.cos(rad), np.sin(rad)], [-np.sin(rad), np.cos(rad)]])
    ego_waypoint = (degree_matrix @ wps.T).T

    if meas is None and isinstance(label_raw_or_meas[t], dict) and "x_command" in label_raw_or_meas[t]:
        meas = label_raw_or_meas
    target_point = None
    if meas is not None:
        m = meas[t]
        ego_theta = float(m["theta"]) + rad
        R = rot2(np.pi / 2 + ego_theta)
        target_point = R.T @ np.array([float(m["x_command"]) - float(m["x"]),
                                       float(m["y_command"]) - float(m["y"])])
    return {"ego_waypoint": ego_waypoint, "target_point": target_point}


def transfuser2021_waypoints(meas: list[dict], t: int, pred_len: int = 4) -> dict:
    """TF-2021's waypoints[seq_len:] (pred_len, 2) and target_point for frame t (seq_len = 1).

    Checked against autonomousvision/transfuser@cvpr2021 9a90951.
    autonomousvision/transfuser@cvpr2021:transfuser/data.py:CARLA_Data.__getitem__,
    transform_2d_points: waypoint = transform_2d_points(origin, pi/2 - theta_i, -x_i, -y_i,
    pi/2 - theta_t, -x_t, -y_t), theta 0 where NaN (input frames in __getitem__, future frames
    in __init__ while preloading; a NaN left in would make 0 * nan = nan); train.py uses
    waypoints[seq_len:]. Algebraically -rot(pi/2 - theta) = rot(pi/2 + theta).T, i.e. TCP's frame;
    target_point = rot(pi/2 + theta).T @ [x_command - x, y_command - y].
    """
    def to_world(r, tx, ty):
        c, s = np.cos(r), np.sin(r)
        return np.array([[c, s, tx], [-s, c, ty], [0.0, 0.0, 1.0]])

    theta_t = float(meas[t]["theta"])
    theta_t = 0.0 if np.isnan(theta_t) else theta_t
    x_t, y_t = float(meas[t]["x"]), float(meas[t]["y"])
    world_to_r2 = np.linalg.inv(to_world(np.pi / 2 - theta_t, -x_t, -y_t))
    wps = []
    for i in range(1, pred_len + 1):
        m = meas[t + i]
        theta_i = float(m["theta"])
        theta_i = 0.0 if np.isnan(theta_i) else theta_i   # data.py __init__ fixes future NaNs
        world = to_world(np.pi / 2 - theta_i, -float(m["x"]), -float(m["y"])) @ np.array([0.0, 0.0, 1.0])
        wps.append((world_to_r2 @ world)[:2])
    R = rot2(np.pi / 2 + theta_t)
    tp = R.T @ np.array([float(meas[t]["x_command"]) - x_t, float(meas[t]["y_command"]) - y_t])
    return {"waypoints": np.array(wps, dtype=np.float64), "target_point": tp}


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


# --------------------------------------------------------------------------------------------
# which frames are samples
# --------------------------------------------------------------------------------------------

NATIVE_RATE_HZ = {"tcp": 2.0, "transfuser2021": 2.0, "transfuser2022": 2.0, "garage": 4.0}


def sample_frames(n_frames: int, project: str, rate_hz: float | None = None, *,
                  pred_len: int | None = None, seq_len: int = 1, train_sampling_rate: int = 1) -> list[int]:
    """The (current-)frame indices a project's loader serves from one route with frames 0..n-1.

    n_frames is what each loader counts: TCP len(measurements/), TF-2021 len(rgb_front/),
    TF-2022 and garage len(lidar/).
    - "tcp" (OpenDriveLab/TCP@main:tools/gen_data.py:gen_single_route): none if
      n < INPUT_FRAMES + FUTURE_FRAMES = 5, else i in range(INPUT_FRAMES - 1, n - FUTURE_FRAMES)
      = [0, n - 4).
    - "transfuser2021" (transfuser@cvpr2021:transfuser/data.py:__init__):
      num_seq = (n - pred_len - 2) // seq_len; frame seq*seq_len + 1 for seq in range(num_seq)
      (pred_len 4: [1, n - 5]).
    - "transfuser2022" (transfuser@2022:team_code_transfuser/data.py:__init__, "ignore the first
      two and last two frame"): seq in range(2, n - pred_len - seq_len - 2) = [2, n - 7).
    - "garage" (carla_garage@main:team_code/data.py:__init__, config.py): with
      data_save_freq = 20 / rate_hz (5 at the released 4 Hz): skip_first = int(2.5*20)//5 = 10,
      pred_len = int(2.0*20)//5 = 8; seq in range(skip_first, n - pred_len - seq_len) with
      seq % train_sampling_rate == 0 = [10, n - 9). Route-level filters are not modelled here:
      routes without results.json.gz or with scores.score_composed < 100 give nothing, and
      Repetition >= num_repetitions (3) folders are skipped (config.py).
    rate_hz: only garage's counts depend on it; for the others it must be None or 2.
    """
    if project not in NATIVE_RATE_HZ:
        raise ValueError(f"unknown project {project!r}; one of {sorted(NATIVE_RATE_HZ)}")
    if project != "garage" and rate_hz not in (None, 2, 2.0):
        raise ValueError(f"{project} is 2 Hz data; its sample rule has no rate")
    if project == "tcp":
        future = TCP_FUTURE_FRAMES if pred_len is None else pred_len
        if n_frames < TCP_INPUT_FRAMES + future:
            return []
        return list(range(TCP_INPUT_FRAMES - 1, n_frames - future))
    if project == "transfuser2021":
        pred = 4 if pred_len is None else pred_len
        num_seq = (n_frames - pred - 2) // seq_len
        return [seq * seq_len + 1 for seq in range(max(num_seq, 0))]
    if project == "transfuser2022":
        pred = TF2022_PRED_LEN if pred_len is None else pred_len
        return list(range(2, n_frames - pred - seq_len - 2))
    rate = NATIVE_RATE_HZ["garage"] if rate_hz is None else float(rate_hz)
    save_freq = GARAGE_CARLA_FPS / rate
    if abs(save_freq - round(save_freq)) > 1e-9:
        raise ValueError(f"garage saves every data_save_freq-th 20 Hz tick; {rate_hz} Hz is not 20/int")
    save_freq = int(round(save_freq))
    skip_first = int(2.5 * GARAGE_CARLA_FPS) // save_freq
    pred = int(2.0 * GARAGE_CARLA_FPS) // save_freq if pred_len is None else pred_len
    return [seq for seq in range(skip_first, n_frames - pred - seq_len) if seq % train_sampling_rate == 0]


# --------------------------------------------------------------------------------------------
# conversions between the ego frames (docs/coordinates.md)
# --------------------------------------------------------------------------------------------

FRAMES = ("tcp", "transfuser2022", "garage", "b2d")
_ALIASES = {"carla": "garage", "transfuser2021": "tcp", "transfuser2022_target_point": "tcp",
            "nuscenes": "b2d", "bench2drive": "b2d"}


def _frame(name: str) -> str:
    name = _ALIASES.get(name, name)
    if name not in FRAMES:
        raise ValueError(f"unknown frame {name!r}; one of {FRAMES} or {sorted(_ALIASES)}")
    return name


def _to_garage(p: np.ndarray, src: str) -> np.ndarray:
    x, y = p[..., 0], p[..., 1]
    if src == "garage":
        f, r = x, y
    elif src == "tcp":               # tcp (x, y) = (right, -forward)
        f, r = -y, x
    elif src == "transfuser2022":    # (forward - 1.3, right)
        f, r = x + TF2022_LIDAR_POS[0], y
    else:                            # b2d (forward, left)
        f, r = x, -y
    return np.stack([f, r], axis=-1)


def _from_garage(p: np.ndarray, dst: str) -> np.ndarray:
    f, r = p[..., 0], p[..., 1]
    if dst == "garage":
        x, y = f, r
    elif dst == "tcp":
        x, y = r, -f
    elif dst == "transfuser2022":
        x, y = f - TF2022_LIDAR_POS[0], r
    else:
        x, y = f, -r
    return np.stack([x, y], axis=-1)


def convert(points, src: str, dst: str) -> np.ndarray:
    """2D points (..., 2) from one ego frame to another, both at the same instant and vehicle.

    garage (f, r): x forward, y right          -> the hub
    tcp      = (r, -f)                         (TCP, TF-2021, TF-2022 target_point)
    transfuser2022 = (f - 1.3, r)              (TF-2022 ego_waypoint; origin at the virtual LiDAR)
    b2d      = (f, -r)                         (right-handed, x forward, y left)
    Aliases: carla -> garage; transfuser2021, transfuser2022_target_point -> tcp; nuscenes,
    bench2drive -> b2d.
    """
    p = np.asarray(points, dtype=np.float64)
    if p.shape[-1] != 2:
        raise ValueError(f"points must be (..., 2), got {p.shape}")
    return _from_garage(_to_garage(p, _frame(src)), _frame(dst))


# A left curve, 3 waypoints 3 m apart ahead of the car, in the garage frame (y = -x^2 / 30;
# left is y < 0 there). docs/coordinates.md and tools/plot_frames.py draw these;
# tests/test_reference.py pins the numbers in every frame.
EXAMPLE_GARAGE = np.array([[3.0, -0.3], [6.0, -1.2], [9.0, -2.7]], dtype=np.float64)


def example_points(frame: str) -> np.ndarray:
    """EXAMPLE_GARAGE expressed in `frame`."""
    return convert(EXAMPLE_GARAGE, "garage", frame)
