"""The shared synthetic world: a procedural CARLA-like road, the ego's drive along it, and a
pinhole renderer of it; each dataset's writer (tcp.py, garage.py, ...) lays it out on disk.

Lets the whole toolkit (pack, load, train, visualise) run without a simulator. Each episode is a
road made of straights, junction crossings, junction turns and gentle bends; the ego follows its
lane at 2 Hz with smooth speed changes and stops, and every camera sees the road rendered with a
pinhole model, so the future path is visible in the front image.

World frame convention, as in real TCP data (formats.md, TCP's label formulas): the ego moves by
speed * (cos theta, sin theta), and in TCP's ego frame R.T @ d with R = rot(pi/2 + theta) the
lateral axis +x is the ego's RIGHT (TCP's PID steers right for aim x > 0). So theta + pi/2 points
to the ego's right: a RIGHT turn makes theta grow, and the left camera looks along theta - pi/2.
"""
from __future__ import annotations

import math

import cv2
import numpy as np

from ...schema import RoadOption
from .road import (  # noqa: F401 (re-exported: the writers take them from here)
    DS, LEAD_IN, MAX_SPEED, _BEND, _JUNCTION, _Road, _STRAIGHT, _TURN, _make_road, _segments)

# Yaw offset of each camera from the ego heading; +pi/2 is the ego's right (see module doc).
CAMERA_YAW: dict[str, float] = {"front": 0.0, "right": math.pi / 2, "left": -math.pi / 2,
                                "rear": math.pi}
# plain ints, as CARLA writes them into measurements
LEFT, RIGHT, STRAIGHT, LANEFOLLOW = (int(o) for o in (RoadOption.LEFT, RoadOption.RIGHT,
                                                      RoadOption.STRAIGHT, RoadOption.LANEFOLLOW))

DT = 0.5                 # s between frames (2 Hz)
FOV_DEG = 100.0
CAMERA_HEIGHT = 1.6      # m
NEAR_CLIP = 0.5          # m; ground points closer than this to a camera plane are clipped
LANE = 3.5               # m; the ego drives in the right lane of a two-lane (7 m) road
VIEW = {"front": (3.0, 100.0), "rear": (100.0, 3.0), "left": (40.0, 40.0),
        "right": (40.0, 40.0)}   # m of road drawn (behind, ahead) of the ego per camera

# BGR colours stay <= 247 so adding the 0..8 texture noise cannot overflow uint8.
_ROAD, _MARK, _EDGE = (92, 94, 96), (226, 228, 228), (205, 208, 208)


def _speed_profile(rng: np.random.Generator, road: _Road, n: int) -> tuple[np.ndarray, list[str]]:
    """Arc length s[0..n] of the ego and the hazard causing each frame's stop ('' if none)."""
    s, u = np.zeros(n + 1), 0.0   # the ego starts at rest, like a CARLA route
    hazard, reason, hold = [""] * n, "", 0
    for t in range(n):
        if not reason and u > 3.0 and rng.random() < 0.04:
            reason = str(rng.choice(["vehicle", "light", "walker", "stop_sign"]))
        lo, hi = road.index(s[t]), road.index(s[t] + 25.0)
        # Aiming at the slowest segment 25 m ahead makes the ego brake before turns.
        desired = 0.0 if reason else float(road.vmax[lo:hi + 1].min())
        hazard[t] = reason
        s[t + 1] = s[t] + u * DT
        u_next = float(np.clip(u + np.clip(desired - u, -2.0, 1.0), 0.0, MAX_SPEED))
        if reason and u == 0.0:
            hold = hold or int(rng.integers(2, 6))
            hold -= 1
            reason = reason if hold else ""
        u = u_next
    return s, hazard


def _lateral_offset(rng: np.random.Generator, s: np.ndarray) -> np.ndarray:
    """Smooth drift of the ego off its lane centre, a function of arc length so stops stay put."""
    # Long wavelengths keep the heading wobble this causes under ~3 degrees.
    amp = rng.uniform([0.1, 0.05], [0.3, 0.2])
    wave = rng.uniform([50.0, 120.0], [120.0, 250.0])
    phase = rng.uniform(0.0, 2 * math.pi, 2)
    return sum(a * np.sin(2 * math.pi * s / w + p) for a, w, p in zip(amp, wave, phase))


