"""Bench2Drive's `bounding_boxes` -> the box table (vocab.B2D_BOX_COLUMNS) in the ego frame, with
the boxes prepare_B2D.py keeps and the values it gives them (Bench2DriveZoo@uniad/vad 10a2e5d
mmcv/datasets/prepare_B2D.py `preprocess`):

- kept: the anno's `distance` (to the actor's location, not the box centre) <= the radius
  (MAX_DISTANCE 75), |location z - the ego's location z| <= 10 m (FILTER_Z_SHRESHOLD:
  overpasses), and with `visibility="filter"` the depth-visibility test (visible.py).
- `id`: Bench2Drive writes str(actor.id); prepare_B2D keeps int(id).
- `speed`: a vehicle's own; any other box with a `speed` key (walkers: always 0 in the anno)
  moves |centre(t) - centre(t-1)| x 10 Hz, 0 where the id was not kept at frame t-1.
  vx, vy: speed along prepare_B2D's yaw, turned into the table's frame; the ego row carries
  (speed, 0) as prepare's ego_vel.
- `type_id`: the blueprint name's index in vocab.B2D_TYPE_IDS (0: other).
The ego's row comes first (class ego), as before; positions and yaw are the ego frame's.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ....datasets.bench2drive import RIG_ROWS as B2D_RIG
from ....codecs import codec_named
from ....modalities.boxes import BOX_CLASSES, FILL, finite_row
from .vocab import B2D_BOX_COLUMNS, B2D_TYPE_IDS, b2d_type_index
from ....schema import SchemaError
from . import visible as vis
from .anno import B2D_CLASSES, _matrix, ego_entry, floats, number

Z_LIMIT = 10.0      # prepare_B2D's FILTER_Z_SHRESHOLD
VISIBILITY = ("filter", "flag", "off")
_WORLD2 = ("world2vehicle", "world2ped", "world2sign", "world2tl")
_COL = {name: i for i, name in enumerate(B2D_BOX_COLUMNS)}


@dataclass(frozen=True)
class BoxRules:
    radius: float
    handedness: str = "left"
    visibility: str = "filter"    # filter: drop unseen boxes; flag: keep, mark; off: no test


def _location(entry: dict, i: int) -> np.ndarray:
    loc = floats(entry.get("location", entry.get("center")), f"box entry {i} location")
    if loc.shape != (3,):
        raise SchemaError(f"box entry {i}: location is not 3 numbers")
    return loc


def _kept(entry: dict, i: int, ego_loc: np.ndarray, radius: float) -> bool:
    """prepare_B2D's distance and height rules (the anno's distance; without one, the 3-D
    distance of the locations, as CARLA's Location.distance gives it)."""
    loc = _location(entry, i)
    dist = entry.get("distance")
    if not isinstance(dist, (int, float)) or isinstance(dist, bool) or not math.isfinite(dist):
        dist = float(np.linalg.norm(loc - ego_loc))
    return dist <= radius and abs(loc[2] - ego_loc[2]) <= Z_LIMIT


def _actor_id(entry: dict, i: int) -> float:
    value = entry.get("id")
    if value is None:
        return FILL
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            value = None
    if not isinstance(value, int) or isinstance(value, bool):
        raise SchemaError(f"box entry {i}: id is {entry.get('id')!r}; expected an actor id "
                          "(Bench2Drive writes str(actor.id))")
    return float(value)


def _positions(anno: dict | None, radius: float) -> dict[Any, np.ndarray]:
    """id -> centre (x, y) of the boxes prepare_B2D kept at a frame (its position_dict)."""
    try:
        boxes = anno["bounding_boxes"]
        ego = ego_entry(boxes)[0]
        ego_loc = _location(ego, 0)
        return {e.get("id"): floats(e.get("center"), "center")[:2] for i, e in enumerate(boxes)
                if e is not ego and isinstance(e.get("id"), (str, int))
                and _kept(e, i, ego_loc, radius)}
    except (TypeError, KeyError, ValueError, IndexError):   # no usable frame t-1: speed 0
        return {}


