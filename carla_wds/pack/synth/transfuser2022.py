"""Procedural routes in TransFuser 2022's raw on-disk layout (autonomousvision/transfuser@2022).

Reuses world.py's road and ego simulation through garage.simulate at 2 Hz (save_freq =
20 // 2 ticks), and garage's cars, LiDAR returns and BEV drawing. The synthetic (x, y,
theta) are CARLA world x, y and yaw (as in garage); what the expert writes is derived from
them the way its code derives it from the simulator.

Layout written (transfuser@22b3ccd team_code_autopilot/data_agent.py save_sensors, tick,
get_bev_cars; autopilot.py save):
  <root>/Scenario1/Town0K_Scenario1/Town0K_Scenario1_route<ep>_01_01_00_00_00/
    rgb/NNNN.png        left, front, right cameras (fov 60, yaw -60/0/+60) side by side,
                        160x960 (HxW) by default (image_size is the whole strip)
    depth/NNNN.png      CARLA's 24-bit depth of the same strip, saved as data_agent saves it
    semantics/NNNN.png  CARLA class ids (uint8) of the strip
    lidar/NNNN.npy      np.save of the pickled (frame, float32 (N,4) XYZI) tuple, sensor frame
                        (x left, y forward, z up from the LiDAR at (1.3, 0, 2.5), yaw -90)
    topdown/encoded_NNNN.png  15 BEV planes (500x500, 5 px/m, ego-centred) bit-packed by
                        encode_npy_to_pil and written with cv2 (moveaxis(img, 0, 2))
    label_raw/NNNN.json the ego (entry 0, with ego_matrix) and the cars within 50 m, num_points
                        counted in the LiDAR above with the expert's own get_points_in_bbox
    measurements/NNNN.json  autopilot.py save(): GNSS-style x, y, compass theta, ego_matrix, ...
The "Scenario1/Town0K_Scenario1" folder names are [inferred] from the route files
(leaderboard/data/training/routes/Scenario1/Town01_Scenario1.xml) and README's Scenario/Town/Route.
"""
from __future__ import annotations

import io
import json
import logging
import math
from pathlib import Path

import cv2
import numpy as np

from . import world as base
from . import garage as sg

logger = logging.getLogger(__name__)

TF2022_SIZE = (160, 960)   # (height, width), as image_size
TF2022_DT = 0.5                           # save_freq = 20 // 2 ticks of 20 Hz
CAMERA_FOV = 60.0
CAMERA_X = 1.3                            # cameras at (1.3, 0, 2.3)
VIEW_YAWS = (-60.0, 0.0, 60.0)            # left, front, right, concatenated in this order
LIDAR_POS = (1.3, 0.0, 2.5)               # LiDAR and "virtual LiDAR" origin on the vehicle
TOPDOWN_SIZE, TOPDOWN_PPM = 500, 5.0
LABEL_RADIUS = 50.0                       # get_bev_cars: vehicles closer than 50 m
FRAME0 = 480                              # simulator frame of the first save (any int)
FOLDERS = ("rgb", "depth", "semantics", "lidar", "topdown", "label_raw", "measurements")
# encode_npy_to_pil planes: 0 road, 1 lane, 2/3/4 red/yellow/green light, 5 vehicle,
# 6 pedestrian, 10-14 future vehicles (lts_rendering.py, map_utils.py); one saved frame (0.5 s)
# apart here, the step is [inferred]: TF2022's loader reads only planes 0-1 (road, lane)
PLANE_ROAD, PLANE_LANE, PLANE_RED, PLANE_VEHICLE, PLANE_FUTURE = 0, 1, 2, 5, 10
_SEM_ROAD_LIKE = (1, 3, 4)                # garage.bev_semantics: road, lane markings
_SEM_LANE, _SEM_VEHICLE = (3, 4), 9


