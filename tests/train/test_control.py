"""TCP's PID controller, batched: hand-computed cases, each layout's frame, and TCP's own loop
(transcribed below from OpenDriveLab/TCP@73cc1dd TCP/model.py) on random predictions."""
from __future__ import annotations

from collections import deque

import numpy as np
import pytest
import torch

from carla_wds.datasets.tcp import CONTROLLER as TCP_CONTROLLER
from carla_wds.train.control import (
    control_pid,
    controls_in_frames,
    expert_controls,
    has_expert_controls,
)
from carla_wds.train.frames import straight_ahead, to_right_forward
from tests import reference

TURN_GAIN = 0.75 + 0.75 / 40 + 0.3    # a fresh TCP PIDController: K_P + K_I / n + K_D
SPEED_GAIN = 5.0 + 0.5 / 40 + 1.0


def run(wp_rf, speed, target_rf, dt=0.5) -> list[float]:
    out = control_pid(torch.tensor([wp_rf], dtype=torch.float64), torch.tensor([speed]),
                      torch.tensor([target_rf], dtype=torch.float64), dt)
    return out[0].tolist()


def test_straight_ahead_below_the_desired_speed_accelerates():
    # segments of 2 m at 2 Hz: desired speed (2+2+2) * 2 / 3 = 4 m/s; speed 3.9: delta 0.1
    steer, throttle, brake = run([(0, 2), (0, 4), (0, 6), (0, 8)], 3.9, (0, 20))
    assert steer == 0.0 and brake == 0.0
    assert throttle == pytest.approx(SPEED_GAIN * 0.1)          # 0.60125
    # far below: delta clipped to 0.25, throttle to 0.75
    assert run([(0, 2), (0, 4), (0, 6), (0, 8)], 1.0, (0, 20))[1] == pytest.approx(0.75)


def test_a_right_turn_steers_right_and_too_fast_brakes():
    # aim = the first waypoint (3, 3): 45 deg right -> angle 0.5; desired 2 * sqrt(18) m/s
    wp = [(3, 3), (6, 6), (9, 9), (12, 12)]
    steer, throttle, brake = run(wp, 10.0, (10, 10))
    assert steer == pytest.approx(TURN_GAIN * 0.5)               # 0.534375
    assert 10.0 / (2 * 18 ** 0.5) > 1.1 and brake == 1.0 and throttle == 0.0
    # a target point straight ahead has the smaller angle, so it is aimed at instead
    assert run(wp, 10.0, (0, 30))[0] == 0.0
    # a left turn mirrors it
    assert run([(-x, f) for x, f in wp], 10.0, (-10, 10))[0] == pytest.approx(-TURN_GAIN * 0.5)


def test_the_target_point_overrides_an_outlier_prediction_only_when_near():
    straight = [(0, 2), (0, 4), (0, 6), (0, 8)]
    # 45 deg off the last segment (> 0.3) and 5 m ahead (< 10 m): aim at the target
    assert run(straight, 4.0, (5, 5))[0] == pytest.approx(TURN_GAIN * 0.5)
    # 22.6 deg (0.251 < 0.3): keep the prediction
    assert run(straight, 4.0, (5, 12))[0] == 0.0
    # 28.1 deg (0.312 > 0.3) but 15 m ahead (>= 10 m): keep the prediction
    assert run(straight, 4.0, (8, 15))[0] == 0.0


def test_standing_still_brakes():
    steer, throttle, brake = run([(0, 0.05), (0, 0.1), (0, 0.15), (0, 0.2)], 0.0, (0, 20))
    assert brake == 1.0 and throttle == 0.0   # desired 0.1 m/s < brake_speed 0.4


def test_the_aim_point_is_the_waypoint_whose_pair_midpoint_is_nearest_aim_dist():
    # pair midpoints 1.25, 3.09, 5.55 and 7.5 m away: the 2nd is nearest 4 m, so wp[1] (45 deg
    # right, angle 0.5) is aimed at; the target (45 deg right too, 20 m ahead) does not override.
    wp = [(0, 0.5), (1.5, 1.5), (0, 4.5), (0, 6.5), (0, 8.5)]
    steer = run(wp, 4.0, (20, 20))[0]
    assert steer == pytest.approx(TURN_GAIN * 0.5)


@pytest.mark.parametrize("frame,dt", [("tcp", 0.5), ("garage", 0.25), ("transfuser2022", 0.5),
                                      ("b2d", 0.5)])
def test_each_layout_frame_gives_the_same_controls(frame, dt):
    wp_rf = torch.tensor([[(3.0, 3.0), (6.0, 6.0), (9.0, 9.0), (12.0, 12.0)]], dtype=torch.float64)
    tp_rf = torch.tensor([[10.0, 10.0]], dtype=torch.float64)
    speed = torch.tensor([7.0])
    want = control_pid(wp_rf, speed, tp_rf, dt)
    # reference.convert: garage (f, r) -> frame, written independently in tests/reference.py
    wp = torch.from_numpy(reference.convert(wp_rf.numpy()[..., ::-1], "garage", frame))
    tp = torch.from_numpy(reference.convert(tp_rf.numpy()[..., ::-1], "garage", "tcp"))
    got = controls_in_frames(wp, speed, tp, dt, (frame, "tcp"))
    assert torch.allclose(got, want)
    assert torch.allclose(to_right_forward(wp, frame).double(), wp_rf)


def test_the_rate_sets_the_desired_speed():
    # the same 1 m steps are 2 m/s at 2 Hz and 4 m/s at 4 Hz; at 3 m/s one brakes, one speeds up
    wp = [(0, 1), (0, 2), (0, 3), (0, 4)]
    assert run(wp, 3.0, (0, 20), dt=0.5)[2] == 1.0
    assert run(wp, 3.0, (0, 20), dt=0.25)[1:] == [pytest.approx(0.75), 0.0]


