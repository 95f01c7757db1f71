"""Bench2Drive's `anno/NNNNN.json.gz`: one frame's ego state, calibration and boxes, read into
the sample's labels, measurements record and box table.

Formulas, each from the project's own code (see docs/coordinates.md):
- waypoints and target point, Bench2DriveZoo@tcp/admlp TCP/data.py: theta' = theta - pi/2
  (theta is CARLA's compass, NaN -> 0 for the current frame), R = [[cos, sin], [-sin, cos]]
  of theta', local = R @ (p - p_ego): (forward, right) in CARLA's left-handed vehicle frame;
  the target point is (x_target, y_target), the command `next_command` (VOID -> LANEFOLLOW).
- right-handed (`handedness="right"`), Bench2DriveZoo@uniad/vad prepare_B2D.py: y -> -y for
  points, yaw -> -yaw for boxes, cam2ego and lidar2ego through carla_wds.calib.
Data quirks met in the real files and handled here, each counted by the caller: a NaN theta,
`speed: null` (then |p[t+1] - p[t-1]| / 2dt, as the ego actually moved), and the ego's class
written `vehicle` (anno.md) instead of `ego_vehicle` (data_collect.py): the ego is then
bounding_boxes[0], which data_collect.py always writes first.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..boxes import BOX_CLASSES, BOX_COLUMNS, FILL, finite_row
from ..calib import B2D_RIG, to_right_handed_cam2ego, to_right_handed_lidar2ego
from ..extras import MeasField
from ..schema import SchemaError
from .labels import F32_MAX, command_index, command_onehot, finite_f32, non_finite_label

B2D_CLASSES = {"vehicle": "car", "walker": "walker", "traffic_light": "traffic_light",
               "traffic_sign": "traffic_sign"}
# prepare_B2D.py keeps boxes within 75 m; data_collect.py saves up to 100 m
DEFAULT_BOX_RADIUS = 75.0
_WORLD2 = ("world2vehicle", "world2ped", "world2sign", "world2tl")
_COL = {name: i for i, name in enumerate(BOX_COLUMNS)}
EXPERT_FEATURES = 256


def record_fields(expert: bool) -> tuple[MeasField, ...]:
    """The measurements record of a bench2drive sample (frames: see the manifest's spec)."""
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
    if expert:
        out += [MeasField("expert_feature", shape=(EXPERT_FEATURES,)),
                MeasField("expert_value"), MeasField("expert_action", "int32")]
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
        out.update(_expert(expert))
    return out


def _expert(expert: np.ndarray) -> dict[str, Any]:
    """feature (256), value, action of an expert assessment, each finite as stored."""
    expert = np.asarray(expert, np.float64)
    ok = expert.shape == (EXPERT_FEATURES + 2,) and finite_f32(expert)
    action = float(expert[-1]) if ok else -1.0
    if not ok or action != int(action) or not 0 <= action < 2 ** 31:
        raise ValueError(f"expert assessment holds {expert.dtype} {expert.shape}; expected "
                         f"{EXPERT_FEATURES + 2} values finite in float32 (feature, value, "
                         "action), the action a whole number >= 0")
    return {"expert_feature": expert[:EXPERT_FEATURES], "expert_value": expert[-2],
            "expert_action": int(action)}


def ego_entry(boxes: list) -> tuple[dict, bool]:
    """(the ego's entry, whether its class was written 'vehicle' instead of 'ego_vehicle')."""
    for entry in boxes:
        if isinstance(entry, dict) and entry.get("class") == "ego_vehicle":
            return entry, False
    if boxes and isinstance(boxes[0], dict) and boxes[0].get("class") == "vehicle":
        return boxes[0], True
    raise ValueError("anno bounding_boxes has no ego entry (class 'ego_vehicle', or a "
                     "'vehicle' first); expected data_collect.py's list, ego first")


def _yaw_in_ego(entry: dict, world2ego: np.ndarray, ego_yaw: float) -> float:
    """A box's yaw in the ego frame, from its world2<actor> matrix where it has one (anno.md:
    static vehicles' rotation is wrong, their matrix is not), else from its rotation."""
    for key in _WORLD2:
        if isinstance(entry.get(key), list):
            actor2world = np.linalg.inv(_matrix(entry[key], (4, 4), key))
            rot = world2ego[:3, :3] @ actor2world[:3, :3]
            return math.atan2(rot[1, 0], rot[0, 0])
    rotation = entry.get("rotation")
    if not isinstance(rotation, list) or len(rotation) != 3:
        raise ValueError(f"box {entry.get('id')}: no world2<actor> matrix and rotation is "
                         f"{rotation!r}; expected [pitch, roll, yaw] in degrees")
    yaw = math.radians(float(floats(rotation, f"box {entry.get('id')} rotation")[2])) - ego_yaw
    return math.atan2(math.sin(yaw), math.cos(yaw))


def boxes_table(boxes: Any, radius: float, handedness: str) -> np.ndarray:
    """anno['bounding_boxes'] -> (K, 12) float32 in the ego frame (boxes.BOX_COLUMNS), the ego
    first (class ego), then every other box whose centre is within `radius` m of it."""
    if not isinstance(boxes, list):
        raise SchemaError(f"bounding_boxes is a {type(boxes).__name__}; expected a list")
    ego, _ = ego_entry(boxes)
    world2ego = _matrix(ego.get("world2ego"), (4, 4), "ego world2ego")
    ego_yaw = math.atan2(world2ego[0, 1], world2ego[0, 0])   # world2ego = R(yaw)^T
    rows = []
    for i, entry in enumerate(boxes):
        if not isinstance(entry, dict):
            raise SchemaError(f"box entry {i} is a {type(entry).__name__}; expected an object")
        cls = "ego" if entry is ego else B2D_CLASSES.get(entry.get("class"))
        if cls is None:
            raise SchemaError(f"box entry {i}: unknown class {entry.get('class')!r}; expected "
                              f"one of {sorted(B2D_CLASSES)} or ego_vehicle")
        centre = floats(entry.get("center", entry.get("location")), f"box entry {i} center")
        half = floats(entry.get("extent"), f"box entry {i} extent")
        if centre.shape != (3,) or half.shape != (3,):
            raise SchemaError(f"box entry {i}: center/extent are not 3 numbers")
        local = (world2ego @ np.append(centre, 1.0))[:3]
        if cls != "ego" and math.hypot(local[0], local[1]) > radius:
            continue
        yaw = 0.0 if cls == "ego" else _yaw_in_ego(entry, world2ego, ego_yaw)
        row = np.full(len(BOX_COLUMNS), FILL, np.float64)
        row[_COL["class"]] = BOX_CLASSES[cls]
        row[_COL["x"]:_COL["z"] + 1] = local
        row[_COL["extent_x"]:_COL["extent_z"] + 1] = half
        row[_COL["yaw"]] = yaw
        for key in ("speed", "brake", "num_points", "id"):
            value = entry.get(key)
            if isinstance(value, (int, float)) and math.isfinite(value):
                row[_COL[key]] = float(value)
        rows.append(finite_row(row, i))
    table = np.stack(rows)
    if handedness == "right":
        table[:, _COL["y"]] *= -1
        table[:, _COL["yaw"]] *= -1
    return table.astype(np.float32)
