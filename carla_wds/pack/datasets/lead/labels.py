"""One LEAD frame's labels from its metas dict, as lead/data_loader/carla_dataset.py
(kesai-labs/lead@44891760) __getitem__ builds them with the planner's config
(config_training.py: waypoints_spacing 5, num_way_points_prediction 8, tp_pop_distance 3.25,
use_noisy_tp False), without the random sensor perturbation (the perturbated twin's labels are
in the record: *_perturbated).

- waypoints (l.366-392): future_positions[i][:2] for i = 5, 10, ..., 40 (the metas hold the
  20 Hz future in CARLA's vehicle frame, expert_data.py l.1209-1222).
- target point (l.418-483): next_target_points_3.25 / next_commands_3.25 with consecutive
  duplicate points merged (unless there are exactly 2), then point [1] (point [2] is
  target_point_next, [0] target_point_previous; with 2 points next = [1]), each turned into
  the ego frame by R(theta)^T (p - pos_global) (common_utils.py inverse_conversion_2d).
- command (l.485-495): carla_dataset_utils.command_to_one_hot(next_commands[0]): a negative
  command is 4 (LANEFOLLOW), then index command - 1, any index outside 0..5 is 3.
- route (l.397-418): the smoothed route's first 10 points (route.py), in the record.
- perturbation (carla_dataset_utils.py perturbate_waypoints / perturbate_target_point):
  p' = R(rot_deg)^T (p - (0, translation)), carla_garage's augmentation formula: the record
  holds the metas' perturbation_translation / _rotation as augmentation_translation /
  _rotation, so CARLAWebData(twin_p=p) serves the rgb_perturbated twin with its waypoints and
  target point moved (load/adapters/garage.py) as LEAD's loader does with
  use_sensor_perburtation. What that adapter does not move (it knows carla_garage's labels
  only) is packed moved, as `<name>_augmented` record fields the loader swaps in for the twin
  (MeasField.twin_of): target_point_next, target_point_previous, future_yaws and route.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ....extras import MEASUREMENTS, Extra
from ....modalities.measurements import MeasField
from ....datasets.lead import FRAME
from ...labels import non_finite_label
from .pickles import number
from .route import PREDICTION_POINTS, perturbed, perturbed_yaws, route_label

SPACING, PRED_LEN, TP_POP = 5, 8, 3.25
TP_KEY, CMD_KEY = f"next_target_points_{TP_POP}", f"next_commands_{TP_POP}"
HAZARDS = ("vehicle_hazard", "light_hazard", "walker_hazard", "stop_sign_hazard")


def command_index(command: int) -> int:
    """carla_dataset_utils.command_to_one_hot's index of a CARLA command."""
    command = 4 if command < 0 else command
    command -= 1
    return command if command in (0, 1, 2, 3, 4, 5) else 3


def merged_targets(points: list, commands: list) -> tuple[list, list]:
    """The target points and commands with consecutive duplicates merged (l.450-461)."""
    kept_p: list = []
    kept_c: list = []
    for p, c in zip(points, commands):
        if len(points) == 2 or not kept_p or not np.allclose(p[:2], kept_p[-1][:2]):
            kept_p.append(p)
            kept_c.append(c)
    return kept_p, kept_c


def to_ego(point: Any, pos: np.ndarray, theta: float) -> np.ndarray:
    c, s = math.cos(theta), math.sin(theta)
    rot = np.array([[c, -s], [s, c]])
    return rot.T @ (np.asarray(point, np.float64)[:2] - pos)


