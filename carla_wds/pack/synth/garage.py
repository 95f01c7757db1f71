"""Procedural routes in carla_garage's (TransFuser++) raw on-disk layout, plus shared helpers.

Reuses world.py's road and ego simulation (curving roads, varying speeds, changing commands) at
the garage's 4 Hz. The world is CARLA's: the synthetic (x, y, theta) are used directly as CARLA
world x, y and yaw (rad), which fits world.py's convention (theta + pi/2 is the ego's right, a
right turn makes theta grow), so garage's ego frame R(theta)^T (p - p_ego) is (forward, right).

Layout written (carla_garage@main team_code/data_agent.py save_sensors, autopilot.py save):
  <root>/s1_dataset_2023_05_10/Routes_<stem>_Repetition0/<stem>_route<idx>_01_01_00_00_00/
    rgb/, rgb_augmented/ NNNN.jpg; semantics[_augmented]/, depth[_augmented]/ NNNN.png (uint8);
    bev_semantics[_augmented]/ NNNN.png (256x256, classes 0..10); lidar/NNNN.laz (ego frame);
    boxes/NNNN.json.gz; measurements/NNNN.json.gz; results.json.gz.
The other synthetic layouts (transfuser2022, roach) import the shared helpers from here.
"""
from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Callable

import cv2
import numpy as np
from ...progress import bar as progress_bar   # a terminal's bar, or a few log lines
from ...words import counted

from . import world as base
from .sensors import (  # noqa: F401 - the other writers take them from here too
    GROUND_POINTS, SEM_ROAD, SEM_ROADLINE, SEM_SIDEWALK, SEM_SKY, SEM_TERRAIN, SEM_VEGETATION,
    count_in_box, depth_m, encode, gz_json, laz_bytes, lidar_points, semantics_of)

logger = logging.getLogger(__name__)

GARAGE_DT = 0.25            # s between frames (4 Hz)
GARAGE_SIZE = (256, 1024)   # (height, width), as image_size
BEV_SIZE, BEV_PPM = 256, 4.0
EGO_HALF_EXTENT = (2.44619083404541, 1.0801500082015991, 0.7552500367164612)   # Lincoln MKZ
CAR_HALF_EXTENT = ((2.3, 1.0, 0.75), (2.1, 0.95, 0.8), (2.6, 1.1, 0.9))
ROUTE_STEM = "routes_synth"


# --------------------------------------------------------------------------------------------
# simulation at any rate
# --------------------------------------------------------------------------------------------

def _ego_states_dt(road, s: np.ndarray, offset: np.ndarray, dt: float) -> dict:
    """synth._ego_states with the frame interval as a parameter."""
    cx, cy, hd = road.at(s)
    px, py = cx - offset * np.sin(hd), cy + offset * np.cos(hd)
    dx, dy = np.diff(px), np.diff(py)
    speed = np.hypot(dx, dy) / dt
    theta = hd[:-1] + np.angle(np.exp(1j * (np.arctan2(dy, dx) - hd[:-1])))
    for t in np.flatnonzero(speed < 1e-9):
        theta[t] = theta[t - 1] if t else hd[0]
        speed[t] = 0.0
    x = px[0] + np.concatenate([[0.0], np.cumsum(speed * np.cos(theta) * dt)])
    y = py[0] + np.concatenate([[0.0], np.cumsum(speed * np.sin(theta) * dt)])
    return {"x": x[:-1], "y": y[:-1], "theta": theta, "speed": speed}


def simulate(rng: np.random.Generator, frames: int, dt: float, extra: int = 12) -> dict:
    """Per-frame ego quantities for `frames` frames every dt s, built from world.py's road and
    2 Hz speed profile (arc length interpolated in time: exact, speed is piecewise constant).
    Arrays hold frames + extra entries (future frames for labels), except `s` (one more)."""
    n = frames + extra
    n2 = int(math.ceil((n + 1) * dt / base.DT)) + 2
    length = (n2 + 1) * base.MAX_SPEED * base.DT + base.VIEW["front"][1] + 120.0
    road = base._make_road(rng, length)
    s2, hazard2 = base._speed_profile(rng, road, n2)
    s = np.interp(np.arange(n + 4) * dt, np.arange(n2 + 1) * base.DT, s2)
    ego = _ego_states_dt(road, s, base._lateral_offset(rng, s), dt)   # n + 3 entries
    cmd, junction = base._commands(road, s, n)
    target = base._targets(rng, road, s, ego)
    controls = base._controls(road, s, ego["speed"])
    hazard = np.array([hazard2[min(int(t * dt / base.DT), len(hazard2) - 1)] for t in range(n)])
    out = {k: v[:n] for k, v in ego.items()}
    out.update(s=s[:n + 1], command=cmd, junction=junction, hazard=hazard, target=target[:n],
               controls=controls[:n], road=road, dt=dt)
    return out


