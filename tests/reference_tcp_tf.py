"""tests/reference.py, part 1: shared helpers, TCP and TransFuser (CVPR 2021 and 2022).

Sources, frames and the no-carla_wds rule: see tests/reference.py, which re-exports all of this.
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
