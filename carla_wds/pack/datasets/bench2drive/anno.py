"""Bench2Drive's `anno/NNNNN.json.gz`: one frame's ego state, calibration and boxes, read into
the sample's labels, measurements record and box table.

Formulas, each from the project's own code (see docs/coordinates.md):
- waypoints and target point, Bench2DriveZoo@tcp/admlp TCP/data.py: theta' = theta - pi/2
  (theta is CARLA's compass, NaN -> 0 for the current frame), R = [[cos, sin], [-sin, cos]]
  of theta', local = R @ (p - p_ego): (forward, right) in CARLA's left-handed vehicle frame;
  the target point is (x_target, y_target), the command `next_command` (VOID -> LANEFOLLOW).
- right-handed (`handedness="right"`), Bench2DriveZoo@uniad/vad prepare_B2D.py: y -> -y for
  points, yaw -> -yaw for boxes, cam2ego and lidar2ego through modalities.calibration.
Data quirks met in the real files and handled here, each counted by the caller: a NaN theta,
`speed: null` (then |p[t+1] - p[t-1]| / 2dt, as the ego actually moved), and the ego's class
written `vehicle` (anno.md) instead of `ego_vehicle` (data_collect.py): the ego is then
bounding_boxes[0], which data_collect.py always writes first.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ....datasets.bench2drive import RIG_ROWS as B2D_RIG
from ....modalities.calibration import to_right_handed_cam2ego, to_right_handed_lidar2ego
from ....extras import MeasField
from ....schema import SchemaError
from ...labels import F32_MAX, command_index, command_onehot, finite_f32, non_finite_label

B2D_CLASSES = {"vehicle": "car", "walker": "walker", "traffic_light": "traffic_light",
               "traffic_sign": "traffic_sign"}
# prepare_B2D.py keeps boxes within 75 m; data_collect.py saves up to 100 m
DEFAULT_BOX_RADIUS = 75.0
# Think2Drive's discrete actions (throttle, steer, brake) by action index: get_action in
# Bench2DriveZoo@uniad/vad 10a2e5d mmcv/datasets/prepare_B2D.py (and tools/gen_tcp_data.py of
# @tcp/admlp 31278ff), whose throttle/steer/brake VAD and the TCP port train on
_STEERS7 = (-0.5, -0.3, -0.2, -0.1, 0.0, 0.1, 0.2, 0.3, 0.5)
ACTIONS: tuple[tuple[float, float, float], ...] = (
    ((0.0, 0.0, 1.0),) + tuple((0.7, s, 0.0) for s in _STEERS7)
    + tuple((0.3, s, 0.0) for s in (-0.7, *_STEERS7, 0.7))
    + tuple((0.0, s, 0.0) for s in (-1.0, -0.6, -0.3, -0.1)) + ((1.0, 0.0, 0.0),)
    + tuple((0.0, s, 0.0) for s in (0.1, 0.3, 0.6, 1.0))
    + tuple((0.5, s, 0.0) for s in _STEERS7))   # 30..38 reverse, which the label drops


def record_fields(expert: bool, pred_len: int = 4) -> tuple[MeasField, ...]:
    """The measurements record of a bench2drive sample (frames: see the manifest's spec);
    `pred_len`: how many future expert actions it carries (future_expert)."""
    n = len(B2D_RIG)
    out = [MeasField("speed", units="m/s"), MeasField("theta", units="rad"),
           MeasField("acceleration", shape=(3,), units="m/s^2", frame="b2d_ego"),
           MeasField("angular_velocity", shape=(3,), units="rad/s", frame="b2d_ego"),
           MeasField("throttle"), MeasField("steer"), MeasField("brake"),
           MeasField("reverse", "bool"), MeasField("should_brake", "bool"),
           MeasField("only_ap_brake", "bool"),
           MeasField("command_near", "int32"), MeasField("command_far", "int32"),
           MeasField("next_command", "int32"),
           MeasField("target_near", shape=(2,), units="m", frame="b2d_ego"),
           MeasField("target_far", shape=(2,), units="m", frame="b2d_ego"),
           MeasField("intrinsics", shape=(n, 3, 3), units="px"),
           MeasField("cam2ego", shape=(n, 4, 4), units="m", frame="b2d_ego"),
           MeasField("lidar2ego", shape=(4, 4), units="m", frame="b2d_ego")]
    if expert:   # the feature itself is its own member (expert_feature.npy): its length
        # is the file's (the TCP port regresses 1536 values), not fixed here
        out += [MeasField("expert_value"), MeasField("expert_action", "int32"),
                MeasField("action_throttle"), MeasField("action_steer"),
                MeasField("action_brake"),
                # the TCP port's future_action_index (its future_feature is the member
                # future_expert_feature.npy, (pred_len, feature length))
                MeasField("future_expert_action", "int32", shape=(pred_len,))]
    return tuple(out)


def number(anno: dict, key: str, *, allow_none: bool = False, allow_nan: bool = False
           ) -> float | None:
    """anno[key] as a float within float32's range (labels are stored as float32); None only
    where allowed (speed), NaN only where allowed (the compass); ValueError naming the key."""
    value = anno.get(key)
    if value is None and allow_none and key in anno:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"anno key {key!r} is {value!r}; expected a number")
    try:
        value = float(value)
    except OverflowError:   # a JSON integer of hundreds of digits
        value = math.inf
    if math.isnan(value) and allow_nan:
        return value
    if not math.isfinite(value) or abs(value) > F32_MAX:
        raise ValueError(f"anno key {key!r} is {value!r}; expected a finite number within "
                         f"float32 range (|v| <= {F32_MAX:.3g}): metres, m/s, rad")
    return value


def command(anno: dict, key: str) -> int:
    """anno[key] as a CARLA RoadOption (-1 VOID or 1..6); ValueError naming the key."""
    value = number(anno, key)
    try:
        if value != int(value):
            raise ValueError(value)
        command_index(int(value))
    except ValueError:
        raise ValueError(f"anno key {key!r} is {value!r}; expected a CARLA RoadOption: -1 "
                         "(VOID) or 1..6") from None
    return int(value)


def compass(anno: dict) -> tuple[float, bool]:
    """(theta, was NaN): Bench2Drive's TCP port sets a NaN compass to 0."""
    theta = number(anno, "theta", allow_nan=True)
    if math.isnan(theta):
        return 0.0, True
    return theta, False


def to_local(theta: float, origin: tuple[float, float], points: np.ndarray) -> np.ndarray:
    """Bench2DriveZoo TCP/data.py: R(theta - pi/2) @ (p - origin), float64, (forward, right)."""
    a = theta - math.pi / 2
    rot = np.array([[math.cos(a), math.sin(a)], [-math.sin(a), math.cos(a)]])
    return (np.asarray(points, np.float64).reshape(-1, 2) - np.asarray(origin)) @ rot.T


def _right(points: np.ndarray, handedness: str) -> np.ndarray:
    if handedness == "right":
        points = np.array(points, np.float64, copy=True)
        points[..., 1] *= -1
    return points


def frame_labels(annos: list[dict], theta: float, speed: float, handedness: str
                 ) -> dict[str, Any]:
    """Core labels of annos[0]'s frame; annos[1:] are its future waypoint frames."""
    now = annos[0]
    origin = (number(now, "x"), number(now, "y"))
    future = np.array([[number(a, "x"), number(a, "y")] for a in annos[1:]])
    waypoints = _right(to_local(theta, origin, future), handedness)
    target = _right(to_local(theta, origin, [[number(now, "x_target"),
                                              number(now, "y_target")]])[0], handedness)
    labels = {"waypoints": waypoints,
              "waypoints_diff": np.diff(np.concatenate([np.zeros((1, 2)), waypoints]), axis=0),
              "target_point": target, "speed": speed}
    bad = non_finite_label(labels)
    if bad:   # each value within float32, yet too far apart for it
        raise ValueError(f"label {bad} is not finite in float32 (computed from this frame's "
                         "and its future frames' anno); expected coordinates in metres")
    onehot = command_onehot(command(now, "next_command"))
    return {**{k: v.astype(np.float32) for k, v in labels.items() if k != "speed"},
            "target_command": onehot.astype(np.float32), "speed": speed}


def floats(value: Any, what: str) -> np.ndarray:
    """A JSON value as a float64 array of numbers each finite in float32 (labels are stored
    as float32); ValueError naming `what` for anything else (a dict, a string or null in it)."""
    arr = None
    if isinstance(value, (list, int, float)) and not isinstance(value, bool):
        try:
            arr = np.asarray(value, np.float64)   # null -> NaN, refused just below
        except (TypeError, ValueError, OverflowError):
            pass
    if arr is None or not finite_f32(arr):
        raise ValueError(f"anno {what} is {str(value)[:60]}; expected numbers finite in float32")
    return arr


def _matrix(value: Any, shape: tuple[int, int], what: str) -> np.ndarray:
    arr = floats(value, f"sensors {what}") if isinstance(value, list) else None
    if arr is None or arr.shape != shape:
        raise ValueError(f"anno sensors {what} is not a finite {shape[0]}x{shape[1]} matrix")
    return arr


def calibration(anno: dict, handedness: str) -> dict[str, np.ndarray]:
    """Per camera (rig order) intrinsic and cam2ego, and lidar2ego, from anno['sensors']."""
    sensors = anno.get("sensors")
    if not isinstance(sensors, dict):
        raise ValueError("anno has no 'sensors' object; expected Bench2Drive's calibration")
    ks, c2e = [], []
    for _, sid, *_ in B2D_RIG:
        cam = sensors.get(sid)
        if not isinstance(cam, dict):
            raise ValueError(f"anno sensors has no {sid}; expected the six CAM_* entries")
        ks.append(_matrix(cam.get("intrinsic"), (3, 3), f"{sid}.intrinsic"))
        m = _matrix(cam.get("cam2ego"), (4, 4), f"{sid}.cam2ego")
        c2e.append(to_right_handed_cam2ego(m) if handedness == "right" else m)
    lidar = _matrix((sensors.get("LIDAR_TOP") or {}).get("lidar2ego"), (4, 4),
                    "LIDAR_TOP.lidar2ego")
    if handedness == "right":
        lidar = to_right_handed_lidar2ego(lidar)
    return {"intrinsics": np.stack(ks), "cam2ego": np.stack(c2e), "lidar2ego": lidar}


def record_values(anno: dict, theta: float, speed: float, handedness: str,
                  expert: np.ndarray | None) -> dict[str, Any]:
    """The measurements record's values of one frame (see record_fields)."""
    origin = (number(anno, "x"), number(anno, "y"))
    near, far = (_right(to_local(theta, origin, [[number(anno, f"x_command_{w}"),
                                                  number(anno, f"y_command_{w}")]])[0],
                        handedness) for w in ("near", "far"))
    vec = {k: floats(anno.get(k), f"key {k!r}") for k in ("acceleration", "angular_velocity")}
    for k, v in vec.items():
        if v.shape != (3,):
            raise ValueError(f"anno key {k!r} is {anno.get(k)!r}; expected 3 numbers")
    if handedness == "right":   # prepare_B2D.py: accel y and every rotation rate flip
        vec["acceleration"][1] *= -1
        vec["angular_velocity"] *= -1
    out = {"speed": speed, "theta": theta, **vec,
           **{k: number(anno, k) for k in ("throttle", "steer", "brake")},
           **{k: bool(anno.get(k, False)) for k in ("reverse", "should_brake", "only_ap_brake")},
           **{k: command(anno, k) for k in ("command_near", "command_far", "next_command")},
           "target_near": near, "target_far": far, **calibration(anno, handedness)}
    if expert is not None:
        out.update(expert_values(expert))
    return out


def expert_values(expert: np.ndarray, feature_len: int | None = None) -> dict[str, Any]:
    """feature (any length >= 1; `feature_len` if given: a future file's must be frame t's),
    value, action of an expert assessment, each finite as stored, and the action's
    (throttle, steer, brake) by ACTIONS."""
    expert = np.asarray(expert, np.float64)
    if feature_len is not None and expert.shape != (feature_len + 2,):
        raise ValueError(f"expert assessment holds {expert.dtype} {expert.shape}; expected "
                         f"({feature_len + 2},) as frame t's (the port stacks the features)")
    ok = expert.ndim == 1 and len(expert) >= 3 and finite_f32(expert)
    action = float(expert[-1]) if ok else -1.0
    if not ok or action != int(action) or not 0 <= action < len(ACTIONS):
        raise ValueError(f"expert assessment holds {expert.dtype} {expert.shape}; expected "
                         "the feature, the value and the action (an index 0..38 of "
                         "Think2Drive's discrete actions), finite in float32")
    throttle, steer, brake = ACTIONS[int(action)]
    return {"expert_feature": expert[:-2].astype(np.float32), "expert_value": expert[-2],
            "expert_action": int(action), "action_throttle": throttle, "action_steer": steer,
            "action_brake": brake}


def future_expert(each: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """The expert files of frames t + 5k, k = 1..pred_len (each as expert_values gives it), as
    the TCP port pairs them (Bench2DriveZoo@tcp/admlp 31278ff tools/gen_tcp_data.py
    l.196-198: full_seq_feature[i+5 : i+25 : 5], file[:-2] each, and the action index
    file[-1]): the (pred_len, F) features and the (pred_len,) action indexes."""
    return {"future_expert_feature": np.stack([e["expert_feature"] for e in each]),
            "future_expert_action": np.array([e["expert_action"] for e in each], np.int32)}


def ego_entry(boxes: list) -> tuple[dict, bool]:
    """(the ego's entry, whether its class was written 'vehicle' instead of 'ego_vehicle')."""
    for entry in boxes:
        if isinstance(entry, dict) and entry.get("class") == "ego_vehicle":
            return entry, False
    if boxes and isinstance(boxes[0], dict) and boxes[0].get("class") == "vehicle":
        return boxes[0], True
    raise ValueError("anno bounding_boxes has no ego entry (class 'ego_vehicle', or a "
                     "'vehicle' first); expected data_collect.py's list, ego first")