def cars(rng: np.random.Generator, sim: dict, n_frames: int) -> list[dict]:
    """2-3 cars near the ego: per frame world pose (x, y, heading), speed, half extent, id."""
    road, s = sim["road"], sim["s"][:n_frames + 1]
    t = np.arange(n_frames + 1) * sim["dt"]
    out = []
    for k in range(int(rng.integers(2, 4))):
        lateral = [0.0, -base.LANE, -base.LANE][k]      # lead car in lane, others alongside
        base_gap = [rng.uniform(12.0, 22.0), rng.uniform(-15.0, 20.0), rng.uniform(6.0, 30.0)][k]
        amp, period = rng.uniform(1.0, 4.0), rng.uniform(8.0, 20.0)
        gap = base_gap + amp * np.sin(2 * math.pi * t / period + rng.uniform(0, 2 * math.pi))
        sc = s + gap
        cx, cy, hd = road.at(sc)
        x, y = cx - lateral * np.sin(hd), cy + lateral * np.cos(hd)
        speed = np.append(np.hypot(np.diff(x), np.diff(y)) / sim["dt"], 0.0)
        out.append({"x": x[:n_frames], "y": y[:n_frames], "heading": hd[:n_frames],
                    "speed": speed[:n_frames], "extent": CAR_HALF_EXTENT[k],
                    "id": int(2000 + 17 * k + int(rng.integers(0, 10)))})
    return out


def wrap(a: float) -> float:
    return float((a + math.pi) % (2 * math.pi) - math.pi)


def carla_matrix(x: float, y: float, z: float, yaw_rad: float) -> list[list[float]]:
    """carla.Transform(Location(x, y, z), Rotation(yaw=deg)).get_matrix(), pitch = roll = 0."""
    c, s = math.cos(yaw_rad), math.sin(yaw_rad)
    return [[c, -s, -0.0, float(x)], [s, c, 0.0, float(y)], [0.0, -0.0, 1.0, float(z)],
            [0.0, 0.0, 0.0, 1.0]]


def to_ego(px, py, ex: float, ey: float, theta: float) -> tuple[np.ndarray, np.ndarray]:
    """World (CARLA axes) -> ego (forward, right): R(theta)^T (p - p_ego)."""
    dx, dy = np.asarray(px) - ex, np.asarray(py) - ey
    c, s = math.cos(theta), math.sin(theta)
    return c * dx + s * dy, -s * dx + c * dy


def write_routes(layout: str, out_dir: str | Path, routes: list[Path],
                 write: Callable[[Path, int], None], frames: int, size: tuple[int, int],
                 progress: bool) -> list[Path]:
    """Write each route with `write(route, episode)` after refusing folders that hold files;
    the routes, sorted. The one loop of every per-route synthetic writer. `size`: the
    renderer's (width, height), logged as HxW."""
    refuse_busy(routes)
    for ep, route in enumerate(progress_bar(routes, desc=f"synth {layout}", unit="route",
                                    disable=not progress)):
        write(route, ep)
    logger.info("wrote %s of %s (%dx%d, HxW) under %s", counted(len(routes), f"{layout} route"),
                counted(frames, "frame"), size[1], size[0], out_dir)   # size: (width, height)
    return sorted(routes)


def refuse_busy(routes: list[Path]) -> None:
    busy = [str(r) for r in routes if r.is_dir() and any(r.iterdir())]
    if busy:
        raise FileExistsError(f"route folders already hold files: {busy[:3]}; "
                              "choose an empty out_dir or remove them")