def _speed(entry: dict, centre: np.ndarray, before: dict) -> float | None:
    """prepare_B2D's speed of a non-ego box; None where the entry has no speed key."""
    if "speed" not in entry:
        return None
    if "vehicle" in str(entry.get("class")):
        return number(entry, "speed")
    last = before.get(entry.get("id")) if isinstance(entry.get("id"), (str, int)) else None
    return 0.0 if last is None else float(np.linalg.norm(centre[:2] - last)) * 10.0


def _yaw_in_ego(entry: dict, world2ego: np.ndarray, ego_yaw: float) -> float:
    """A box's yaw in the ego frame, from its world2<actor> matrix where it has one (anno.md:
    static vehicles' rotation is wrong, their matrix is not), else from its rotation."""
    for key in _WORLD2:
        if isinstance(entry.get(key), list):
            actor2world = np.linalg.inv(_matrix(entry[key], (4, 4), key))
            rot = world2ego[:3, :3] @ actor2world[:3, :3]
            return math.atan2(rot[1, 0], rot[0, 0])
    yaw = math.radians(_rotation_yaw(entry)) - ego_yaw
    return math.atan2(math.sin(yaw), math.cos(yaw))


def _rotation_yaw(entry: dict) -> float:
    rotation = entry.get("rotation")
    if not isinstance(rotation, list) or len(rotation) != 3:
        raise ValueError(f"box {entry.get('id')}: no world2<actor> matrix and rotation is "
                         f"{rotation!r}; expected [pitch, roll, yaw] in degrees")
    return float(floats(rotation, f"box {entry.get('id')} rotation")[2])


class _Frame:
    """One anno's ego pose, LiDAR rig and frame t-1's positions."""

    def __init__(self, anno: dict, rules: BoxRules, prev: dict | None, depth) -> None:
        self.boxes = anno.get("bounding_boxes")
        if not isinstance(self.boxes, list):
            raise SchemaError(f"bounding_boxes is a {type(self.boxes).__name__}; expected a list")
        self.ego = ego_entry(self.boxes)[0]
        self.world2ego = _matrix(self.ego.get("world2ego"), (4, 4), "ego world2ego")
        self.ego_yaw = math.atan2(self.world2ego[0, 1], self.world2ego[0, 0])
        self.ego_loc = _location(self.ego, 0)
        sensors = anno.get("sensors")
        if not isinstance(sensors, dict):
            raise ValueError("anno has no 'sensors' object; expected Bench2Drive's calibration")
        theta = number(anno, "theta", allow_nan=True)
        self.rig = vis.lidar_rig(sensors, theta, _matrix,
                                 None if rules.visibility == "off" else depth)
        self.rules, self.before = rules, _positions(prev, rules.radius)

    def row(self, i: int, entry: Any) -> np.ndarray | None:
        if not isinstance(entry, dict):
            raise SchemaError(f"box entry {i} is a {type(entry).__name__}; expected an object")
        is_ego = entry is self.ego
        cls = "ego" if is_ego else B2D_CLASSES.get(entry.get("class"))
        if cls is None:
            raise SchemaError(f"box entry {i}: unknown class {entry.get('class')!r}; expected "
                              f"one of {sorted(B2D_CLASSES)} or ego_vehicle")
        if not is_ego and not _kept(entry, i, self.ego_loc, self.rules.radius):
            return None
        centre = floats(entry.get("center", entry.get("location")), f"box entry {i} center")
        half = floats(entry.get("extent"), f"box entry {i} extent")
        if centre.shape != (3,) or half.shape != (3,):
            raise SchemaError(f"box entry {i}: center/extent are not 3 numbers")
        row = np.full(len(B2D_BOX_COLUMNS), FILL, np.float64)
        row[_COL["class"]] = BOX_CLASSES[cls]
        row[_COL["x"]:_COL["z"] + 1] = (self.world2ego @ np.append(centre, 1.0))[:3]
        row[_COL["extent_x"]:_COL["extent_z"] + 1] = half
        row[_COL["yaw"]] = 0.0 if is_ego else _yaw_in_ego(entry, self.world2ego, self.ego_yaw)
        for key in ("speed", "brake", "num_points"):
            value = entry.get(key)
            if isinstance(value, (int, float)) and math.isfinite(value):
                row[_COL[key]] = float(value)
        row[_COL["id"]] = _actor_id(entry, i)
        row[_COL["type_id"]] = b2d_type_index(entry.get("type_id"))
        if not is_ego and not self._motion_and_sight(entry, row, centre, half):
            return None
        if is_ego:
            row[_COL["vx"]:_COL["vy"] + 1] = (max(row[_COL["speed"]], 0.0), 0.0)
        return finite_row(row, i)

    def _motion_and_sight(self, entry: dict, row: np.ndarray, centre: np.ndarray,
                          half: np.ndarray) -> bool:
        """Fills speed, vx, vy and visible; False where the visibility filter drops the box."""
        yaw = vis.box_yaw(self.rig, entry, _matrix, lambda: _rotation_yaw(entry))
        try:
            speed = _speed(entry, centre, self.before)
        except ValueError as exc:   # name the box, not only the key
            raise ValueError(f"box entry {entry.get('id', '?')}: {exc}") from None
        if speed is not None:
            row[_COL["speed"]] = speed
        vx, vy = vis.velocity_in_ego(self.rig, speed or 0.0, yaw)
        row[_COL["vx"]], row[_COL["vy"]] = vx, -vy     # right-handed ego -> CARLA's left
        if self.rules.visibility == "off":
            return True
        seen = vis.seen(self.rig, centre * np.array([1.0, -1.0, 1.0]), half, yaw)
        row[_COL["visible"]] = float(seen)
        return seen or self.rules.visibility == "flag"


