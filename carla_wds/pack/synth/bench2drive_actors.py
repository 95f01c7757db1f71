"""The boxes bench2drive.py writes besides the ego and the drawn cars: the cases prepare_B2D.py's
box rules decide (Bench2DriveZoo@uniad/vad 10a2e5d; see pack/datasets/bench2drive/boxes.py).
None of them is drawn into the cameras or the LiDAR."""
from __future__ import annotations

import math

import numpy as np

from ...modalities.calibration import carla_matrix
from .garage import CAR_HALF_EXTENT

DT = 0.1
WALKER_SPEED = 1.4       # m/s, across the road; the anno's walker speed is 0 (as B2D's)


def box_corners(cx: float, cy: float, cz: float, yaw: float, half) -> np.ndarray:
    """(8, 3) corners of a yawed box in the frame of its centre's coordinates."""
    c, s = math.cos(yaw), math.sin(yaw)
    sx, sy, sz = np.meshgrid([-1, 1], [-1, 1], [-1, 1], indexing="ij")
    lx, ly, lz = sx.ravel() * half[0], sy.ravel() * half[1], sz.ravel() * half[2]
    return np.stack([cx + c * lx - s * ly, cy + s * lx + c * ly, cz + lz], axis=1)


def _static_entry(cls: str, actor: int, type_id: str, loc: tuple[float, float, float],
                  centre_z: float, yaw: float, half: tuple, ego: tuple[float, float]) -> dict:
    """A box that stands still: a traffic light (its centre the head, off its pole) or a car
    on an overpass. `distance` is to the actor's location, as Bench2Drive writes it."""
    x, y, z = loc
    key = "world2vehicle" if cls == "vehicle" else "world2tl"
    entry = {"class": cls, "id": str(actor), "type_id": type_id, "location": list(loc),
             "rotation": [0.0, 0.0, math.degrees(yaw)], "center": [x, y, centre_z],
             "extent": list(half), "distance": math.dist(loc, (*ego, 0.0)),
             "world_cord": box_corners(x, y, centre_z, yaw, half).tolist(),
             key: np.linalg.inv(carla_matrix(x, y, z, math.degrees(yaw))).tolist()}
    if cls == "vehicle":
        entry.update(state="static", speed=0.0, brake=0.0, num_points=0)
    return entry


def others(sim: dict, episode: int, t: int, ego: tuple[float, float]) -> list[dict]:
    """A walker crossing ahead (anno speed 0), a traffic light whose head is 8 m ahead of
    its pole, 76 m behind the ego (its head within 75 m), a parked car on an overpass 12 m up,
    and a walker in an underpass 5 m down that the depth PNGs hide: the cases prepare_B2D's
    box rules decide (see pack/datasets/bench2drive/boxes.py)."""
    x0, y0, yaw0 = (float(sim[k][0]) for k in ("x", "y", "theta"))
    fwd, left = np.array([math.cos(yaw0), math.sin(yaw0)]), np.array([math.sin(yaw0),
                                                                      -math.cos(yaw0)])
    walk = np.array([x0, y0]) + 18 * fwd + (4 - WALKER_SPEED * DT * t) * left
    wyaw = yaw0 - math.pi / 2
    walker = {"class": "walker", "id": str(3000 + episode), "type_id": "walker.pedestrian.0001",
              "base_type": "walker", "location": [*walk, 0.0],
              "rotation": [0.0, 0.0, math.degrees(wyaw)], "center": [*walk, 0.9],
              "extent": [0.3, 0.3, 0.9], "speed": 0.0, "num_points": 0,
              "world_cord": box_corners(*walk, 0.9, wyaw, (0.3, 0.3, 0.9)).tolist(),
              "distance": math.dist(walk, ego),
              "world2ped": np.linalg.inv(carla_matrix(*walk, 0.0, math.degrees(wyaw))).tolist()}
    pole = np.array([x0, y0]) - 76 * fwd
    light = _static_entry("traffic_light", 4000 + episode, "traffic.traffic_light",
                          (*pole, 0.0), 5.0, yaw0, (0.3, 0.3, 0.6), ego)
    light["center"][:2] = (pole + 8 * fwd).tolist()
    light["world_cord"] = box_corners(*light["center"], yaw0, (0.3, 0.3, 0.6)).tolist()
    bridge = np.array([x0, y0]) + 25 * fwd - 3 * left
    car = _static_entry("vehicle", 5000 + episode, "vehicle.audi.tt", (*bridge, 12.0), 12.75,
                        yaw0, tuple(CAR_HALF_EXTENT[0]), ego)
    under = np.array([x0, y0]) + 20 * fwd - 2 * left   # in an underpass: no camera sees it
    hidden = {**walker, "id": str(6000 + episode), "location": [*under, -5.0],
              "center": [*under, -4.1],
              "world_cord": box_corners(*under, -4.1, wyaw, (0.3, 0.3, 0.9)).tolist(),
              "distance": math.dist((*under, -5.0), (*ego, 0.0)),
              "world2ped": np.linalg.inv(carla_matrix(*under, -5.0, math.degrees(wyaw))).tolist()}
    return [walker, light, car, hidden]


__all__ = ["box_corners", "others"]