def bev_semantics(road, pose: tuple[float, float, float], car_boxes: list[tuple],
                  size: int = BEV_SIZE, ppm: float = BEV_PPM) -> np.ndarray:
    """garage-style 256x256 BEV classes (4 px/m, ego-centred, forward = up, right = +column):
    1 road, 2 sidewalk, 3 lane marking, 4 broken lane marking, 9 vehicle."""
    img = np.zeros((size, size), np.uint8)
    x, y, theta = pose
    d2 = (road.x - x) ** 2 + (road.y - y) ** 2
    near = int(np.argmin(d2))
    reach = int(size / ppm / base.DS) + 20
    idx = np.arange(max(near - reach, 0), min(near + reach + 1, len(road.x)))

    def line(offset: float) -> np.ndarray:
        px = road.x[idx] - offset * np.sin(road.heading[idx])
        py = road.y[idx] + offset * np.cos(road.heading[idx])
        fx, ry = to_ego(px, py, x, y, theta)
        uv = np.stack([size / 2 + ppm * ry, size / 2 - ppm * fx], axis=1)
        return np.round(np.clip(uv, -1e4, 1e4) * 16).astype(np.int32)

    mid = -base.LANE / 2
    cv2.polylines(img, [line(mid)], False, 2, int(11.0 * ppm), cv2.LINE_8, shift=4)
    cv2.polylines(img, [line(mid)], False, 1, int(7.0 * ppm), cv2.LINE_8, shift=4)
    for off in (1.5, -5.0):
        cv2.polylines(img, [line(off)], False, 3, 1, cv2.LINE_8, shift=4)
    dashed = line(mid)
    keep = np.mod(idx * base.DS - base.LEAD_IN, 6.0) <= 3.0
    for a in range(0, len(idx) - 1):
        if keep[a] and keep[a + 1]:
            cv2.line(img, tuple(dashed[a]), tuple(dashed[a + 1]), 4, 1, cv2.LINE_8, shift=4)
    for bx, by, yaw, hx, hy, _ in car_boxes:
        c, s = math.cos(yaw), math.sin(yaw)
        corners = np.array([[hx, hy], [hx, -hy], [-hx, -hy], [-hx, hy]])
        fx = bx + c * corners[:, 0] - s * corners[:, 1]
        ry = by + s * corners[:, 0] + c * corners[:, 1]
        poly = np.stack([size / 2 + ppm * ry, size / 2 - ppm * fx], axis=1)
        cv2.fillPoly(img, [np.round(poly * 16).astype(np.int32)], 9, cv2.LINE_8, shift=4)
    return img


# --------------------------------------------------------------------------------------------
# garage
# --------------------------------------------------------------------------------------------

def route_dir(out_dir: Path, episode: int) -> Path:
    town = episode % 5 + 1
    stem = f"{ROUTE_STEM}_town{town:02d}"
    return (Path(out_dir) / "s1_dataset_2023_05_10" / f"Routes_{stem}_Repetition0"
            / f"{stem}_route{episode}_01_01_00_00_00")


_GARAGE_FOLDERS = ("rgb", "rgb_augmented", "semantics", "semantics_augmented", "depth",
                   "depth_augmented", "bev_semantics", "bev_semantics_augmented", "lidar",
                   "boxes", "measurements")


def _next_command(cmd: np.ndarray, t: int) -> int:
    for c in cmd[t + 1:]:
        if c != cmd[t]:
            return int(c)
    return int(cmd[t])


