"""Boxes: one float32 table per sample, rows of `BOX_COLUMNS`, padded to the batch's longest
with a `boxes_len` count.

Row layout: class, x, y, z, extent_x, extent_y, extent_z, yaw, speed, brake, num_points, id,
affects_ego, light_state. Extents are HALF sizes along the box's own length, width and height
axes (CARLA's `bounding_box.extent` convention). A field an entry lacks (speed and brake of
lights and signs, brake of walkers, num_points of lights, affects_ego and light_state of cars
and walkers) is FILL. Positions stay in the frame the dataset saved them in. `id` is stored as
float32, exact for actor ids below 2^24. `affects_ego` (1/0) and `light_state` are what
carla_garage@1448bed team_code/data.py parse_bounding_boxes filters lights and stop signs by;
its expert (data_agent.py get_bounding_boxes) writes `affects_ego` as a bool and a light's
`state` as str(carla.TrafficLightState) ('Red', ...), stored here as that enum's value
(LIGHT_STATES index: Red 0, Yellow 1, Green 2, Off 3, Unknown 4; Bench2Drive's anno writes
the same int). Each dataset's
parser of its own boxes file (class names, extent order) is in carla_wds.datasets
(`box_parser(reader)`), built on `box_table` here.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from ..codecbase import SchemaError
from .base import CodecUse, Modality

# the first 12 columns, which every box table starts with (Bench2Drive's keeps these, then
# its own: pack/datasets/bench2drive/vocab.py)
CORE_COLUMNS: tuple[str, ...] = ("class", "x", "y", "z", "extent_x", "extent_y", "extent_z",
                                 "yaw", "speed", "brake", "num_points", "id")
BOX_COLUMNS: tuple[str, ...] = CORE_COLUMNS + ("affects_ego", "light_state")
LIGHT_STATES: tuple[str, ...] = ("Red", "Yellow", "Green", "Off", "Unknown")   # carla's enum
BOX_CLASSES: dict[str, int] = {"car": 0, "walker": 1, "traffic_light": 2, "stop_sign": 3,
                               "ego": 4, "traffic_sign": 5}   # Bench2Drive's signs of any kind
FILL = -1.0
_COL = {name: i for i, name in enumerate(BOX_COLUMNS)}
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


def _flag(entry: dict, index: int, key: str) -> float:
    value = entry[key]
    # the expert writes a Python bool; 0/1 as numbers are the same flag, anything else is not
    if isinstance(value, bool) or (isinstance(value, (int, float)) and value in (0, 1)):
        return float(value)
    raise SchemaError(f"box entry {index}: {key!r} is {type(value).__name__} {value!r}; "
                      "expected true or false")


def _light_state(entry: dict, index: int) -> float:
    """A light's `state`: carla_garage's str(TrafficLightState) or the enum's int value."""
    value = entry["state"]
    if isinstance(value, str) and value in LIGHT_STATES:
        return float(LIGHT_STATES.index(value))
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(LIGHT_STATES):
        return float(value)
    raise SchemaError(f"box entry {index}: 'state' is {type(value).__name__} {value!r}; "
                      f"expected a traffic light state, one of {list(LIGHT_STATES)} or 0..4")


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
    if entry.get("affects_ego") is not None:
        row[_COL["affects_ego"]] = _flag(entry, index, "affects_ego")
    if cls == "traffic_light" and entry.get("state") is not None:   # a light's, no other's
        row[_COL["light_state"]] = _light_state(entry, index)
    return finite_row(row, index)


def box_table(boxes: Any, what: str, class_of: Callable[[int, dict], str],
              half_of: Callable[[list[float]], list[float]]) -> np.ndarray:
    """A boxes file's list of entries -> (K, 14) float32 rows of BOX_COLUMNS: `class_of(index,
    entry)` names each entry's BOX_CLASSES class, `half_of(extent)` turns the file's extent
    triple into half sizes along the box's length, width and height."""
    rows = [_row(e, i, class_of(i, e), half_of(_triple(e, i, "extent")))
            for i, e in enumerate(_entries(boxes, what))]
    if not rows:
        return np.zeros((0, len(BOX_COLUMNS)), np.float32)
    return np.stack(rows).astype(np.float32)


def known_class(mapping: dict[str, str], index: int, entry: dict, what: str) -> str:
    """The BOX_CLASSES name `mapping` gives an entry's file class; SchemaError if none."""
    name = entry["class"]
    if not isinstance(name, str) or name not in mapping:
        raise SchemaError(f"box entry {index}: unknown {what} class {name!r}; "
                          f"expected one of {sorted(mapping)}")
    return mapping[name]


# what a manifest records of a packed box table: its width and every column, with units
BOX_UNITS = ("columns " + " ".join(BOX_COLUMNS) + " (carla_wds.modalities.boxes.BOX_COLUMNS): "
             "class id, m, half sizes m, rad, m/s, brake, LiDAR hits, actor id, 1/0, "
             "light_state 0 Red 1 Yellow 2 Green 3 Off 4 Unknown; -1 where absent")
BOXES = Modality("boxes", "float32", (None, None), "see carla_wds.boxes.BOX_COLUMNS",
                 collate="rows", batch="boxes", checked=True,
                 codecs=(CodecUse("boxes", "float32", (None, len(BOX_COLUMNS)), BOX_UNITS),),
                 doc="rows of BOX_COLUMNS (B, K_max, 14; a layout may add its own columns), "
                     "zero-padded, boxes_len (B,)")

__all__ = ["BOXES", "BOX_CLASSES", "BOX_COLUMNS", "BOX_UNITS", "CORE_COLUMNS", "FILL",
           "LIGHT_STATES", "box_table", "finite_row", "known_class"]
