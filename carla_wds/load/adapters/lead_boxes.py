"""LEAD's box targets for adapter="lead": their bounding-box labels and CenterNet targets as
CARLAData computes them with detect_boxes on (kesai-labs/lead@44891760
lead/data_loader/carla_dataset_utils.py bbox_json2array, get_bbox_labels,
bb_vehicle_to_image_system and get_centernet_labels; Leaderboard mode). Written from their
formulas; checked against their loader in tests/load/adapters/test_lead_model.py.

Per box of the frame's bboxes list (the same list for the twin; moved by its perturbation):
- row (x, y, extent_x, extent_y, yaw, velocity, brake, class, num_radar_points), float32:
  (x, y) = R(rot)^T ((x, y) - (0, trans)), yaw = normalize(yaw - rot); velocity for cars and
  walkers; brake for cars (NaN -> 0); class by their table (car 0 or special 4 for a scenario
  emergency mesh, walker 1, traffic_light 2, stop_sign 3, static 6);
- left out: the ego; occluded boxes (num_points and visible_pixels both in [0, limit) for
  pedestrians 5/15, static vehicles 3/5, vehicles 1/1, by transfuser_semantics_id); traffic
  lights not affecting the ego or green, stop signs not affecting it; centres on or outside
  x (-32, 64), y (-40, 40) after the move, or z on or outside (-4, 4); static boxes of a
  type outside their white list (cones, traffic warnings) unless parked vehicles;
- relabelled: cones and traffic warnings get their fixed sizes and class obstacle 5, parked
  vehicles (a ParkedVehicles mesh, static_prop_car) parking 6, a known static mesh its
  measured extents (MESH_EXTENTS), scenario cars standing still
  by the scenario (VehicleOpensDoorTwoWays: door widening, obstacle/parking; Accident and the
  other blocking scenarios: obstacle; the parking scenarios: parking), bikers 7;
- then to the BEV image: (x + 32, y + 40) * 4 px and the extents * 4, kept when the centre is
  in [0, 384) x [0, 320); at most max_num_bbs = 90 rows, zero rows after (theirs, truncated).

CenterNet targets (centernet.py, the same formulas as carla_garage's): the 90 padded rows on
an (80, 96) map at 1/4 of the BEV image, 8 classes. Where LEAD differs from garage: the zero
rows of the padding are drawn too (a class-0 Gaussian of radius 2 at cell (0, 0), which also
counts in avg_factor), a centre outside the map is skipped, and the keys are prefixed
center_net_ (brake: center_net_brake).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from .centernet import centernet_targets

MIN_X, MAX_X, MIN_Y, MAX_Y, MIN_Z, MAX_Z, PPM = -32, 64, -40, 40, -4, 4, 4
WIDTH_PX, HEIGHT_PX = (MAX_X - MIN_X) * PPM, (MAX_Y - MIN_Y) * PPM      # 384, 320
FEAT_W, FEAT_H = MAX_X - MIN_X, MAX_Y - MIN_Y                           # bev_down_sample 4
MAX_NUM_BBS, NUM_CLASSES = 90, 8
VEHICLE, WALKER, LIGHT, STOP, SPECIAL, OBSTACLE, PARKING, BIKER = range(8)
SEM_VEHICLE, SEM_PEDESTRIAN = 1, 4       # TransfuserSemanticSegmentationClass
# config_training.py: (min lidar points, min visible pixels) per kind
OCCLUSION = {"pedestrian": (5, 15), "parking": (3, 5), "vehicle": (1, 1)}
STATIC_WHITE_LIST = ("static.prop.constructioncone", "static.prop.trafficwarning")
FIXED_SIZE = {"static.prop.trafficwarning": (1.186714768409729, 1.4352929592132568),
              "static.prop.constructioncone": (0.1720348298549652, 0.1720348298549652)}
EMERGENCY = {"vehicle.dodge.charger_police_2020", "vehicle.dodge.charger_police",
             "vehicle.ford.ambulance", "vehicle.carlamotors.firetruck"}
BIKERS = {"vehicle.diamondback.century", "vehicle.gazelle.omafiets", "vehicle.bh.crossbike"}
# the (x, y) half extents LEAD gives static meshes (constants.py LOOKUP_TABLE: CARLA's mesh
# sizes, measured), by mesh_path
_PARKED = "/Game/Carla/Static/Car/4Wheeled/ParkedVehicles/"
MESH_EXTENTS = {f"{_PARKED}{path}": size for path, size in {
    "Lincoln/SM_LincolnParked.SM_LincolnParked": (2.44619083404541, 1.115301489830017),
    "Charger/SM_ChargerParked.SM_ChargerParked": (2.5039126873016357, 1.0485419034957886),
    "VolkswagenT2/SM_VolkswagenT2_2021_Parked.SM_VolkswagenT2_2021_Parked":
        (2.2210919857025146, 0.9388753771781921),
    "FordCrown/SM_FordCrown_parked.SM_FordCrown_parked": (2.6828393936157227, 0.9732309579849243),
    "NissanPatrol2021/SM_NissanPatrol2021_parked.SM_NissanPatrol2021_parked":
        (2.782914400100708, 1.217571496963501),
    "MercedesCCC/SM_MercedesCCC_Parked.SM_MercedesCCC_Parked":
        (2.3368194103240967, 1.0011461973190308),
    "TeslaM3/SM_TeslaM3_parked.SM_TeslaM3_parked": (2.3958897590637207, 1.081725001335144),
    "Mini2021/SM_Mini2021_parked.SM_Mini2021_parked": (2.2763495445251465, 1.0926425457000732),
}.items()}
MESH_EXTENTS.update({
    "/Game/Carla/Static/Dynamic/Garden/SM_PlasticTable.SM_PlasticTable":
        (1.241101622581482, 1.241101622581482),
    "/Game/Carla/Static/Dynamic/Garden/SM_PlasticChair.SM_PlasticChair":
        (0.36523768305778503, 0.37522444128990173),
    "/Game/Carla/Static/Dynamic/Construction/SM_ConstructionCone.SM_ConstructionCone":
        (0.1720348298549652, 0.1720348298549652)})
OPEN_DOOR_EXTRA = 1.2
BLOCKING = ("Accident", "AccidentTwoWays", "BlockedIntersection", "ParkedObstacle",
            "ParkedObstacleTwoWays")
PARKING_SCENARIOS = ("ParkingCrossingPedestrian", "ParkingCutIn", "StaticCutIn",
                     "PedestrianCrossing", "ParkingExit")


def _angle(a: float) -> float:
    return (a + math.pi) % (2 * math.pi) - math.pi


def _scenario_car(box: dict) -> bool:
    return "role_name" in box and "scenario" in box["role_name"]


def box_row(box: dict, trans: float, rot_deg: float) -> np.ndarray:
    """bbox_json2array's row of one box, moved by the perturbation (module docstring)."""
    a = np.deg2rad(rot_deg)
    c, s = np.cos(a), np.sin(a)
    px, py = float(box["position"][0]), float(box["position"][1]) - trans
    row = np.array([c * px + s * py, -s * px + c * py, box["extent"][0], box["extent"][1],
                    0, 0, 0, 0, box.get("num_radar_points", -1)], np.float32)
    row[4] = _angle(box["yaw"] - a)
    kind = box["class"]
    if kind == "car":
        row[5] = box["speed"]
        row[6] = 0 if np.isnan(box["brake"]) else box["brake"]
        row[7] = SPECIAL if _scenario_car(box) and box.get("type_id") in EMERGENCY else VEHICLE
    elif kind == "walker":
        row[5], row[7] = box["speed"], WALKER
    else:
        row[7] = {"traffic_light": LIGHT, "stop_sign": STOP, "static": PARKING}.get(kind, 0)
    return row