def route_dir(out_dir: Path, episode: int) -> Path:
    town = f"Town{episode % 5 + 1:02d}_Scenario1"
    return Path(out_dir) / "Scenario1" / town / f"{town}_route{episode}_01_01_00_00_00"


def gnss(x: float, y: float, yaw: float) -> tuple[float, float, float]:
    """World (x, y, yaw) -> what autopilot.py saves: scaled GNSS (latitude ~ -y, longitude ~ x)
    and the IMU compass (0 = north = -y, so yaw + pi/2, in [0, 2 pi)); the same mapping as its
    own `waypoints` field (box_x = -y, box_y = x, yaw + pi/2)."""
    return -y, x, (yaw + math.pi / 2) % (2 * math.pi)


def strip_widths(width: int) -> list[int]:
    """Widths of the left, front and right views that make a strip `width` pixels wide."""
    w = width // 3
    return [w, width - 2 * w, w]


def strip_depth(image_size: tuple[int, int]) -> np.ndarray:
    """Planar depth (m), (height, width), of each view of the strip of image_size (height,
    width): flat ground, sky at 1000 m."""
    height, width = image_size
    return np.concatenate([sg.depth_m(w, height, CAMERA_FOV) for w in strip_widths(width)],
                          axis=1)


def depth_png(metres: np.ndarray) -> bytes:
    """data_agent.py: CARLA's raw BGRA depth [..., :3] (B = high byte, R = low byte of
    round(d / 1000 * (2^24 - 1))), cvtColor RGB2BGR, cv2.imwrite."""
    code = np.rint(np.clip(metres / 1000.0, 0.0, 1.0) * (2 ** 24 - 1)).astype(np.uint32)
    raw_bgr = np.stack([code >> 16, (code >> 8) & 255, code & 255], axis=-1).astype(np.uint8)
    return sg.encode(".png", cv2.cvtColor(raw_bgr, cv2.COLOR_RGB2BGR), "depth")


