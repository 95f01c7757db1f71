"""LEAD / TransFuser v6 (kesai-labs/lead@4489176, CVPR 2026): the `lead` layout's names,
camera strips, rig and 8-bit depth codec `depth_lead8` (docs/datasets/lead.md).

- Cameras: lead/common/base_agent.py l.230-240 stitches the cameras side by side
  (`np.concatenate(rgb_cameras, axis=1)`) into one `rgb/NNNN.jpg`; the order is the camera
  numbers of lead/common/config_base.py camera_calibration (l.136-245). The expert collects
  TargetDataset.CARLA_LEADERBOARD2_3CAMERAS (lead/expert/config_expert.py l.32-34): three
  cameras of 1152 // 3 = 384 x 384 px, fov 60, yaw -54.5, 0, 54.5 deg. Every metas pickle
  says how many cameras the strip holds (sensor_information.num_cameras, expert.py l.3080);
  3, 6 and 1 (CARLA_LEADERBOARD2_1CAMERA) name the cameras.
- Frame: labels are in CARLA's vehicle frame (x forward, y right): metas' future_positions are
  inv(ego_matrix) @ p (expert_data.py l.1209-1222) and target points R(theta)^T (p - pos)
  (common_utils.py inverse_conversion_2d) - the same axes as carla_garage's.
- Depth (common_utils.py encode_depth_8bit): uint8 = (clip(d, 0, 50) / 50 * 255) truncated;
  decode_depth_8bit is v / 255 * 50 m. Saved at 1/4 of the camera size
  (config_base.py save_depth_resolution_ratio = 4).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..modalities.base import CodecUse
from ..modalities.depth import QuantizedDepthCodec, depth_metres
from ..modalities.pngs import imencode, is_bytes
from .base import Camera, DatasetCodec, DatasetInfo, Rig
from .garage import FRAME as CARLA_VEHICLE_FRAME

LAYOUT = "lead"
FRAME = CARLA_VEHICLE_FRAME
DEPTH_MAX = 50.0
DEPTH_CODEC = "depth_lead8"
CAMERA_WIDTH = 1152 // 3   # config_base.py camera_calibration "width" of every strip camera

# config_base.py camera_calibration, per target: (carla-wds name, camera number, x, y, z, yaw)
_CAMERAS_3 = (("front_left", 1, 0.1, -0.35, 2.25, -54.5), ("front", 2, 0.35, 0.0, 2.25, 0.0),
              ("front_right", 3, 0.1, 0.35, 2.25, 54.5))
_CAMERAS_6 = (("front_left", 1, 0.0, -0.3, 2.25, -57.5), ("front", 2, 0.25, 0.0, 2.25, 0.0),
              ("front_right", 3, 0.0, 0.3, 2.25, 57.5),
              ("back_right", 4, -0.30, 0.3, 2.25, 180 - 57.5),
              ("back", 5, -0.55, 0.0, 2.25, 180.0),
              ("back_left", 6, -0.30, -0.3, 2.25, -180 + 57.5))


def _rig(rows: tuple, fov: float, size: tuple[int, int]) -> Rig:
    return Rig(cameras=tuple(Camera(n, f"rgb_{k}", "rgb", x, y, z, yaw, fov)
                             for n, k, x, y, z, yaw in rows),
               lidar_mount=(0.0, 0.0, 2.5), radars=("radar1", "radar2", "radar3", "radar4"),
               image_size=size)


RIG = _rig(_CAMERAS_3, 60.0, (384, CAMERA_WIDTH))     # what the expert collects by default
RIG6 = _rig(_CAMERAS_6, 60.0, (384, CAMERA_WIDTH))
# CARLA_LEADERBOARD2_1CAMERA: one 1024 x 512 camera, fov 110 (config_base.py l.216-226)
RIG1 = _rig((("front", 1, -1.5, 0.0, 2.0, 0.0),), 110.0, (512, 1024))


def strip_cameras(n: int) -> tuple[str, ...]:
    """The cameras of a strip of n (metas' sensor_information.num_cameras), left to right;
    ValueError for a count no CARLA target of LEAD has."""
    rigs = {len(r.cameras): r for r in (RIG, RIG6, RIG1)}
    if n not in rigs:
        raise ValueError(f"num_cameras is {n!r}; expected one of {sorted(rigs)} (LEAD's CARLA "
                         "targets: 3 or 6 cameras of 384 px, or one 1024 px camera)")
    return tuple(c.name for c in rigs[n].cameras)


def strip_geometry(size: tuple[int, int]) -> tuple[str, ...] | None:
    """The cameras of a strip of (height, width) px when its geometry says: 3 or 6 cameras
    of 384 x 384 (CAMERA_WIDTH), or the one 1024 x 512 camera; None otherwise (a strip of
    other sizes: the metas' num_cameras says)."""
    h, w = size
    if h == CAMERA_WIDTH and w in (3 * CAMERA_WIDTH, 6 * CAMERA_WIDTH):
        return strip_cameras(w // CAMERA_WIDTH)
    return strip_cameras(1) if (h, w) == RIG1.image_size else None


def rig_of(cameras: tuple[str, ...]) -> Rig:
    """The rig whose cameras these are (3, 6 or 1)."""
    return {3: RIG, 6: RIG6, 1: RIG1}[len(cameras)]


@dataclass(frozen=True)
class DepthLead8Codec(QuantizedDepthCodec):
    """LEAD depth/NNNN.png: v / 255 * 50 m; written (clip(d, 0, 50) / 50 * 255).astype(uint8),
    i.e. truncated (see the module docstring)."""
    name: str = DEPTH_CODEC
    full_scale: float = DEPTH_MAX
    expected: str = "1-channel 8-bit LEAD depth"

    def encode(self, value: Any) -> bytes:
        if is_bytes(value):
            return bytes(value)
        metres = depth_metres(value)
        return imencode((np.clip(metres, 0, DEPTH_MAX) / DEPTH_MAX * 255).astype(np.uint8),
                        "depth")


# lead/common/constants.py SCENARIO_TYPES: a sample's scenario_type_id is its index here
SCENARIO_TYPES = (
    "Accident", "AccidentTwoWays", "BlockedIntersection", "ConstructionObstacle",
    "ConstructionObstacleTwoWays", "ControlLoss", "CrossJunctionDefectTrafficLight",
    "CrossingBicycleFlow", "DynamicObjectCrossing", "EnterActorFlow", "EnterActorFlowV2",
    "HardBreakRoute", "HazardAtSideLane", "HazardAtSideLaneTwoWays", "HighwayCutIn",
    "HighwayExit", "InterurbanActorFlow", "InterurbanAdvancedActorFlow", "InvadingTurn",
    "MergerIntoSlowTraffic", "MergerIntoSlowTrafficV2", "NonSignalizedJunctionLeftTurn",
    "NonSignalizedJunctionLeftTurnEnterFlow", "NonSignalizedJunctionRightTurn", "noScenarios",
    "OppositeVehicleRunningRedLight", "OppositeVehicleTakingPriority", "ParkedObstacle",
    "ParkedObstacleTwoWays", "ParkingCrossingPedestrian", "ParkingCutIn", "ParkingExit",
    "PedestrianCrossing", "PriorityAtJunction", "RedLightWithoutLeadVehicle",
    "SequentialLaneChange", "SignalizedJunctionLeftTurn",
    "SignalizedJunctionLeftTurnEnterFlow", "SignalizedJunctionRightTurn", "StaticCutIn",
    "T_Junction", "VanillaNonSignalizedTurn", "VanillaNonSignalizedTurnEncounterStopsign",
    "VanillaSignalizedTurnEncounterGreenLight", "VanillaSignalizedTurnEncounterRedLight",
    "VehicleOpensDoorTwoWays", "VehicleTurningRoute", "VehicleTurningRoutePedestrian",
    "YieldToEmergencyVehicle", "NA")


INFO = DatasetInfo(
    name=LAYOUT, aliases=("lead_carla", "transfuser_v6", "tfv6"), layouts=(LAYOUT,),
    codecs=(DatasetCodec("depth", CodecUse(DEPTH_CODEC, "float32", (), "m"),
                         DepthLead8Codec()),),
    rig=RIG, doc="kesai-labs/lead@44891760")

__all__ = ["CAMERA_WIDTH", "DEPTH_CODEC", "DEPTH_MAX", "DepthLead8Codec", "FRAME", "INFO",
           "LAYOUT", "RIG", "RIG1", "RIG6", "SCENARIO_TYPES", "rig_of", "strip_cameras",
           "strip_geometry"]