def occluded(box: dict) -> bool:
    """Too few LiDAR points and visible pixels for its kind (both known and small)."""
    if "num_points" not in box:
        return False
    points, pixels = box["num_points"], box.get("visible_pixels", -1)
    sem = box["transfuser_semantics_id"]
    kinds = (["pedestrian"] if sem == SEM_PEDESTRIAN else []) + (
        (["parking"] if box["class"] == "static" else []) + ["vehicle"]
        if sem == SEM_VEHICLE else [])
    return any(0 <= points < OCCLUSION[k][0] and 0 <= pixels < OCCLUSION[k][1] for k in kinds)


def _left_out(box: dict, row: np.ndarray, parked: bool) -> bool:
    kind = box["class"]
    if kind == "ego_car" or occluded(box):
        return True
    if kind == "traffic_light" and (not box["affects_ego"] or box["state"] == "Green"):
        return True
    if kind == "stop_sign" and not box["affects_ego"]:
        return True
    z = box["position"][2]
    if not (MIN_X < row[0] < MAX_X and MIN_Y < row[1] < MAX_Y and MIN_Z < z < MAX_Z):
        return True
    return (kind == "static" and "type_id" in box and box["type_id"] not in STATIC_WHITE_LIST
            and not parked)


def _scenario_relabel(box: dict, row: np.ndarray, scenario: str, meta: dict) -> None:
    """Scenario cars standing still (get_bbox_labels' last relabelling), in place."""
    if not (box["class"] == "car" and _scenario_car(box) and box["speed"] < 0.1):
        return
    obstacle = box["id"] in meta.get("scenario_obstacles_ids", ())
    if scenario == "VehicleOpensDoorTwoWays" and obstacle:
        opened = meta["vehicle_opened_door"]
        if opened:
            row[3] += OPEN_DOOR_EXTRA / 2
            row[1] += OPEN_DOOR_EXTRA / 2 * (1 if meta["vehicle_door_side"] == "left" else -1)
        if row[7] != SPECIAL:
            row[7] = OBSTACLE if opened else PARKING
    elif row[7] != SPECIAL:
        if scenario in BLOCKING and obstacle:
            row[7] = OBSTACLE
        elif scenario in PARKING_SCENARIOS and box["lane_type_str"] == "Parking":
            row[7] = PARKING