def test_the_straight_line_prior_keeps_the_current_speed():
    speed = torch.tensor([5.0, 8.0])
    for frame, dt in (("tcp", 0.5), ("garage", 0.25)):
        ctl = controls_in_frames(straight_ahead(speed, 4, dt, frame), speed,
                                 straight_ahead(speed, 1, 4.0, frame)[:, 0], dt, (frame, frame))
        assert ctl[:, 0].abs().max() < 1e-9 and ctl[:, 1:].abs().max() == 0.0


class TCPPIDController:
    def __init__(self, K_P=1.0, K_I=0.0, K_D=0.0, n=20):
        self._K_P, self._K_I, self._K_D = K_P, K_I, K_D
        self._window = deque([0 for _ in range(n)], maxlen=n)

    def step(self, error):
        self._window.append(error)
        integral = np.mean(self._window)
        derivative = self._window[-1] - self._window[-2]
        return self._K_P * error + self._K_I * integral + self._K_D * derivative


def tcp_control_pid(waypoints, velocity, target):
    """TCP/model.py control_pid for one sample, with fresh controllers; tcp frame in."""
    c = TCP_CONTROLLER
    turn = TCPPIDController(c.turn.kp, c.turn.ki, c.turn.kd, c.turn.n)
    speed_ctl = TCPPIDController(c.speed.kp, c.speed.ki, c.speed.kd, c.speed.n)
    waypoints, target = waypoints.copy(), target.copy()
    waypoints[:, 1] *= -1
    target[1] *= -1
    num_pairs = len(waypoints) - 1
    best_norm, desired_speed, aim = 1e5, 0, waypoints[0]
    for i in range(num_pairs):
        desired_speed += np.linalg.norm(waypoints[i + 1] - waypoints[i]) * 2.0 / num_pairs
        norm = np.linalg.norm((waypoints[i + 1] + waypoints[i]) / 2.0)
        if abs(c.aim_dist - best_norm) > abs(c.aim_dist - norm):
            aim, best_norm = waypoints[i], norm
    aim_last = waypoints[-1] - waypoints[-2]
    angle = np.degrees(np.pi / 2 - np.arctan2(aim[1], aim[0])) / 90
    angle_last = np.degrees(np.pi / 2 - np.arctan2(aim_last[1], aim_last[0])) / 90
    angle_target = np.degrees(np.pi / 2 - np.arctan2(target[1], target[0])) / 90
    use_target_to_aim = np.abs(angle_target) < np.abs(angle)
    use_target_to_aim = use_target_to_aim or (np.abs(angle_target - angle_last) > c.angle_thresh
                                              and target[1] < c.dist_thresh)
    angle_final = angle_target if use_target_to_aim else angle
    steer = np.clip(turn.step(angle_final), -1.0, 1.0)
    brake = desired_speed < c.brake_speed or (velocity / desired_speed) > c.brake_ratio
    delta = np.clip(desired_speed - velocity, 0.0, c.clip_delta)
    throttle = np.clip(speed_ctl.step(delta), 0.0, c.max_throttle)
    throttle = throttle if not brake else 0.0
    return steer, throttle, float(brake)


def test_batched_controller_equals_tcps_loop_on_random_predictions():
    rng = np.random.default_rng(0)
    n = 200
    heading = rng.normal(0, 0.6, (n, 1))
    step_len = rng.uniform(0.0, 4.0, (n, 1)) * rng.uniform(0.7, 1.3, (n, 4))
    turn = heading + np.cumsum(rng.normal(0, 0.2, (n, 4)), axis=1)
    rf = np.cumsum(np.stack([step_len * np.sin(turn), step_len * np.cos(turn)], -1), axis=1)
    wp_tcp = np.stack([rf[..., 0], -rf[..., 1]], -1)
    target = np.stack([rng.uniform(-15, 15, n), -rng.uniform(-2, 40, n)], -1)
    speed = rng.uniform(0, 10, n)
    got = controls_in_frames(torch.from_numpy(wp_tcp), torch.from_numpy(speed),
                             torch.from_numpy(target), 0.5, ("tcp", "tcp")).numpy()
    want = np.array([tcp_control_pid(wp_tcp[i], speed[i], target[i]) for i in range(n)])
    np.testing.assert_allclose(got, want, atol=1e-9)
    assert 0.1 < want[:, 2].mean() < 0.9 and (np.abs(want[:, 0]) > 0.05).mean() > 0.3


def test_expert_controls_from_named_fields_or_tcps_action():
    named = {"steer": torch.tensor([0.1, -0.2]), "throttle": torch.tensor([0.5, 0.0]),
             "brake": torch.tensor([False, True]), "speed": torch.tensor([3.0, 0.0])}
    assert torch.allclose(expert_controls(named), torch.tensor(
        [[0.1, 0.5, 0.0], [-0.2, 0.0, 1.0]], dtype=torch.float64))
    # roach's action is (throttle, steer, brake)
    action = {"action": torch.tensor([[0.6, 0.3, 0.0], [0.0, -0.1, 0.8]])}
    assert torch.allclose(expert_controls(action), torch.tensor(
        [[0.3, 0.6, 0.0], [-0.1, 0.0, 0.8]], dtype=torch.float64))
    assert expert_controls({"speed": torch.zeros(2)}) is None and expert_controls(None) is None
    assert has_expert_controls(["steer", "throttle", "brake", "x"]) and has_expert_controls(
        ["action"]) and not has_expert_controls(["steer", "speed"])
