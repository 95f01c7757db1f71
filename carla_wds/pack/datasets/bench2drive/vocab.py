"""Bench2Drive's box table columns and blueprint vocabulary (its dataset room, not the shared
box table of carla_wds.modalities.boxes): the columns --layout bench2drive writes and the fixed
vocabulary its `type_id` column indexes, both recorded in the manifest (spec.box_columns,
spec.box_type_ids)."""
from __future__ import annotations

from typing import Any

from ....modalities.boxes import CORE_COLUMNS

# --layout bench2drive: the box table's first 12 columns (CORE_COLUMNS: its shards did not
# gain issue 26's affects_ego / light_state, which no Bench2Drive loader reads), then
# prepare_B2D.py's velocity (vx, vy: m/s in the table's frame), the blueprint `type_id` as an
# index into B2D_TYPE_IDS, and the depth-visibility test's outcome (1 seen, 0 not seen, FILL
# not tested; see visible.py)
B2D_BOX_COLUMNS: tuple[str, ...] = CORE_COLUMNS + ("vx", "vy", "type_id", "visible")
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


__all__ = ["B2D_BOX_COLUMNS", "B2D_OTHER_TYPE", "B2D_TYPE_IDS", "b2d_type_index"]
