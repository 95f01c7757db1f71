"""LEAD's BEV semantic target for adapter="lead" (use_bev_semantic): the saved map with the
frame's boxes drawn in, as CARLAData computes it (kesai-labs/lead@44891760
lead/data_loader/carla_dataset.py _load_sensor_data_and_build_cache and __getitem__'s
"HD-Map" and "Occupancy" parts, carla_dataset_utils.py build_bev_occupancy; Leaderboard
mode). Written from their formulas; checked against their loader in
tests/load/adapters/test_lead_model.py and against the formula in tests/load/adapters/
test_lead_bev.py.

- the map: hdmap/NNNN.png (256 x 256 ChauffeurNet ids at 2 px/m, forward +column, right +row;
  the twin's own map for the perturbated sample) through their converter (road 1, lane
  markings 2, stop signs 3, the rest 0), rows centre + (-40, 40) * 2 and columns centre +
  (-32, 64) * 2 cut out, each pixel repeated 2 x 2: (320, 384) at 4 px/m;
- the occupancy: a 1024 x 1024 grid at 4 px/m with the ego at (512, 512) on which each box
  of class car, walker, static, static_prop_car or traffic_light is filled (cv2.boxPoints of
  its centre R(rot)^T (p - (0, trans)) as column (x + 128) * 4, row (128 + y) * 4, its
  extents * 2 * 4, walkers and bikers scaled 2.5 with 0.4 m at least, and its yaw - rot),
  labelled (vehicle 1, walker 2, obstacle 3, parking 4, special 5, biker 6, lights green 7,
  red 8 or 9) and filtered as theirs; then the convex hulls of construction sites, blocking
  scenarios and the ego's lights; cut at the same window;
- bev_semantic: the map where the occupancy is 0, else the occupancy + 3 (uint8, 13 classes);
  `hdmap` is the same array (theirs: one array under both keys).
"""
from __future__ import annotations

from typing import Any

import cv2
import numpy as np

from .lead_boxes import (BIKERS, BLOCKING, EMERGENCY, FIXED_SIZE, MESH_EXTENTS,
                         OPEN_DOOR_EXTRA, PARKING_SCENARIOS, STATIC_WHITE_LIST)

MIN_X, MAX_X, MIN_Y, MAX_Y = -32, 64, -40, 40
COLLECTION_PPM, SCALE, GRID = 2, 4, 1024
# constants.py CHAFFEURNET_TO_TRANSFUSER_BEV_SEMANTIC_CONVERTER, by ChauffeurNet id 0..8
CONVERTER = np.array([0, 1, 0, 2, 2, 3, 0, 0, 0], np.uint8)
VEHICLE, WALKER, OBSTACLE, PARKING, SPECIAL, BIKER, GREEN, RED, RED_ODD = range(1, 10)
OFFSET = 3            # len(TransfuserBEVSemanticClass) - len(TransfuserBEVOccupancyClass)
WALKER_SCALE, WALKER_MIN_EXTENT = 2.5, 0.4
DRAWN = ("car", "walker", "static", "static_prop_car", "traffic_light")
# (min lidar points, min visible pixels) by box class (config_training.py)
OCCLUSION = {"walker": (5, 15), "car": (1, 1), "static": (3, 5), "static_prop_car": (3, 5)}


def _normalize(a: float) -> float:
    """common_utils.normalize_angle: a mod 2 pi, minus 2 pi above pi."""
    a = a % (2 * np.pi)
    return a - 2 * np.pi if a > np.pi else a


def cut_map(hdmap: np.ndarray) -> np.ndarray:
    """Their converter, the window around the ego, 2 x 2 upscaled: uint8 (320, 384)."""
    if hdmap.max(initial=0) >= len(CONVERTER):
        raise ValueError(f"hdmap holds class {int(hdmap.max())}; LEAD's maps hold ChauffeurNet "
                         "ids 0-8: pack LEAD's hdmap/ folder as their expert saves it")
    c = hdmap.shape[0] / 2
    rows = (c + np.array([MIN_Y, MAX_Y]) * COLLECTION_PPM).astype(int)
    cols = (c + np.array([MIN_X, MAX_X]) * COLLECTION_PPM).astype(int)
    return CONVERTER[hdmap[rows[0]:rows[1], cols[0]:cols[1]]].repeat(2, 0).repeat(2, 1)


def _scenario_car(box: dict, meta: dict) -> tuple[bool, bool]:
    """(a scenario car standing still, ... and one of the scenario's obstacles)."""
    still = (box["class"] == "car" and "role_name" in box and "scenario" in box["role_name"]
             and box["speed"] < 0.1)
    return still, still and box["id"] in meta.get("scenario_obstacles_ids", ())


def _rect(box: dict, trans: float, rot: float, scenario: str, meta: dict
          ) -> np.ndarray | None:
    """The box's four integer grid corners, or None when its centre is off the grid."""
    a = np.deg2rad(rot)
    c, s = np.cos(a), np.sin(a)
    px, py = float(box["position"][0]), float(box["position"][1]) - trans
    x, y = c * px + s * py, -s * px + c * py
    cx, cy = (x + 128.0) * SCALE, (128.0 + y) * SCALE
    if not (0 <= cx < GRID and 0 <= cy < GRID):
        return None
    walkerlike = box["class"] == "walker" or box.get("type_id") in BIKERS
    scale, least = (WALKER_SCALE, WALKER_MIN_EXTENT) if walkerlike else (1.0, 0.0)
    ex, ey = max(box["extent"][0], least), max(box["extent"][1], least)
    if (_scenario_car(box, meta)[1] and scenario == "VehicleOpensDoorTwoWays"
            and meta["vehicle_opened_door"]):
        ey += OPEN_DOOR_EXTRA / 2
        cy += OPEN_DOOR_EXTRA / 2 * SCALE * (1 if meta["vehicle_door_side"] == "left" else -1)
    if "mesh_path" in box:
        if box["mesh_path"] in MESH_EXTENTS:
            ex, ey = MESH_EXTENTS[box["mesh_path"]]
    elif box.get("type_id") in FIXED_SIZE:
        ex, ey = FIXED_SIZE[box["type_id"]]
    yaw = _normalize(box["yaw"] - a)
    rect = ((cx, cy), (ex * 2 * SCALE * scale, ey * 2 * SCALE * scale), np.rad2deg(yaw))
    return cv2.boxPoints(rect).astype(np.int32)