def boxes_table(anno: dict, rules: BoxRules, prev: dict | None = None,
                depth: list[np.ndarray] | None = None) -> np.ndarray:
    """anno['bounding_boxes'] -> (K, 16) float32 (vocab.B2D_BOX_COLUMNS): the ego first, then
    every box prepare_B2D keeps. `prev`: frame t-1's anno (walker speeds), `depth`: the six
    depth maps in metres (B2D_RIG order) when rules.visibility is not 'off'."""
    frame = _Frame(anno, rules, prev, depth)
    rows = [r for i, e in enumerate(frame.boxes) if (r := frame.row(i, e)) is not None]
    table = np.stack(rows)
    if rules.handedness == "right":
        for col in ("y", "yaw", "vy"):
            table[:, _COL[col]] *= -1
    return table.astype(np.float32)


def depth_maps(files: dict[str, dict[int, str]], read, t: int) -> list[np.ndarray]:
    """Frame t's six depth PNGs (B2D_RIG order) in metres, for the visibility test; ValueError
    naming a missing or unreadable one and the option that turns the test off."""
    codec, out = codec_named("depth_b2d8"), []
    for _, _, folder, *_ in B2D_RIG:
        name = files.get(f"camera/depth_{folder}", {}).get(t)
        problem = "missing" if name is None else codec.check(data := read(name))
        if problem:
            raise ValueError(f"camera/depth_{folder}/{t:05d}.png: {problem}; the box visibility "
                             "test (prepare_B2D's FILTER_INVISINLE) reads every camera's depth. "
                             "Fix: --box-visibility off (keep every box, untested)")
        out.append(codec.decode(data))
    return out



def spec_doc(s) -> dict[str, Any]:
    """What the manifest's spec says of a bench2drive pack's boxes and expert pairing (B2DSettings
    `s`): the table's columns, the type_id vocabulary, the rules boxes are kept by."""
    return {"box_columns": list(B2D_BOX_COLUMNS), "box_type_ids": list(B2D_TYPE_IDS),
            "box_visibility": s.box_visibility, "box_z_limit_m": Z_LIMIT,
            "box_radius_of": "anno distance (actor location)",
            "expert_file_offset": s.expert_offset}


__all__ = ["BoxRules", "VISIBILITY", "Z_LIMIT", "boxes_table", "depth_maps",
           "spec_doc"]