def encode_npy_to_pil(bev: np.ndarray) -> np.ndarray:
    """map_utils.encode_npy_to_pil, transcribed: plane i of 0-4 into bit 7-i of byte 0, 5-9
    into byte 1, 10-14 into byte 2; (15, H, W) -> (3, H, W) uint8."""
    img = np.zeros((3,) + bev.shape[1:], np.uint8)
    planes = np.ceil(bev).astype(np.uint8)
    for i in range(planes.shape[0]):
        img[i // 5] |= (planes[i] << (8 - i % 5 - 1)).astype(np.uint8)
    return img


def sensor_from_ego(points: np.ndarray) -> np.ndarray:
    """Vehicle frame (forward, right, up from the ground) -> the LiDAR's own frame (left,
    forward, up from the sensor): the inverse of utils.py get_lidar_to_vehicle_transform."""
    f, r, z = points[:, 0], points[:, 1], points[:, 2]
    return np.stack([-r, f - LIDAR_POS[0], z - LIDAR_POS[2]], axis=1)


def points_in_bbox(ego_matrix: np.ndarray, vehicle_matrix: np.ndarray, dx: np.ndarray,
                   lidar: np.ndarray) -> int:
    """data_agent.py get_points_in_bbox, transcribed, its x/y extent swap included (so the
    counts are what the real label_raw holds): sensor-frame points inside the box."""
    tr_lidar_2_ego = np.eye(4)
    tr_lidar_2_ego[:3, :3] = np.array([[0, 1, 0], [-1, 0, 0], [0, 0, 1]], dtype=np.float32)
    tr_lidar_2_ego[:3, 3] = LIDAR_POS
    tr = np.linalg.inv(vehicle_matrix) @ ego_matrix @ tr_lidar_2_ego
    pv = tr[:3, :3] @ lidar[:, :3].T + tr[:3, 3:]
    x, y, z = dx / 2.0
    x, y = y, x
    return int(((pv[0] < x) & (pv[0] > -x) & (pv[1] < y) & (pv[1] > -y)
                & (pv[2] < z) & (pv[2] > -z)).sum())


def relative_position(ego_matrix: np.ndarray, vehicle_matrix: np.ndarray) -> np.ndarray:
    """data_agent.py get_relative_transform: ego frame, y negated, minus the LiDAR offset."""
    rel = ego_matrix[:3, :3].T @ (vehicle_matrix[:3, 3] - ego_matrix[:3, 3])
    rel[1] = -rel[1]
    return rel - np.array(LIDAR_POS)


def _yaw(heading: float) -> float:
    """CARLA reports rotation.yaw in [-180, 180) degrees; radians here."""
    return sg.wrap(heading)


def _entry(matrix: list, dx: np.ndarray, pos: np.ndarray, yaw: float, num_points: int,
           distance: float, speed: float, brake: float, actor_id: int) -> dict:
    return {"class": "Car", "extent": [float(dx[2]), float(dx[0]), float(dx[1])],
            "position": [float(v) for v in pos], "yaw": yaw, "num_points": num_points,
            "distance": distance, "speed": speed, "brake": brake, "id": actor_id,
            "ego_matrix": matrix}


def label_raw(sim: dict, vehicles: list[dict], t: int, ego_id: int,
              lidar: np.ndarray) -> list[dict]:
    """get_bev_cars: entry 0 the ego (height first in `extent`, full sizes), then each car
    within 50 m with its LiDAR hit count; relative yaw is the plain difference of yaws."""
    x, y, theta = (float(sim[k][t]) for k in ("x", "y", "theta"))
    ego_list = sg.carla_matrix(x, y, 0.0, _yaw(theta))
    ego_m = np.array(ego_list)
    ego_dx = np.array(sg.EGO_HALF_EXTENT) * 2.0
    out = [_entry(ego_list, ego_dx, relative_position(ego_m, ego_m), 0, -1, -1,
                  float(sim["speed"][t]), float(sim["controls"][t][2]), ego_id)]
    for car in vehicles:
        cx, cy, heading = float(car["x"][t]), float(car["y"][t]), float(car["heading"][t])
        if math.hypot(cx - x, cy - y) >= LABEL_RADIUS:
            continue
        car_list = sg.carla_matrix(cx, cy, 0.0, _yaw(heading))
        car_m, dx = np.array(car_list), np.array(car["extent"]) * 2.0
        pos = relative_position(ego_m, car_m)
        speed = float(car["speed"][t])
        out.append(_entry(car_list, dx, pos, _yaw(heading) - _yaw(theta),
                          points_in_bbox(ego_m, car_m, dx, lidar), float(np.linalg.norm(pos)),
                          speed, 1.0 if speed < 0.1 else 0.0, car["id"]))
    return out


def ego_boxes(vehicles: list[dict], t: int, pose: tuple[float, float, float],
              frame: int | None = None) -> list[tuple]:
    """Cars at frame `frame` (default t) as (forward, right, yaw, hx, hy, hz) in the ego frame
    of frame t's pose (garage.lidar_points / bev_semantics boxes)."""
    k = t if frame is None else frame
    out = []
    for car in vehicles:
        f, r = sg.to_ego(car["x"][k], car["y"][k], *pose)
        out.append((float(f), float(r), sg.wrap(float(car["heading"][k]) - pose[2]),
                    *car["extent"]))
    return out


def lidar_sweep(rng: np.random.Generator, boxes: list[tuple]) -> np.ndarray:
    """float32 (N, 4) XYZI in the sensor frame: road returns and returns on each car."""
    pts, _ = sg.lidar_points(rng, boxes)
    intensity = rng.uniform(0.0, 1.0, (len(pts), 1))
    return np.concatenate([sensor_from_ego(pts), intensity], axis=1).astype(np.float32)


def lidar_npy(frame_id: int, points: np.ndarray) -> bytes:
    """np.save(path, input_data['lidar'], allow_pickle=True) of the leaderboard's (frame,
    points) tuple: old numpy made it a 2-element object array, which is what np.load gives."""
    obj = np.empty(2, dtype=object)
    obj[0], obj[1] = int(frame_id), points
    buf = io.BytesIO()
    np.save(buf, obj, allow_pickle=True)
    return buf.getvalue()


def topdown_planes(road, pose: tuple[float, float, float], now: list[tuple],
                   future: list[list[tuple]], red_light: bool) -> np.ndarray:
    """(15, 500, 500) uint8 0/1 planes, ego-centred, forward up, right to the right."""
    planes = np.zeros((15, TOPDOWN_SIZE, TOPDOWN_SIZE), np.uint8)
    empty = sg.bev_semantics(road, pose, [], TOPDOWN_SIZE, TOPDOWN_PPM)
    planes[PLANE_ROAD] = np.isin(empty, _SEM_ROAD_LIKE)
    planes[PLANE_LANE] = np.isin(empty, _SEM_LANE)
    for plane, boxes in [(PLANE_VEHICLE, now)] + [(PLANE_FUTURE + i, b)
                                                  for i, b in enumerate(future)]:
        planes[plane] = sg.bev_semantics(road, pose, boxes, TOPDOWN_SIZE,
                                         TOPDOWN_PPM) == _SEM_VEHICLE
    if red_light:   # a 4x4 px light trigger (lts_rendering template ones(4, 4)) 6 m ahead
        row, col = int(TOPDOWN_SIZE / 2 - 6 * TOPDOWN_PPM), TOPDOWN_SIZE // 2
        planes[PLANE_RED, row - 2:row + 2, col - 2:col + 2] = 1
    return planes


def measurement(sim: dict, t: int, n_future: int = 4) -> dict:
    """autopilot.py save(): GNSS x, y and compass theta (see gnss), far route node, the
    expert's own 2 Hz forecast `waypoints` (x, y, theta), controls, flags and ego_matrix."""
    x, y, theta, speed = (float(sim[k][t]) for k in ("x", "y", "theta", "speed"))
    gx, gy, compass = gnss(x, y, theta)
    tx, ty, _ = gnss(*(float(v) for v in sim["target"][t]), 0.0)
    steer, throttle, brake = (float(v) for v in sim["controls"][t])
    road, s_t, hazard = sim["road"], float(sim["s"][t]), str(sim["hazard"][t])
    waypoints = [list(gnss(float(sim["x"][k]), float(sim["y"][k]), float(sim["theta"][k])))
                 for k in range(t + 1, t + 1 + n_future)]
    ax, ay, _ = road.at(np.array([s_t + max(4.0, speed)]))
    af, ar = sg.to_ego(ax[0], ay[0], x, y, theta)
    return {"x": gx, "y": gy, "theta": compass, "speed": speed,
            "target_speed": 0.0 if hazard else float(road.vmax[road.index(s_t)]),
            "x_command": tx, "y_command": ty, "command": int(sim["command"][t]),
            "waypoints": waypoints, "steer": steer, "throttle": throttle, "brake": brake > 0.5,
            "junction": bool(sim["junction"][t]), "vehicle_hazard": hazard == "vehicle",
            "light_hazard": hazard == "light", "walker_hazard": hazard == "walker",
            "stop_sign_hazard": hazard == "stop_sign",
            "angle": math.atan2(float(ar), float(af)) / (math.pi / 2),
            "ego_matrix": sg.carla_matrix(x, y, 0.0, _yaw(theta))}


class StripCamera:
    """The three 60-degree cameras 1.3 m ahead of the vehicle origin, rendered with world.py's
    pinhole renderer (one per view width, one noise stream) and concatenated left to right."""

    def __init__(self, size: tuple[int, int], rng: np.random.Generator) -> None:
        self.views = []
        for w in strip_widths(size[0]):
            view = base._Renderer(w, size[1], rng)
            view.f = w / 2 / math.tan(math.radians(CAMERA_FOV) / 2)
            self.views.append(view)

    def render(self, road, s: float, pose: tuple[float, float, float]) -> np.ndarray:
        x, y, theta = pose
        cam = (x + CAMERA_X * math.cos(theta), y + CAMERA_X * math.sin(theta))
        return np.concatenate([view.render(road, s + CAMERA_X,
                                           (*cam, theta + math.radians(yaw)), "front")
                               for view, yaw in zip(self.views, VIEW_YAWS)], axis=1)


def _write_frame(route: Path, sim: dict, vehicles: list[dict], t: int, camera: StripCamera,
                 lidar_rng: np.random.Generator, depth: bytes, ego_id: int) -> None:
    pose = tuple(float(sim[k][t]) for k in ("x", "y", "theta"))
    boxes = ego_boxes(vehicles, t, pose)
    points = lidar_sweep(lidar_rng, boxes)
    name = f"{t:04d}"
    bgr = camera.render(sim["road"], float(sim["s"][t]), pose)
    (route / "rgb" / f"{name}.png").write_bytes(sg.encode(".png", bgr, "rgb"))
    (route / "depth" / f"{name}.png").write_bytes(depth)
    (route / "semantics" / f"{name}.png").write_bytes(
        sg.encode(".png", sg.semantics_of(bgr), "semantics"))
    (route / "lidar" / f"{name}.npy").write_bytes(lidar_npy(FRAME0 + 10 * t, points))
    future = [ego_boxes(vehicles, t, pose, t + k) for k in range(1, 6)]
    planes = topdown_planes(sim["road"], pose, boxes, future, sim["hazard"][t] == "light")
    (route / "topdown" / f"encoded_{name}.png").write_bytes(
        sg.encode(".png", np.moveaxis(encode_npy_to_pil(planes), 0, 2), "topdown"))
    with open(route / "label_raw" / f"{name}.json", "w") as fh:
        json.dump(label_raw(sim, vehicles, t, ego_id, points), fh, indent=4)
    with open(route / "measurements" / f"{name}.json", "w") as fh:
        json.dump(measurement(sim, t), fh, indent=4)


def _write_episode(route: Path, episode: int, seed: int, frames: int,
                   size: tuple[int, int]) -> None:
    rng = np.random.default_rng([seed, episode, 22])
    sim = sg.simulate(rng, frames, TF2022_DT)
    vehicles = sg.cars(rng, sim, frames + 5)   # 5 future frames for the future-vehicle planes
    camera = StripCamera(size, np.random.default_rng([seed, episode, 23]))
    lidar_rng = np.random.default_rng([seed, episode, 24])
    depth = depth_png(strip_depth((size[1], size[0])))       # flat world: the same every frame
    for folder in FOLDERS:
        (route / folder).mkdir(parents=True, exist_ok=True)
    for t in range(frames):
        _write_frame(route, sim, vehicles, t, camera, lidar_rng, depth, 1000 + episode)


def synth_dataset(out_dir: str | Path, layout: str = "transfuser2022", episodes: int = 4,
                  frames: int = 40, seed: int = 0, image_size: tuple[int, int] | None = None,
                  progress: bool = True) -> list[Path]:
    """Write `episodes` TransFuser 2022 route folders (2 Hz, `frames` frames each) under out_dir
    and return them sorted.

    image_size (height, width) is the whole rgb/depth/semantics strip, default (160, 960)
    (three 160x320 views); the topdown is always 500x500. Byte-identical output for the same
    arguments; ValueError for bad arguments, FileExistsError if a route folder to be written
    already holds files (nothing is overwritten)."""
    size = base.writer_size(layout, "transfuser2022", episodes, frames, seed, image_size,
                            TF2022_SIZE)
    routes = [route_dir(Path(out_dir), ep) for ep in range(int(episodes))]
    return sg.write_routes("transfuser2022", out_dir, routes, lambda route, ep: _write_episode(
        route, ep, int(seed), int(frames), size), frames, size, progress)