def label(box: dict, trans: float, rot_deg: float, scenario: str, meta: dict
          ) -> np.ndarray | None:
    """One box's row in the BEV image frame, or None when their filter leaves it out."""
    row = box_row(box, trans, rot_deg)
    parked = (box["class"] == "static" and box.get("mesh_path") is not None
              and "ParkedVehicles" in box["mesh_path"]) or box["class"] == "static_prop_car"
    if _left_out(box, row, parked):
        return None
    if box.get("type_id") in FIXED_SIZE:
        row[2], row[3] = FIXED_SIZE[box["type_id"]]
        row[7] = OBSTACLE
    if box.get("mesh_path") in MESH_EXTENTS:
        row[2], row[3] = MESH_EXTENTS[box["mesh_path"]]
    if parked or box["class"] == "static_prop_car":
        row[7] = PARKING
    _scenario_relabel(box, row, scenario, meta)
    if box.get("type_id") in BIKERS:
        row[7] = BIKER
    row[:2] = (row[:2] - np.array([MIN_X, MIN_Y], np.float32)) * PPM
    row[2:4] *= PPM
    if not (0 <= row[0] < WIDTH_PX and 0 <= row[1] < HEIGHT_PX):
        return None
    return row


def lead_box_targets(boxes: list[dict], trans: float, rot_deg: float, scenario: str,
                     meta: dict) -> dict[str, Any]:
    """Their center_net_* keys of one sample (module docstring)."""
    rows = [r for r in (label(b, trans, rot_deg, scenario, meta) for b in boxes)
            if r is not None]
    padded = np.zeros((MAX_NUM_BBS, 9), np.float32)
    if rows:
        padded[:min(len(rows), MAX_NUM_BBS)] = np.stack(rows)[:MAX_NUM_BBS]
    # the zero rows are alike and each draws the same cell: one of them draws what all do
    drawn = padded[:min(len(rows) + 1, MAX_NUM_BBS), :8]
    t, avg = centernet_targets(drawn, FEAT_H, FEAT_W, HEIGHT_PX, WIDTH_PX,
                               num_classes=NUM_CLASSES, skip_outside=True)
    return {"center_net_bounding_boxes": padded, "center_net_heatmap": t["center_heatmap"],
            "center_net_wh": t["wh"], "center_net_yaw_class": t["yaw_class"],
            "center_net_yaw_res": t["yaw_res"], "center_net_offset": t["offset"],
            "center_net_velocity": t["velocity"], "center_net_brake": t["brake_target"],
            "center_net_pixel_weight": t["pixel_weight"],
            "center_net_avg_factor": np.int64(avg)}
