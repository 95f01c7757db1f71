"""TCP (OpenDriveLab/TCP@73cc1dd): the `tcp` layout (TCP's own data) and `tcp_roach` (its
Roach-expert supervision). Its label frame, TCP's PID controller (the trainer's offline
controls for every layout) and the brake override its loader applies.
"""
from __future__ import annotations

from .base import ControllerConfig, DatasetInfo, Frame, PIDGains

# TCP's frame: (right, -forward) metres from the vehicle origin. What TCP and TransFuser 2021
# layouts use without naming a frame.
FRAME = "tcp"

# TCP/config.py GlobalConfig's controller values (TCP/model.py control_pid)
CONTROLLER = ControllerConfig(
    turn=PIDGains(0.75, 0.75, 0.3, 40),
    speed=PIDGains(5.0, 0.5, 1.0, 40),
    max_throttle=0.75, brake_speed=0.4, brake_ratio=1.1, clip_delta=0.25, aim_dist=4.0,
    angle_thresh=0.3, dist_thresh=10.0, source="TCP")

# TCP/data.py: "the average value of roach braking action", set where only the rule-based
# detector braked (only_ap_brake); index 0 is the acceleration Beta's (alpha, beta).
BRAKE_OVERRIDE = "tcp_brake_override"
BRAKE_MU, BRAKE_SIGMA = 0.8, 5.5

INFO = DatasetInfo(
    name="tcp", aliases=("roach",), layouts=("tcp", "tcp_roach"),
    frames={FRAME: Frame(((1.0, 0.0), (0.0, -1.0)))},
    transforms={BRAKE_OVERRIDE: {"mu": BRAKE_MU, "sigma": BRAKE_SIGMA}},
    controller=CONTROLLER,
    doc="TCP@73cc1dd: tcp (its data), tcp_roach (Roach supervision)")

__all__ = ["BRAKE_MU", "BRAKE_OVERRIDE", "BRAKE_SIGMA", "CONTROLLER", "FRAME", "INFO"]