def _ego_states(road: _Road, s: np.ndarray, offset: np.ndarray) -> dict[str, np.ndarray]:
    """x, y, theta, speed for frames 0..len(s)-2, exact under x += speed * cos(theta) * DT."""
    cx, cy, hd = road.at(s)
    px, py = cx - offset * np.sin(hd), cy + offset * np.cos(hd)   # +offset: to the right
    dx, dy = np.diff(px), np.diff(py)
    speed = np.hypot(dx, dy) / DT
    # Heading = direction to the next position, unwrapped around the road heading.
    theta = hd[:-1] + np.angle(np.exp(1j * (np.arctan2(dy, dx) - hd[:-1])))
    for t in np.flatnonzero(speed < 1e-9):
        theta[t] = theta[t - 1] if t else hd[0]   # a stopped car keeps its heading
        speed[t] = 0.0
    x = px[0] + np.concatenate([[0.0], np.cumsum(speed * np.cos(theta) * DT)])
    y = py[0] + np.concatenate([[0.0], np.cumsum(speed * np.sin(theta) * DT)])
    return {"x": x[:-1], "y": y[:-1], "theta": theta, "speed": speed}


def _commands(road: _Road, s: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """RoadOption per frame (for a turn ongoing or starting within ~3 frames), junction flags."""
    cmd, junction = np.full(n, LANEFOLLOW), np.zeros(n, bool)
    for t in range(n):
        # At least 8 m of look-ahead so a car waiting before a junction already knows the turn.
        here = road.index(s[t])
        kinds = road.kind[here:road.index(s[t] + max(s[t + 3] - s[t], 8.0)) + 1]
        junction[t] = road.kind[here] in (_JUNCTION, _TURN)
        turns = np.flatnonzero(kinds == _TURN)
        if turns.size:
            cmd[t] = RIGHT if road.curv[here + turns[0]] > 0 else LEFT
        elif (kinds == _JUNCTION).any():
            cmd[t] = STRAIGHT
    return cmd, junction


def _targets(rng: np.random.Generator, road: _Road, s: np.ndarray,
             ego: dict[str, np.ndarray]) -> np.ndarray:
    """Sparse route points 20-35 m apart, each held until the ego is within 5 m of it."""
    road_end = (len(road.x) - 1) * DS - LEAD_IN
    route_s = np.minimum(np.cumsum(rng.uniform(20.0, 35.0, int(road_end / 20.0) + 2)), road_end)
    rx, ry, _ = road.at(route_s)
    out, k = np.zeros((len(ego["x"]), 2)), 0
    for t, (x, y) in enumerate(zip(ego["x"], ego["y"])):
        while k < len(route_s) - 1 and (math.hypot(rx[k] - x, ry[k] - y) < 5.0
                                        or route_s[k] < s[t]):
            k += 1
        out[t] = rx[k], ry[k]
    return out


def _controls(road: _Road, s: np.ndarray, speed: np.ndarray) -> np.ndarray:
    """steer (CARLA: + is right), throttle, brake matching the curvature and speed profile."""
    curv = road.curv[[road.index(v) for v in s[:len(speed)]]]
    steer = np.clip(curv * 2.9 / 0.7, -1.0, 1.0)   # wheelbase 2.9 m, max wheel angle 0.7 rad
    dv = np.diff(np.append(speed, speed[-1]))
    braking = (dv < -0.25) | ((speed == 0.0) & (dv <= 0.0))
    throttle = np.where(braking, 0.0, np.clip(0.35 + 0.4 * dv + 0.02 * speed, 0.0, 0.75))
    return np.stack([steer, throttle, braking.astype(float)], axis=1)


def _simulate(rng: np.random.Generator, frames: int) -> dict[str, np.ndarray]:
    """All per-frame quantities of one episode (plus the road, under key 'road')."""
    extra = 4   # simulated past the last frame so late frames still get commands and targets
    length = (frames + extra + 1) * MAX_SPEED * DT + VIEW["front"][1] + 60.0
    road = _make_road(rng, length)
    s, hazard = _speed_profile(rng, road, frames + extra)
    ego = _ego_states(road, s, _lateral_offset(rng, s))
    cmd, junction = _commands(road, s, frames)
    out = {k: v[:frames] for k, v in ego.items()}
    out.update(s=s[:frames], command=cmd, junction=junction, hazard=np.array(hazard[:frames]),
               target=_targets(rng, road, s, ego)[:frames],
               controls=_controls(road, s, ego["speed"])[:frames], road=road)
    return out


def _clip_near(lat: np.ndarray, z: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Sutherland-Hodgman against the plane z = NEAR_CLIP, vectorised over the polygon's edges."""
    inside = z > NEAR_CLIP
    if inside.all():
        return lat, z
    if not inside.any():
        return None
    lat2, z2 = np.roll(lat, -1), np.roll(z, -1)
    cross = inside != np.roll(inside, -1)
    with np.errstate(divide="ignore", invalid="ignore"):
        k = np.where(cross, (NEAR_CLIP - z) / (z2 - z), 0.0)
    # Each edge emits its start vertex if inside, then its crossing point if it crosses.
    keep = np.stack([inside, cross], axis=1).ravel()
    lat_out = np.stack([lat, lat + k * (lat2 - lat)], axis=1).ravel()[keep]
    z_out = np.stack([z, np.full_like(z, NEAR_CLIP)], axis=1).ravel()[keep]
    return lat_out, z_out


def _background(width: int, height: int) -> np.ndarray:
    """Sky gradient above the horizon (pitch 0: the middle row), grass gradient below."""
    horizon = height // 2
    sky = np.linspace([215, 165, 115], [240, 225, 205], horizon)
    grass = np.linspace([95, 128, 112], [58, 118, 72], height - horizon)
    rows = np.concatenate([sky, grass]).astype(np.uint8)
    return np.ascontiguousarray(np.broadcast_to(rows[:, None, :], (height, width, 3)))


class _Renderer:
    """Pinhole renderer of the flat road world for one image size and one noise stream."""

    def __init__(self, width: int, height: int, rng: np.random.Generator) -> None:
        self.f = width / 2 / math.tan(math.radians(FOV_DEG) / 2)
        self.centre = (width / 2, height / 2)
        self.background = _background(width, height)
        self.rng = rng

    def render(self, road: _Road, s: float, pose: tuple[float, float, float],
               camera: str, view: tuple[float, float] | None = None) -> np.ndarray:
        """BGR image seen by `camera` of an ego at arc length s and pose (x, y, theta); `view`
        (m of road behind, ahead) overrides the camera's own, for rigs other than these four."""
        yaw = pose[2] + CAMERA_YAW[camera]
        behind, ahead = view or VIEW[camera]
        idx = np.arange(road.index(s - behind), road.index(s + ahead) + 1)
        dx, dy = road.x[idx] - pose[0], road.y[idx] - pose[1]
        geo = (dx * math.cos(yaw) + dy * math.sin(yaw),       # depth along the optical axis
               -dx * math.sin(yaw) + dy * math.cos(yaw),      # lateral, + to the image right
               np.sin(yaw - road.heading[idx]),               # the road's right normal, in
               np.cos(yaw - road.heading[idx]))               # camera (depth, lateral)
        # fillPoly is even-odd, so a road crossing itself would leave holes: draw it in 20 m
        # pieces (too short to self-overlap), overlapping by a sample to hide anti-alias seams.
        whole = [(a, min(a + 42, len(idx))) for a in range(0, len(idx) - 1, 40)]
        dash = np.mod(idx * DS - LEAD_IN, 6.0) <= 3.0   # 3 m dashes every 6 m, fixed to the world
        edges = np.flatnonzero(np.diff(dash.astype(np.int8))) + 1
        runs = zip(np.concatenate([[0], edges]), np.concatenate([edges, [len(idx)]]))
        dashes = [(a, b) for a, b in runs if dash[a] and b - a > 1]
        img = self.background.copy()
        layers = (([-7.25, 3.75], whole, (150, 156, 160)),             # sidewalks
                  ([-LANE * 1.5, LANE / 2], whole, _ROAD),             # two-lane road
                  ([1.45, 1.6], whole, _EDGE), ([-5.1, -4.95], whole, _EDGE),
                  ([-LANE / 2 - 0.08, -LANE / 2 + 0.08], dashes, _MARK))   # lane divider
        for (lo, hi), pieces, colour in layers:
            for poly in self._band(geo, pieces, lo, hi):
                cv2.fillPoly(img, [poly], colour, lineType=cv2.LINE_AA, shift=4)
        # Texture noise keeps PNGs realistic in size; base colours leave headroom for it.
        img += self.rng.integers(0, 9, img.shape, dtype=np.uint8)
        return img

    def _band(self, geo: tuple, pieces: list[tuple[int, int]], lo: float,
              hi: float) -> list[np.ndarray]:
        """Projected polygons of the ground band at lateral offsets lo..hi, one per piece a:b."""
        z, lat, nz, nlat = geo
        zs, lats = (z + lo * nz, z + hi * nz), (lat + lo * nlat, lat + hi * nlat)
        inside = (zs[0] > NEAR_CLIP) & (zs[1] > NEAR_CLIP)
        uv = [self._project(la, np.maximum(zz, NEAR_CLIP)) for la, zz in zip(lats, zs)]
        polys = []
        for a, b in pieces:
            if inside[a:b].all():   # the common case: no clipping, reuse the projection
                polys.append(np.concatenate([uv[0][a:b], uv[1][a:b][::-1]]))
                continue
            clipped = _clip_near(np.concatenate([lats[0][a:b], lats[1][a:b][::-1]]),
                                 np.concatenate([zs[0][a:b], zs[1][a:b][::-1]]))
            if clipped is not None:
                polys.append(self._project(*clipped))
        return polys

    def _project(self, lat: np.ndarray, z: np.ndarray) -> np.ndarray:
        """Ground points (lateral, depth > 0) -> int32 pixel coordinates with 4 fractional bits."""
        uv = np.stack([self.centre[0] + self.f * lat / z,
                       self.centre[1] + self.f * CAMERA_HEIGHT / z], axis=1)
        return np.round(np.clip(uv, -1e6, 1e6) * 16).astype(np.int32)


def check_args(episodes: int, frames: int, seed: int, image_size: tuple[int, int] | None) -> None:
    """ValueError naming the first bad argument of a writer (the layout is the registry's)."""
    for name, value in (("episodes", episodes), ("frames", frames)):
        if int(value) != value or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    if int(seed) != seed or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    if image_size is not None and (len(image_size) != 2 or min(image_size) < 8
                                   or any(int(v) != v for v in image_size)):
        raise ValueError(f"image_size must be (height, width), integers >= 8, got {image_size!r}")


def writer_size(layout: str, writes: str, episodes: int, frames: int, seed: int,
                image_size: tuple[int, int] | None,
                default: tuple[int, int]) -> tuple[int, int]:
    """The (width, height) a one-layout writer draws at, from image_size (height, width), else
    its default (height, width), after refusing another layout and bad arguments (ValueError) -
    before anything is written."""
    if layout != writes:
        raise ValueError(f"this writer writes layout {writes!r}, not {layout!r}")
    return draw_size(episodes, frames, seed, image_size, default)


def draw_size(episodes: int, frames: int, seed: int, image_size: tuple[int, int] | None,
              default: tuple[int, int]) -> tuple[int, int]:
    """image_size (height, width), else default (height, width), checked with the other
    arguments (ValueError) -> the (width, height) the renderer and the sensors draw at."""
    check_args(episodes, frames, seed, image_size)
    height, width = (int(v) for v in (image_size or default))
    return width, height