def _car_label(box: dict, scenario: str, meta: dict) -> tuple[int, str | None]:
    """A car's class, and the hull it joins ("obstacle") if any."""
    still, obstacle = _scenario_car(box, meta)
    if box.get("type_id", "") in EMERGENCY:
        if scenario in BLOCKING and box["id"] in meta.get("scenario_obstacles_ids", ()):
            return OBSTACLE, "obstacle"
        return SPECIAL, None
    if box.get("type_id", "") in BIKERS:
        return BIKER, None
    if still:
        if scenario in BLOCKING and obstacle:
            return OBSTACLE, "obstacle"
        if scenario == "VehicleOpensDoorTwoWays" and obstacle:
            return (OBSTACLE, "obstacle") if meta["vehicle_opened_door"] else (PARKING, None)
        if scenario in PARKING_SCENARIOS and box["lane_type_str"] == "Parking":
            return PARKING, None
    return VEHICLE, None


def _label(box: dict, scenario: str, meta: dict) -> tuple[int, str | None] | None:
    """The box's occupancy class and hull group, or None when it is not drawn."""
    cls = box["class"]
    if cls == "car":
        return _car_label(box, scenario, meta)
    if cls == "walker":
        return WALKER, None
    if cls == "static_prop_car":
        return PARKING, None
    if cls == "static":
        type_id = box.get("type_id", "")
        if type_id in STATIC_WHITE_LIST:
            return OBSTACLE, {"static.prop.constructioncone": "cone"}.get(type_id, "warning")
        if type_id in EMERGENCY:
            return SPECIAL, "obstacle"
        parked = box.get("mesh_path") is not None and "ParkedVehicles" in box["mesh_path"]
        return (PARKING, None) if parked else None
    if not box["affects_ego"]:
        return None
    if box["state"] in ("Red", "Yellow"):
        odd = meta["over_head_traffic_light"] or meta["europe_traffic_light"]
        return (RED_ODD, "red_odd") if odd else (RED, "red")
    return GREEN, "green"


def _occluded(box: dict) -> bool:
    """Too few LiDAR points and visible pixels for its class (theirs: by class here)."""
    if box["class"] not in OCCLUSION:
        return False
    points, pixels = OCCLUSION[box["class"]]
    return 0 <= box["num_points"] < points and 0 <= box["visible_pixels"] < pixels


def _hull(grid: np.ndarray, corners: list, label: int, reach: float | None) -> bool:
    """Fill the corners' convex hull when there are 3 or more (all within reach px of their
    mean, when given); whether it was filled."""
    if len(corners) < 3:
        return False
    pts = np.array(corners)
    if reach is not None and not np.all(np.linalg.norm(pts - pts.mean(0), axis=1) <= reach):
        return False
    cv2.fillPoly(grid, [cv2.convexHull(pts)], label)
    return True


def occupancy(boxes: list[dict], trans: float, rot: float, scenario: str, meta: dict
              ) -> np.ndarray:
    """build_bev_occupancy: the 1024 x 1024 uint8 grid (module docstring)."""
    grid = np.zeros((GRID, GRID), np.uint8)
    groups: dict[str, list] = {k: [] for k in ("obstacle", "cone", "warning", "red",
                                               "red_odd", "green")}
    for box in boxes:
        if box["class"] not in DRAWN:
            continue
        pts = _rect(box, trans, rot, scenario, meta)
        if pts is None:
            continue
        found = _label(box, scenario, meta)
        if found is None:
            continue
        if found[1] is not None:
            groups[found[1]].extend(pts.tolist())
        if not _occluded(box):
            cv2.fillPoly(grid, [pts], found[0])
    if len(groups["warning"]) >= 3 and len(groups["cone"]) >= 24:
        _hull(grid, groups["cone"] + groups["warning"], OBSTACLE, 24 * SCALE)
    _hull(grid, groups["obstacle"], OBSTACLE, 48 * SCALE)
    _ = (_hull(grid, groups["red_odd"], RED_ODD, None) or _hull(grid, groups["red"], RED, None)
         or _hull(grid, groups["green"], GREEN, None))
    return grid


def lead_bev_semantic(hdmap: np.ndarray, boxes: list[dict], trans: float, rot: float,
                      scenario: str, meta: dict) -> dict[str, Any]:
    """Their bev_semantic and hdmap keys of one sample (module docstring)."""
    out = cut_map(np.asarray(hdmap)[0] if np.ndim(hdmap) == 3 else np.asarray(hdmap))
    occ = occupancy(boxes, trans, rot, scenario, meta)
    c = GRID / 2
    rows = (c + np.array([MIN_Y, MAX_Y]) * SCALE).astype(int)
    cols = (c + np.array([MIN_X, MAX_X]) * SCALE).astype(int)
    occ = occ[rows[0]:rows[1], cols[0]:cols[1]]
    mask = occ != 0
    out[mask] = occ[mask] + OFFSET
    out = np.ascontiguousarray(out)
    return {"bev_semantic": out, "hdmap": out}


__all__ = ["cut_map", "lead_bev_semantic", "occupancy"]