class _GarageEpisode:
    """One garage route, written frame by frame (the random streams are drawn in file order,
    so the output is byte-identical for the same arguments)."""

    def __init__(self, route: Path, episode: int, seed: int, frames: int,
                 size: tuple[int, int]) -> None:
        rng = np.random.default_rng([seed, episode, 7])
        self.route, self.episode, self.sim = route, episode, simulate(rng, frames, GARAGE_DT)
        self.vehicles = cars(rng, self.sim, frames)
        self.renderer = base._Renderer(size[0], size[1], np.random.default_rng([seed, episode, 8]))
        self.aug_rng = np.random.default_rng([seed, episode, 9])
        self.lidar_rng = np.random.default_rng([seed, episode, 10])
        self.depth8 = np.round(np.clip(depth_m(*size) / 1000.0, 0.0, 0.05) * 20 * 255
                               ).astype(np.uint8)
        self.road = self.sim["road"]
        self.walker_side = bool(rng.random() < 0.5)
        for folder in _GARAGE_FOLDERS:
            (route / folder).mkdir(parents=True, exist_ok=True)

    def frame(self, t: int) -> None:
        sim = self.sim
        x, y, theta, speed = (float(sim[k][t]) for k in ("x", "y", "theta", "speed"))
        trans, rot = (0.0, 0.0) if t == 0 else (float(self.aug_rng.uniform(-1.0, 1.0)),
                                                 float(self.aug_rng.uniform(-5.0, 5.0)))
        boxes_ego = [(*(float(v) for v in to_ego(car["x"][t], car["y"][t], x, y, theta)),
                      wrap(float(car["heading"][t]) - theta), *car["extent"])
                     for car in self.vehicles]
        pts, counts = lidar_points(self.lidar_rng, boxes_ego)
        entries = self._boxes(t, (x, y, theta), speed, boxes_ego, counts)
        meas = self._measurement(t, (x, y, theta), speed, trans, rot)
        name = f"{t:04d}"
        self._cameras(t, name, (x, y, theta), boxes_ego, trans, rot)
        (self.route / "lidar" / f"{name}.laz").write_bytes(laz_bytes(pts))
        (self.route / "boxes" / f"{name}.json.gz").write_bytes(gz_json(entries))
        (self.route / "measurements" / f"{name}.json.gz").write_bytes(gz_json(meas))

    def _boxes(self, t: int, pose: tuple[float, float, float], speed: float,
               boxes_ego: list[tuple], counts: list[int]) -> list[dict]:
        """boxes/NNNN.json.gz: the ego, cars within 40 m, a walker, the hazard's light/sign."""
        (x, y, theta), sim, ep = pose, self.sim, self.episode
        brake = float(sim["controls"][t][2])
        entries = [{"class": "ego_car", "extent": list(EGO_HALF_EXTENT),
                    "position": [0.0, 0.0, 0.0], "yaw": 0.0, "num_points": -1,
                    "distance": -1, "speed": speed, "brake": brake > 0.5, "id": int(1000 + ep),
                    "matrix": carla_matrix(x, y, 0.0, theta)}]
        for car, box, n in zip(self.vehicles, boxes_ego, counts):
            dist = math.hypot(box[0], box[1])
            if dist > 40.0:
                continue
            entries.append({"class": "car", "extent": list(car["extent"]),
                            "position": [box[0], box[1], 0.0], "yaw": box[2], "num_points": n,
                            "distance": dist, "speed": float(car["speed"][t]),
                            "brake": bool(car["speed"][t] < 0.1), "id": car["id"],
                            "matrix": carla_matrix(car["x"][t], car["y"][t], 0.0,
                                                   float(car["heading"][t]))})
        if self.walker_side:
            wx, wy, wh = self.road.at(np.array([sim["s"][t] + 12.0]))
            wx, wy = wx[0] - 4.5 * math.sin(wh[0]), wy[0] + 4.5 * math.cos(wh[0])
            fx, ry = to_ego(wx, wy, x, y, theta)
            entries.append({"class": "walker", "extent": [0.25, 0.25, 0.9],
                            "position": [float(fx), float(ry), 0.0],
                            "yaw": wrap(float(wh[0]) + math.pi / 2 - theta),
                            "num_points": 0, "distance": float(math.hypot(fx, ry)),
                            "speed": 1.2, "id": int(5000 + ep),
                            "matrix": carla_matrix(wx, wy, 0.0, float(wh[0]) + math.pi / 2)})
        return entries + self._hazard_boxes(str(sim["hazard"][t]), pose)

    def _hazard_boxes(self, hazard: str, pose: tuple[float, float, float]) -> list[dict]:
        x, y, theta = pose
        out = []
        for kind, ahead, extra in (("light", 6.0, {"state": "Red"}), ("stop_sign", 5.0, {})):
            if hazard == kind:
                out.append({"class": "traffic_light" if kind == "light" else kind,
                            "extent": [1.5, 1.75, 1.0], "position": [ahead, 0.0, 0.0],
                            "yaw": 0.0, "distance": ahead, **extra,
                            "id": int((6000 if kind == "light" else 7000) + self.episode),
                            "affects_ego": True,
                            "matrix": carla_matrix(x + ahead * math.cos(theta),
                                                   y + ahead * math.sin(theta), 0.0, theta)})
        return out

    def _measurement(self, t: int, pose: tuple[float, float, float], speed: float,
                     trans: float, rot: float) -> dict:
        """measurements/NNNN.json.gz, as carla_garage's autopilot saves it."""
        (x, y, theta), sim, road = pose, self.sim, self.road
        steer, throttle, brake = (float(v) for v in sim["controls"][t])
        hazard = str(sim["hazard"][t])
        tx, ty = (float(v) for v in sim["target"][t])
        s_t = float(sim["s"][t])
        rx, ry_ = road.at(s_t + np.arange(1, 21) * 1.0)[:2]
        route_fx, route_ry = to_ego(rx, ry_, x, y, theta)
        tgt_s = float(np.arange(len(road.x))[np.argmin((road.x - tx) ** 2 + (road.y - ty) ** 2)]
                      * base.DS - base.LEAD_IN)
        nx, ny = (float(v[0]) for v in road.at(np.array([tgt_s + 30.0]))[:2])
        ax, ay = (float(v[0]) for v in road.at(np.array([s_t + max(3.5, 0.8 * speed + 2.0)]))[:2])
        aim_f, aim_r = to_ego(ax, ay, x, y, theta)
        return {
            "pos_global": [x, y], "theta": theta, "speed": speed,
            "target_speed": self._target_speed(t, hazard),
            "target_point": [float(v) for v in to_ego(tx, ty, x, y, theta)],
            "target_point_next": [float(v) for v in to_ego(nx, ny, x, y, theta)],
            "aim_wp": [float(v) for v in to_ego(ax, ay, x, y, theta)],
            "route": [[float(a), float(b)] for a, b in zip(route_fx, route_ry)],
            "command": int(sim["command"][t]),
            "next_command": _next_command(sim["command"], t),
            "steer": steer, "throttle": throttle, "brake": brake > 0.5,
            "control_brake": brake > 0.5, "junction": bool(sim["junction"][t]),
            "vehicle_hazard": hazard == "vehicle", "light_hazard": hazard == "light",
            "walker_hazard": hazard == "walker", "stop_sign_hazard": hazard == "stop_sign",
            "stop_sign_close": hazard == "stop_sign", "walker_close": hazard == "walker",
            "angle": float(math.atan2(float(aim_r), float(aim_f))) / (math.pi / 2),
            "augmentation_translation": trans, "augmentation_rotation": rot,
            "ego_matrix": carla_matrix(x, y, 0.0, theta),
        }

    def _target_speed(self, t: int, hazard: str) -> float:
        """carla_garage's autopilot (1448bed autopilot.py l.278-283, config.py l.33-36): 2 m/s
        with a walker or stop sign close, 5 in a junction, else 8. Its loader's speed classes
        stop there (config.py l.144-148: bins 2.1, 5.1, 8.1, four classes), so the road's
        comfortable speed (up to 10 m/s) would label class 4; braking is the brake flag."""
        if hazard in ("walker", "stop_sign"):
            return 2.0
        return 5.0 if bool(self.sim["junction"][t]) else 8.0

    def _cameras(self, t: int, name: str, pose: tuple[float, float, float],
                 boxes_ego: list[tuple], trans: float, rot: float) -> None:
        """rgb, semantics, depth and bev_semantics, and their twins seen from the camera
        shifted by `trans` m and turned by `rot` degrees."""
        x, y, theta = pose
        aug_pose = (x - trans * math.sin(theta), y + trans * math.cos(theta),
                    theta + math.radians(rot))
        aug_boxes = [(*(float(v) for v in to_ego(car["x"][t], car["y"][t], *aug_pose)),
                      wrap(float(car["heading"][t]) - aug_pose[2]), *car["extent"])
                     for car in self.vehicles]
        s_t, route = float(self.sim["s"][t]), self.route
        for suffix, at, bxs in (("", pose, boxes_ego), ("_augmented", aug_pose, aug_boxes)):
            bgr = self.renderer.render(self.road, s_t, at, "front")
            (route / f"rgb{suffix}" / f"{name}.jpg").write_bytes(encode(".jpg", bgr, "rgb"))
            (route / f"semantics{suffix}" / f"{name}.png").write_bytes(
                encode(".png", semantics_of(bgr), "semantics"))
            (route / f"depth{suffix}" / f"{name}.png").write_bytes(
                encode(".png", self.depth8, "depth"))
            (route / f"bev_semantics{suffix}" / f"{name}.png").write_bytes(
                encode(".png", bev_semantics(self.road, at, bxs), "bev"))

    def results(self) -> None:
        score = 60.0 if self.episode % 4 == 3 else 100.0
        (self.route / "results.json.gz").write_bytes(gz_json({"scores": {
            "score_composed": score, "score_route": score, "score_penalty": 1.0}}))


def _write_garage_episode(route: Path, episode: int, seed: int, frames: int,
                          size: tuple[int, int]) -> None:
    episode_writer = _GarageEpisode(route, episode, seed, frames, size)
    for t in range(frames):
        episode_writer.frame(t)
    episode_writer.results()


def synth_dataset(out_dir: str | Path, layout: str = "garage", episodes: int = 4,
                  frames: int = 40, seed: int = 0, image_size: tuple[int, int] | None = None,
                  progress: bool = True) -> list[Path]:
    """Write `episodes` carla_garage route folders (4 Hz, `frames` frames each) under out_dir.

    image_size (height, width) of the rgb/semantics/depth cameras, default (256, 1024). Route idx
    % 4 == 3 gets score_composed 60 in results.json.gz (the garage loader skips it), the others
    100. Byte-identical output for the same arguments; FileExistsError if a route folder to be
    written already holds files."""
    size = base.writer_size(layout, "garage", episodes, frames, seed, image_size, GARAGE_SIZE)
    routes = [route_dir(Path(out_dir), ep) for ep in range(int(episodes))]
    return write_routes("garage", out_dir, routes, lambda route, ep: _write_garage_episode(
        route, ep, int(seed), int(frames), size), frames, size, progress)