def frame_values(meta: dict, episode: str, frame: int) -> tuple[dict, dict]:
    """(core labels, measurements record values) of one frame; ValueError naming what in
    its metas is missing or wrong."""
    future = np.asarray(meta.get("future_positions", []), np.float64)
    need = SPACING * PRED_LEN
    if future.ndim != 2 or len(future) <= need:
        raise ValueError(f"metas future_positions holds {len(future)} positions; the "
                         f"waypoints need {need + 1} (index {need}); expected a frame at least "
                         f"{PRED_LEN} frames before the route's end")
    waypoints = future[SPACING:need + 1:SPACING, :2]
    points, commands = meta.get(TP_KEY), meta.get(CMD_KEY)
    if not isinstance(points, list) or not isinstance(commands, list):
        raise ValueError(f"metas lacks {TP_KEY!r} / {CMD_KEY!r} lists")
    points, commands = merged_targets(points, commands)
    if len(points) < 2 or len(commands) < 2:
        raise ValueError(f"metas {TP_KEY} has {len(points)} distinct point(s); LEAD's "
                         "loader needs at least 2")
    pos, theta = np.asarray(meta["pos_global"][:2], np.float64), number(meta, "theta")
    tp, tp_next = to_ego(points[1], pos, theta), to_ego(points[min(2, len(points) - 1)],
                                                        pos, theta)
    onehot = np.zeros(6, np.float32)
    onehot[command_index(int(commands[0]))] = 1.0
    labels = {"waypoints": waypoints, "target_point": tp, "speed": number(meta, "speed"),
              "waypoints_diff": np.diff(np.concatenate([np.zeros((1, 2)), waypoints]), axis=0)}
    bad = non_finite_label(labels)
    if bad:
        raise ValueError(f"label {bad} is not finite (from metas); expected finite metres")
    trans, rot = number(meta, "perturbation_translation"), number(meta, "perturbation_rotation")
    yaws = np.asarray(meta.get("future_yaws", []), np.float64)
    yaws = yaws[SPACING:need + 1:SPACING] if len(yaws) > need else np.zeros(PRED_LEN)
    tp_previous = to_ego(points[0], pos, theta)
    record = {"speed": labels["speed"], "theta": theta, "steer": number(meta, "steer"),
              "throttle": number(meta, "throttle"), "brake": bool(meta["brake"]),
              "target_speed": number(meta, "target_speed"),
              "command": int(commands[0]), "next_command": int(commands[1]),
              "target_point_next": tp_next, "target_point_previous": tp_previous,
              "future_yaws": yaws, "route": _route(meta, 0.0, 0.0),
              # the metas' perturbation_*, under the names the camera-twin load adapter reads
              "augmentation_translation": trans, "augmentation_rotation": rot,
              "waypoints_perturbated": perturbed(waypoints, trans, rot),
              "target_point_perturbated": perturbed(tp, trans, rot),
              # the twin's values of what that adapter leaves alone (swapped in by twin_of)
              "target_point_next_augmented": perturbed(tp_next, trans, rot),
              "target_point_previous_augmented": perturbed(tp_previous, trans, rot),
              "future_yaws_augmented": perturbed_yaws(yaws, rot),
              "route_augmented": _route(meta, trans, rot),
              **{h: bool(meta.get(h, False)) for h in HAZARDS}}
    out = {**{k: np.asarray(v, np.float32) for k, v in labels.items() if k != "speed"},
           "target_command": onehot, "speed": labels["speed"],
           "meta": {"episode": episode, "frame": frame, "command": int(commands[0])}}
    return out, record


def _route(meta: dict, translation: float, rotation_deg: float) -> np.ndarray:
    if "route" not in meta:
        raise ValueError("metas lacks 'route'; LEAD's loader reads it for the route label "
                         "(expected the expert's dense route, expert.py l.3005)")
    return route_label(meta["route"], translation, rotation_deg)


def record_fields() -> tuple[MeasField, ...]:
    v = {"units": "m", "frame": FRAME}
    return (MeasField("speed", units="m/s"), MeasField("theta", units="rad"),
            MeasField("steer"), MeasField("throttle"), MeasField("brake", "bool"),
            MeasField("target_speed", units="m/s"),
            MeasField("command", "int32"), MeasField("next_command", "int32"),
            MeasField("target_point_next", shape=(2,), **v),
            MeasField("target_point_previous", shape=(2,), **v),
            MeasField("future_yaws", shape=(PRED_LEN,), units="rad", frame=FRAME),
            MeasField("augmentation_translation", units="m"),
            MeasField("augmentation_rotation", units="deg"),
            MeasField("waypoints_perturbated", shape=(PRED_LEN, 2), **v),
            MeasField("target_point_perturbated", shape=(2,), **v),
            MeasField("route", shape=(PREDICTION_POINTS, 2), **v),
            MeasField("target_point_next_augmented", shape=(2,), twin_of="target_point_next",
                      **v),
            MeasField("target_point_previous_augmented", shape=(2,),
                      twin_of="target_point_previous", **v),
            MeasField("future_yaws_augmented", shape=(PRED_LEN,), units="rad", frame=FRAME,
                      twin_of="future_yaws"),
            MeasField("route_augmented", shape=(PREDICTION_POINTS, 2), twin_of="route", **v),
            *(MeasField(h, "bool") for h in HAZARDS))


def record_extra() -> Extra:
    return Extra(MEASUREMENTS, f"{MEASUREMENTS}.npy", "record", "measurements", "record", (),
                 fields=record_fields())


__all__ = ["CMD_KEY", "PRED_LEN", "SPACING", "TP_KEY", "command_index", "frame_values",
           "merged_targets", "record_extra", "record_fields"]
