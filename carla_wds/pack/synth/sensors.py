"""Synthetic sensor data shared by the synthetic writers: LiDAR sweeps (with the points each
box holds) as LAZ, CARLA semantic ids and planar depth of a render, image and gzip-JSON bytes.
"""
from __future__ import annotations

import datetime
import gzip
import io
import json
import math

import cv2
import numpy as np

from . import world as base

# CARLA 0.9.10 semantic ids used by the image segmentations
SEM_ROADLINE, SEM_ROAD, SEM_SIDEWALK, SEM_VEGETATION, SEM_SKY, SEM_TERRAIN = 6, 7, 8, 9, 13, 22
_SEM_COLOURS = ((base._ROAD, SEM_ROAD), (base._MARK, SEM_ROADLINE), (base._EDGE, SEM_ROADLINE),
                ((150, 156, 160), SEM_SIDEWALK))


# --------------------------------------------------------------------------------------------
# LiDAR
# --------------------------------------------------------------------------------------------

# Returns of a 64-channel CARLA LiDAR at 600k points/s and 10 Hz (Bench2Drive's and carla_garage's
# setting): tens of thousands of points a sweep, most on the ground. A realistic count matters:
# LiDAR decode is what a loader's time goes to (docs/benchmarks.md).
GROUND_POINTS = 30000


def lidar_points(rng: np.random.Generator, boxes: list[tuple], n_ground: int = GROUND_POINTS,
                 car_density: float = 25.0) -> tuple[np.ndarray, list[int]]:
    """Ego-frame (x forward, y right, z up; origin at the vehicle on the ground) LiDAR points:
    road-plane returns around the ego and returns on the sides/top of each car box.

    boxes: (x, y, yaw, hx, hy, hz) in the ego frame, box origin on the ground (z 0), spanning
    z in [0, 2 hz]. Returns (N, 3) float64 and, per box, the number of points with
    |local x| < hx, |local y| < hy, |z| < hz (the box as stored: ground-level centre)."""
    r = np.sqrt(rng.uniform(3.0 ** 2, 32.0 ** 2, n_ground))
    a = rng.uniform(-math.pi, math.pi, n_ground)
    ground = np.stack([r * np.cos(a), r * np.sin(a), rng.normal(0.0, 0.02, n_ground)], axis=1)
    keep = np.ones(len(ground), bool)
    parts, counts = [], []
    for bx, by, yaw, hx, hy, hz in boxes:
        c, s = math.cos(yaw), math.sin(yaw)
        lx = c * (ground[:, 0] - bx) + s * (ground[:, 1] - by)
        ly = -s * (ground[:, 0] - bx) + c * (ground[:, 1] - by)
        keep &= ~((np.abs(lx) < hx + 0.3) & (np.abs(ly) < hy + 0.3))   # hidden under the car
        dist = math.hypot(bx, by)
        n = int(np.clip(car_density * 400.0 / max(dist, 4.0) ** 1.2, 40, 400))
        face = rng.integers(0, 5, n)   # 0 front, 1 back, 2 right, 3 left, 4 roof
        u, w = rng.uniform(-0.98, 0.98, n), rng.uniform(-0.98, 0.98, n)
        v = rng.uniform(0.02, 0.98, n)
        v = np.where(np.abs(v - 0.5) < 0.01, v + 0.02, v)   # clear of the box top (z = hz)
        local = np.stack([np.select([face == 0, face == 1], [0.98, -0.98], u) * hx,
                          np.select([face == 2, face == 3, face == 4], [0.98, -0.98, w], u) * hy,
                          np.where(face == 4, 0.98, v) * 2 * hz], axis=1)
        pts = np.stack([bx + c * local[:, 0] - s * local[:, 1],
                        by + s * local[:, 0] + c * local[:, 1], local[:, 2]], axis=1)
        parts.append(pts)
    pts = np.concatenate([ground[keep], *parts]) if parts else ground
    lo = pts.min(axis=0)
    pts = lo + np.round((pts - lo) / 0.001) * 0.001   # on the LAZ grid, so counts survive it
    for bx, by, yaw, hx, hy, hz in boxes:
        counts.append(count_in_box(pts, (bx, by, 0.0), yaw, (hx, hy, hz)))
    return pts, counts


def count_in_box(points: np.ndarray, centre, yaw: float, half) -> int:
    """Points (N, 3) strictly inside the yawed box (same frame as the points)."""
    c, s = math.cos(yaw), math.sin(yaw)
    d = points[:, :3] - np.asarray(centre, dtype=np.float64)
    lx, ly = c * d[:, 0] + s * d[:, 1], -s * d[:, 0] + c * d[:, 1]
    return int(((np.abs(lx) < half[0]) & (np.abs(ly) < half[1]) & (np.abs(d[:, 2]) < half[2])).sum())


def laz_bytes(points: np.ndarray) -> bytes:
    """LAZ (laspy point format 0, scale 0.001, offset = per-frame min), fixed header dates."""
    import laspy
    header = laspy.LasHeader(point_format=0, version="1.2")
    header.offsets = np.min(points, axis=0)
    header.scales = np.array([0.001, 0.001, 0.001])
    header.creation_date = datetime.date(2023, 5, 10)
    header.generating_software = "carla_wds synth"
    header.system_identifier = "carla_wds"
    las = laspy.LasData(header)
    las.x, las.y, las.z = points[:, 0], points[:, 1], points[:, 2]
    buf = io.BytesIO()
    las.write(buf, do_compress=True)
    return buf.getvalue()


# --------------------------------------------------------------------------------------------
# images
# --------------------------------------------------------------------------------------------

def semantics_of(bgr: np.ndarray) -> np.ndarray:
    """CARLA class ids of a synth render: nearest base colour, else sky / terrain by row."""
    h = bgr.shape[0]
    out = np.where((np.arange(h) < h // 2)[:, None], SEM_SKY, SEM_TERRAIN).astype(np.uint8)
    out = np.broadcast_to(out, bgr.shape[:2]).copy()
    for colour, cls in _SEM_COLOURS:
        # |pixel - 4 - colour| <= 6 in every channel (the texture noise is U{0..8}), that is
        # colour - 2 <= pixel <= colour + 10: one cv2.inRange, not an int16 copy and a max
        lo, hi = ([min(max(c + d, 0), 255) for c in colour] for d in (-2, 10))
        out[cv2.inRange(np.ascontiguousarray(bgr), np.array(lo, np.uint8),
                        np.array(hi, np.uint8)) > 0] = cls
    return out


def depth_m(width: int, height: int, fov_deg: float = base.FOV_DEG) -> np.ndarray:
    """Planar depth (m) of the flat ground under a pitch-0 camera at CAMERA_HEIGHT; sky 1000 m."""
    f = width / 2 / math.tan(math.radians(fov_deg) / 2)
    v = np.arange(height) + 0.5 - height / 2
    d = np.where(v > 0, f * base.CAMERA_HEIGHT / np.maximum(v, 1e-6), 1000.0)
    return np.broadcast_to(np.minimum(d, 1000.0)[:, None], (height, width)).copy()


def encode(ext: str, img: np.ndarray, what: str) -> bytes:
    ok, buf = cv2.imencode(ext, img)
    if not ok:
        raise RuntimeError(f"cv2 could not encode {what}")
    return buf.tobytes()


def gz_json(obj) -> bytes:
    return gzip.compress(json.dumps(obj, indent=4).encode("utf-8"), mtime=0)
