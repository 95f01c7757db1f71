"""TCP's PID controller (OpenDriveLab/TCP@73cc1dd TCP/model.py `control_pid`, gains from
TCP/config.py): predicted waypoints -> steer, throttle, brake, batched for offline metrics.

Offline, every val sample is an independent frame (shuffled, split across ranks), so each is
controlled by a fresh controller: TCP's `PIDController` starts with a window of n zeros, so its
first `step(e)` returns K_P*e + K_I*e/n + K_D*e (the window's mean is e/n, the derivative e-0).
Closed loop, the window would carry over from the previous frame; that is the one departure.
The expert's controls, where the data has them, give steer/throttle/brake MAE next to ADE/FDE.
"""
from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor

# the controller's values are a dataset's convention, registered with it (TCP's:
# carla_wds.datasets DEFAULT_CONTROLLER); ControllerConfig and PIDGains live there too
from ..datasets import DEFAULT_CONTROLLER, ControllerConfig, PIDGains
from .frames import to_right_forward

CONTROLS: tuple[str, ...] = ("steer", "throttle", "brake")


def controller_source() -> str:
    """The project whose controller the trainer uses (its registry entry's `source`), for the
    log line reporting it."""
    return DEFAULT_CONTROLLER.source or "the default"


def _angle(v: Tensor) -> Tensor:
    """TCP's heading of a (right, forward) vector: degrees(pi/2 - atan2(f, r)) / 90, so
    straight ahead is 0 and right is positive (CARLA steers right for positive values)."""
    return torch.rad2deg(torch.pi / 2 - torch.atan2(v[..., 1], v[..., 0])) / 90


def control_pid(waypoints: Tensor, speed: Tensor, target: Tensor, dt: float,
                cfg: ControllerConfig = DEFAULT_CONTROLLER) -> Tensor:
    """(B, T>=2, 2) waypoints and (B, 2) target point, both (right, forward) metres from the
    vehicle origin, (B,) speed m/s -> (B, 3) steer, throttle, brake (brake 0 or 1).

    TCP hard-codes `* 2.0`, its 2 Hz frame rate; here it is 1 / dt, so 4 Hz data works too."""
    wp, target = waypoints.double(), target.double()
    speed = speed.reshape(-1).double()
    if wp.dim() != 3 or wp.shape[1] < 2:
        raise ValueError(f"control_pid needs (B, T>=2, 2) waypoints, got {tuple(wp.shape)}")
    steps = wp[:, 1:] - wp[:, :-1]
    desired = steps.norm(dim=-1).sum(dim=1) / dt / steps.shape[1]
    # aim: the first waypoint of the pair whose midpoint lies nearest aim_dist (the first such
    # pair on ties, as TCP's strict comparison keeps)
    mid_norm = ((wp[:, 1:] + wp[:, :-1]) / 2).norm(dim=-1)
    pick = (cfg.aim_dist - mid_norm).abs().argmin(dim=1)
    aim = wp[torch.arange(wp.shape[0], device=wp.device), pick]
    angle, angle_last, angle_target = _angle(aim), _angle(steps[:, -1]), _angle(target)
    # the target point stands in for outlier predictions (TCP: "reduces noise in eg. straight
    # roads, helps with sudden turn commands")
    use_target = (angle_target.abs() < angle.abs()) | (
        ((angle_target - angle_last).abs() > cfg.angle_thresh) & (target[:, 1] < cfg.dist_thresh))
    steer = cfg.turn.first_step(torch.where(use_target, angle_target, angle)).clamp(-1.0, 1.0)
    brake = (desired < cfg.brake_speed) | (speed / desired > cfg.brake_ratio)
    delta = (desired - speed).clamp(0.0, cfg.clip_delta)
    throttle = cfg.speed.first_step(delta).clamp(0.0, cfg.max_throttle)
    throttle = torch.where(brake, torch.zeros_like(throttle), throttle)
    return torch.stack([steer, throttle, brake.double()], dim=1)


def controls_in_frames(waypoints: Tensor, speed: Tensor, target: Tensor, dt: float,
                       frames: tuple[str, str]) -> Tensor:
    """control_pid on labels in the layout's frames: (waypoints frame, target point frame)."""
    return control_pid(to_right_forward(waypoints, frames[0]), speed,
                       to_right_forward(target, frames[1]), dt)


def expert_controls(measurements: Mapping[str, Tensor] | None) -> Tensor | None:
    """(B, 3) steer, throttle, brake of the expert from a batch's measurements: the named
    fields (TransFuser 2022, garage) or TCP's roach `action` (throttle, steer, brake); None
    when the record has neither."""
    if not measurements:
        return None
    if all(name in measurements for name in CONTROLS):
        return torch.stack([measurements[n].reshape(-1).double() for n in CONTROLS], dim=1)
    if "action" in measurements:
        action = measurements["action"].double()
        return action[:, [1, 0, 2]]
    return None


def has_expert_controls(field_names: list[str] | tuple[str, ...]) -> bool:
    """Whether a measurements record with these fields carries the expert's controls."""
    return set(CONTROLS) <= set(field_names) or "action" in field_names


__all__ = ["CONTROLS", "ControllerConfig", "DEFAULT_CONTROLLER", "PIDGains", "control_pid",
           "controller_source", "controls_in_frames", "expert_controls", "has_expert_controls"]
