"""Bounding-box files of both projects as one float32 table, each in its project's own frame.

Row layout (`BOX_COLUMNS`): class, x, y, z, extent_x, extent_y, extent_z, yaw, speed, brake,
num_points, id. Extents are HALF sizes along the box's own length, width and height axes
(CARLA's `bounding_box.extent` convention). A field an entry lacks (speed and brake of lights
and signs, brake of walkers, num_points of lights) is FILL. Positions are not moved between
frames: TF2022's are its "virtual LiDAR" frame as saved, garage's the ego frame.

- TransFuser 2022 `label_raw/NNNN.json` (transfuser@22b3ccd team_code_autopilot/data_agent.py
  get_bev_cars): a list whose entry 0 is the ego, every entry `class: "Car"`, `extent` =
  FULL size stored [height, length, width] ("height stored in first dimension"; data.py's
  get_bbox_label unpacks it as `dz, dx, dy`).
- carla_garage `boxes/NNNN.json.gz` (carla_garage@1448bed team_code/data_agent.py
  get_bounding_boxes): classes ego_car, car, walker, traffic_light, stop_sign; `extent` is the
  CARLA half extent [x, y, z].

`id` is stored as float32, exact for actor ids below 2^24.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from .codecs import SchemaError

BOX_COLUMNS: tuple[str, ...] = ("class", "x", "y", "z", "extent_x", "extent_y", "extent_z",
                                "yaw", "speed", "brake", "num_points", "id")
BOX_CLASSES: dict[str, int] = {"car": 0, "walker": 1, "traffic_light": 2, "stop_sign": 3,
                               "ego": 4, "traffic_sign": 5}   # Bench2Drive's signs of any kind
FILL = -1.0
_COL = {name: i for i, name in enumerate(BOX_COLUMNS)}
# --layout bench2drive: BOX_COLUMNS, then prepare_B2D.py's velocity (vx, vy: m/s in the table's
# frame), the blueprint `type_id` as an index into B2D_TYPE_IDS, and the depth-visibility
# test's outcome (1 seen, 0 not seen, FILL not tested; see pack/b2d_visible.py)
B2D_BOX_COLUMNS: tuple[str, ...] = BOX_COLUMNS + ("vx", "vy", "type_id", "visible")
# The type_id vocabulary: index 0 'other' (a blueprint not listed; boxes_raw.json keeps its
# name), then the keys of VAD's NameMapping (Bench2DriveZoo@uniad/vad 10a2e5d
# adzoo/vad/configs/VAD/VAD_base_e2e_b2d.py), first occurrence order. Fixed in code and
# recorded in each manifest (spec.box_type_ids), so a resumed pack gives the same indexes.
B2D_OTHER_TYPE = "other"
B2D_TYPE_IDS: tuple[str, ...] = (B2D_OTHER_TYPE,) + (
    "vehicle.bh.crossbike",
    "vehicle.diamondback.century",
    "vehicle.gazelle.omafiets",
    "vehicle.audi.etron",
    "vehicle.chevrolet.impala",
    "vehicle.dodge.charger_2020",
    "vehicle.dodge.charger_police",
    "vehicle.dodge.charger_police_2020",
    "vehicle.lincoln.mkz_2017",
    "vehicle.lincoln.mkz_2020",
    "vehicle.mini.cooper_s_2021",
    "vehicle.mercedes.coupe_2020",
    "vehicle.ford.mustang",
    "vehicle.nissan.patrol_2021",
    "vehicle.audi.tt",
    "vehicle.ford.crown",
    "vehicle.tesla.model3",
    "/Game/Carla/Static/Car/4Wheeled/ParkedVehicles/FordCrown/"
    "SM_FordCrown_parked.SM_FordCrown_parked",
    "/Game/Carla/Static/Car/4Wheeled/ParkedVehicles/Charger/"
    "SM_ChargerParked.SM_ChargerParked",
    "/Game/Carla/Static/Car/4Wheeled/ParkedVehicles/Lincoln/"
    "SM_LincolnParked.SM_LincolnParked",
    "/Game/Carla/Static/Car/4Wheeled/ParkedVehicles/MercedesCCC/"
    "SM_MercedesCCC_Parked.SM_MercedesCCC_Parked",
    "/Game/Carla/Static/Car/4Wheeled/ParkedVehicles/Mini2021/"
    "SM_Mini2021_parked.SM_Mini2021_parked",
    "/Game/Carla/Static/Car/4Wheeled/ParkedVehicles/NissanPatrol2021/"
    "SM_NissanPatrol2021_parked.SM_NissanPatrol2021_parked",
    "/Game/Carla/Static/Car/4Wheeled/ParkedVehicles/TeslaM3/"
    "SM_TeslaM3_parked.SM_TeslaM3_parked",
    "/Game/Carla/Static/Car/4Wheeled/ParkedVehicles/VolkswagenT2/"
    "SM_VolkswagenT2_2021_Parked.SM_VolkswagenT2_2021_Parked",
    "vehicle.ford.ambulance",
    "vehicle.carlamotors.firetruck",
    "traffic.speed_limit.30",
    "traffic.speed_limit.40",
    "traffic.speed_limit.50",
    "traffic.speed_limit.60",
    "traffic.speed_limit.90",
    "traffic.speed_limit.120",
    "traffic.stop",
    "traffic.yield",
    "traffic.traffic_light",
    "static.prop.warningconstruction",
    "static.prop.warningaccident",
    "static.prop.trafficwarning",
    "static.prop.constructioncone",
    "walker.pedestrian.0001",
    "walker.pedestrian.0003",
    "walker.pedestrian.0004",
    "walker.pedestrian.0005",
    "walker.pedestrian.0007",
    "walker.pedestrian.0010",
    "walker.pedestrian.0013",
    "walker.pedestrian.0014",
    "walker.pedestrian.0015",
    "walker.pedestrian.0016",
    "walker.pedestrian.0017",
    "walker.pedestrian.0018",
    "walker.pedestrian.0019",
    "walker.pedestrian.0020",
    "walker.pedestrian.0021",
    "walker.pedestrian.0022",
    "walker.pedestrian.0025",
    "walker.pedestrian.0027",
    "walker.pedestrian.0030",
    "walker.pedestrian.0031",
    "walker.pedestrian.0032",
    "walker.pedestrian.0034",
    "walker.pedestrian.0035",
    "walker.pedestrian.0041",
    "walker.pedestrian.0042",
    "walker.pedestrian.0046",
    "walker.pedestrian.0047",
    "static.prop.dirtdebris01",
    "static.prop.dirtdebris02",
)
_B2D_TYPE_INDEX = {name: i for i, name in enumerate(B2D_TYPE_IDS)}


def b2d_type_index(type_id: Any) -> int:
    """The index of a blueprint name in B2D_TYPE_IDS; 0 ('other') for any other value."""
    return _B2D_TYPE_INDEX.get(type_id, 0) if isinstance(type_id, str) else 0

_GARAGE_CLASSES = {"ego_car": "ego", "car": "car", "walker": "walker",
                   "traffic_light": "traffic_light", "stop_sign": "stop_sign"}
_TF2022_CLASSES = {"Car": "car"}   # data_agent.py writes "Car" for every entry, the ego too
_OPTIONAL = ("speed", "brake", "num_points", "id")


def _number(entry: dict, index: int, key: str) -> float:
    value = entry[key]
    # bool is a number to Python; brake is a float in both projects, but accept a flag
    if not isinstance(value, (int, float)):
        raise SchemaError(f"box entry {index}: {key!r} is {type(value).__name__} {value!r}; "
                          "expected a number")
    if not math.isfinite(value):
        raise SchemaError(f"box entry {index}: {key!r} is {value}; expected a finite number")
    return float(value)


def _triple(entry: dict, index: int, key: str) -> list[float]:
    value = entry.get(key)
    if not isinstance(value, (list, tuple)) or len(value) != 3:
        raise SchemaError(f"box entry {index}: {key!r} is {value!r}; expected a list of 3 numbers")
    return [_number({key: v}, index, key) for v in value]


def _entries(boxes: Any, what: str) -> list[dict]:
    if not isinstance(boxes, list):
        raise SchemaError(f"{what} boxes file holds a {type(boxes).__name__}; "
                          "expected a list of box objects")
    for index, entry in enumerate(boxes):
        if not isinstance(entry, dict):
            raise SchemaError(f"box entry {index} is a {type(entry).__name__}; "
                              "expected an object with position, extent and yaw")
        for key in ("class", "position", "extent", "yaw"):
            if key not in entry:
                raise SchemaError(f"box entry {index} has no {key!r}; expected class, "
                                  "position, extent and yaw")
    return boxes


def finite_row(row: np.ndarray, index: int) -> np.ndarray:
    """`row` (float64), unless one of its values is not finite once stored as float32 (a box
    extent of 1e39 is finite in float64, inf in the table): SchemaError naming the column."""
    with np.errstate(over="ignore", invalid="ignore"):   # the cast's overflow is the finding
        bad = ~np.isfinite(np.asarray(row, np.float32))
    if bad.any():
        col = int(np.argmax(bad))
        raise SchemaError(f"box entry {index}: {BOX_COLUMNS[col]} is {row[col]:.6g}, not finite "
                          "in float32; expected metres, radians and m/s")
    return row


def _row(entry: dict, index: int, cls: str, half_extent: list[float]) -> np.ndarray:
    row = np.full(len(BOX_COLUMNS), FILL, np.float64)
    row[_COL["class"]] = BOX_CLASSES[cls]
    row[_COL["x"]:_COL["z"] + 1] = _triple(entry, index, "position")
    row[_COL["extent_x"]:_COL["extent_z"] + 1] = half_extent
    row[_COL["yaw"]] = _number(entry, index, "yaw")
    for key in _OPTIONAL:
        if entry.get(key) is not None:
            row[_COL[key]] = _number(entry, index, key)
    return finite_row(row, index)


def _table(boxes: Any, what: str, class_of: Callable[[int, dict], str],
           half_of: Callable[[list[float]], list[float]]) -> np.ndarray:
    rows = [_row(e, i, class_of(i, e), half_of(_triple(e, i, "extent")))
            for i, e in enumerate(_entries(boxes, what))]
    if not rows:
        return np.zeros((0, len(BOX_COLUMNS)), np.float32)
    return np.stack(rows).astype(np.float32)


def _known(mapping: dict[str, str], index: int, entry: dict, what: str) -> str:
    name = entry["class"]
    if not isinstance(name, str) or name not in mapping:
        raise SchemaError(f"box entry {index}: unknown {what} class {name!r}; "
                          f"expected one of {sorted(mapping)}")
    return mapping[name]


def tf2022_boxes(label_raw: list) -> np.ndarray:
    """TransFuser 2022 label_raw list -> (K, 12) float32; entry 0 (the ego) gets class ego."""
    def class_of(index: int, entry: dict) -> str:
        cls = _known(_TF2022_CLASSES, index, entry, "TransFuser 2022")
        return "ego" if index == 0 else cls

    def half_of(hlw: list[float]) -> list[float]:   # [h, l, w] full -> half [l, w, h]
        return [hlw[1] / 2, hlw[2] / 2, hlw[0] / 2]

    return _table(label_raw, "TransFuser 2022 label_raw", class_of, half_of)


def garage_boxes(boxes: list) -> np.ndarray:
    """carla_garage boxes list -> (K, 12) float32; extents are already half [x, y, z]."""
    return _table(boxes, "carla_garage",
                  lambda i, e: _known(_GARAGE_CLASSES, i, e, "carla_garage"), list)


__all__ = ["B2D_BOX_COLUMNS", "B2D_TYPE_IDS", "BOX_CLASSES", "BOX_COLUMNS", "FILL",
           "b2d_type_index", "finite_row", "garage_boxes", "tf2022_boxes"]
