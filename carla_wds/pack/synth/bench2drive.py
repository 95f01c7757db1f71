"""Procedural clips in Bench2Drive's raw layout (CARLA 0.9.15, 10 Hz), as folders and as the
.tar.gz archives the dataset is distributed in.

Layout (Bench2Drive@0.0.4 tools/data_collect.py `save`, `sensors`; docs/anno.md):
  <out>/v1/<Scenario>_<Town>_Route<id>_Weather<id>/
    anno/NNNNN.json.gz                      ego state, calibration (`sensors`), boxes
    camera/rgb_<cam>/NNNNN.jpg              6 cameras, JPEG quality 20
    camera/depth_<cam>/NNNNN.png            uint8 metres (saturated at 255, as B2D's PNGs are)
    camera/semantic_<cam>/NNNNN.png         CARLA 0.9.15 class tags, 1 channel
    camera/instance_<cam>/NNNNN.png         BGRA: R = class tag, G, B = instance id
    lidar/NNNNN.laz                         ego frame, point format 0, scale 0.001
    radar/NNNNN.h5                          5 float16 (M, 4) datasets [depth, alt, az, vel]
    expert_assessment/NNNNN.npz             named frame - 1 (frame 0's is -0001.npz)
  <out>/archives/<clip>.tar.gz              the same clip, members in a shuffled order (the
                                            distributed archives are not in frame order)
  <out>/bench2drive_base_train_val_split.json   {"val": ["v1/<last clip>"]}

The world is world.py's road at 10 Hz; theta in anno is CARLA's compass (yaw + pi/2, north =
(0, -1)). Cars are drawn into every camera through the stored calibration, so a box projected
with `intrinsic` and `cam2ego` lands on the car's pixels. Data quirks of the real files appear
on purpose: a NaN theta, a `speed: null`, and the ego's class written `vehicle` (anno.md)
instead of `ego_vehicle` (the code) in some clips.
"""
from __future__ import annotations

import gzip
import io
import json
import logging
import math
import tarfile
import zipfile
from pathlib import Path

import cv2
import numpy as np
from ...progress import bar as progress_bar   # a terminal's bar, or a few log lines
from ...words import counted

from ...datasets.bench2drive import RIG
from ...datasets.bench2drive import RIG_ROWS as B2D_RIG
from ...modalities.calibration import carla_matrix, intrinsic
from . import world as base
from .bench2drive_actors import box_corners as _box_corners
from .bench2drive_actors import others as _others
from .bench2drive_maps import write_town_maps
from .garage import (EGO_HALF_EXTENT, cars, count_in_box, depth_m, encode,
                           gz_json, laz_bytes, lidar_points, refuse_busy, semantics_of, simulate,
                           to_ego, wrap)

logger = logging.getLogger(__name__)
DT = 0.1
SCENARIOS = ("Accident", "ConstructionObstacle", "ParkingExit", "HazardAtSideLane",
             "SignalizedJunctionLeftTurn")
SPLIT_FILE = "bench2drive_base_train_val_split.json"
RADAR_MOUNTS = {"radar_front": (2.6, 0.0, 0.6, 0.0), "radar_front_left": (2.2, -0.9, 0.6, -60.0),
                "radar_front_right": (2.2, 0.9, 0.6, 60.0),
                "radar_back_left": (-2.2, -0.9, 0.6, -120.0),
                "radar_back_right": (-2.2, 0.9, 0.6, 120.0)}
CAR_TAG, ROAD_TAG = 14, 1
# garage's CARLA 0.9.10 tags -> 0.9.15's (road, roadline, sidewalk, sky, terrain)
_TAGS_0915 = {7: 1, 6: 24, 8: 2, 13: 11, 22: 10}
_CAR_BGR = (40, 40, 215)
EXPERT_FEATURES = 1536   # the TCP port regresses a feature of this size (TCP/model.py)


def clip_name(episode: int) -> str:
    return (f"{SCENARIOS[episode % len(SCENARIOS)]}_Town{12 + episode % 2:02d}"
            f"_Route{100 + episode}_Weather{episode % 14}")


def _rig_poses(x: float, y: float, yaw: float) -> dict[str, tuple[float, float, float]]:
    """World pose (x, y, yaw rad) of each camera of an ego at (x, y, yaw)."""
    c, s = math.cos(yaw), math.sin(yaw)
    return {name: (x + c * mx - s * my, y + s * mx + c * my, yaw + math.radians(myaw))
            for name, _, _, mx, my, _, myaw, _ in B2D_RIG}


def _view(yaw_deg: float) -> tuple[float, float]:
    """Road (behind, ahead) a camera needs, by how far it looks back."""
    back = abs(yaw_deg) > 90
    return (100.0, 10.0) if back else (10.0, 100.0)


def _sensors_anno(ego_world: np.ndarray, size: tuple[int, int]) -> dict:
    """anno['sensors']: each camera's intrinsic, cam2ego, world2cam; LiDAR; radars."""
    out = {}
    for _, sid, _, mx, my, mz, myaw, fov in B2D_RIG:
        cam2ego = carla_matrix(mx, my, mz, myaw)
        out[sid] = {"location": [mx, my, mz], "rotation": [0.0, 0.0, myaw],
                    "intrinsic": intrinsic(size[0], size[1], fov).tolist(),
                    "world2cam": np.linalg.inv(ego_world @ cam2ego).tolist(),
                    "cam2ego": cam2ego.tolist(), "fov": fov,
                    "image_size_x": size[0], "image_size_y": size[1]}
    lidar2ego = carla_matrix(*RIG.lidar_mount, 0.0)
    out["LIDAR_TOP"] = {"location": list(RIG.lidar_mount), "rotation": [0.0, 0.0, 0.0],
                        "world2lidar": np.linalg.inv(ego_world @ lidar2ego).tolist(),
                        "lidar2ego": lidar2ego.tolist()}
    for name, (mx, my, mz, myaw) in RADAR_MOUNTS.items():
        radar2ego = carla_matrix(mx, my, mz, myaw)
        out[name.upper()] = {"location": [mx, my, mz], "rotation": [0.0, 0.0, myaw],
                             "world2radar": np.linalg.inv(ego_world @ radar2ego).tolist(),
                             "radar2ego": radar2ego.tolist()}
    return out


def _draw_cars(bgr: np.ndarray, tags: np.ndarray, inst: np.ndarray, k: np.ndarray,
               world2cam: np.ndarray, boxes_world: list[tuple]) -> None:
    """Fill each car's projected box (convex hull of its 8 corners), farthest first."""
    drawn = []
    for cx, cy, cz, yaw, half, actor in boxes_world:
        p = np.c_[_box_corners(cx, cy, cz, yaw, half), np.ones(8)]
        cam = (world2cam @ p.T)[:3]
        if (cam[0] < 0.5).any():
            continue
        uv = (k @ np.stack([cam[1], -cam[2], cam[0]]))
        uv = (uv[:2] / uv[2]).T
        drawn.append((float(cam[0].mean()), uv, actor))
    for _, uv, actor in sorted(drawn, key=lambda d: -d[0]):
        hull = cv2.convexHull(np.round(np.clip(uv, -1e5, 1e5) * 16).astype(np.int32))
        cv2.fillConvexPoly(bgr, hull, _CAR_BGR, cv2.LINE_8, shift=4)
        cv2.fillConvexPoly(tags, hull, CAR_TAG, cv2.LINE_8, shift=4)
        cv2.fillConvexPoly(inst, hull, (actor & 0xFF, actor >> 8 & 0xFF, CAR_TAG, 255),
                           cv2.LINE_8, shift=4)


def _npz_bytes(arr: np.ndarray) -> bytes:
    """np.savez(arr_0=arr), with a fixed zip timestamp so the output is reproducible."""
    npy = io.BytesIO()
    np.lib.format.write_array(npy, arr, allow_pickle=False)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        z.writestr(zipfile.ZipInfo("arr_0.npy", date_time=(1980, 1, 1, 0, 0, 0)), npy.getvalue())
    return buf.getvalue()


def _radar_bytes(rng: np.random.Generator, boxes_ego: list[tuple]) -> bytes:
    """One h5 with the five radars' detections, float16 (M, 4) [depth, altitude, azimuth,
    velocity]: CARLA's RadarDetection (velocity, azimuth, altitude, depth) reversed by
    np.flip, as Bench2Drive's sensor_interface.py stores it."""
    import h5py
    buf = io.BytesIO()
    with h5py.File(buf, "w", track_order=True) as f:
        for name in RIG.radars:
            mx, my, _, myaw = RADAR_MOUNTS[name]
            rows = [[rng.uniform(40, 90), rng.uniform(-0.05, 0.05), rng.uniform(-0.3, 0.3), 0.0]]
            for bx, by, _, *_ in boxes_ego:
                az = wrap(math.atan2(by - my, bx - mx) - math.radians(myaw))
                if abs(az) < math.radians(40):
                    rows.append([math.hypot(bx - mx, by - my), rng.uniform(0.0, 0.1), az,
                                 rng.uniform(-3, 3)])
            f.create_dataset(name, data=np.asarray(rows, np.float16), compression="gzip",
                             compression_opts=9, chunks=True, track_times=False)
    return buf.getvalue()


def _next_command(cmd: np.ndarray, t: int) -> int:
    later = [int(c) for c in cmd[t + 1:] if c != cmd[t]]
    return later[0] if later else int(cmd[t])


def _ego_entry(ego_class: str, ego_id: int, x: float, y: float, yaw: float, speed: float,
               brake: bool, ego_world: np.ndarray) -> dict:
    hz = EGO_HALF_EXTENT[2]
    return {"class": ego_class, "id": str(ego_id), "type_id": "vehicle.lincoln.mkz_2020",
            "base_type": "car", "location": [x, y, 0.0], "rotation": [0.0, 0.0, math.degrees(yaw)],
            "bbx_loc": [0.0, 0.0, hz], "center": [x, y, hz], "extent": list(EGO_HALF_EXTENT),
            "world_cord": _box_corners(x, y, hz, yaw, EGO_HALF_EXTENT).tolist(),
            "semantic_tags": [CAR_TAG], "color": "0,0,0", "speed": speed, "brake": brake,
            "road_id": 7, "lane_id": -1, "section_id": 0,
            "world2ego": np.linalg.inv(ego_world).tolist()}


def _vehicle_entry(car: dict, t: int, ego_xy: tuple[float, float], n_points: int) -> dict:
    x, y, heading = float(car["x"][t]), float(car["y"][t]), float(car["heading"][t])
    hx, hy, hz = car["extent"]
    world = carla_matrix(x, y, 0.0, math.degrees(heading))
    return {"class": "vehicle", "state": "dynamic", "id": str(car["id"]),
            "type_id": "vehicle.tesla.model3", "base_type": "car", "location": [x, y, 0.0],
            "rotation": [0.0, 0.0, math.degrees(heading)], "bbx_loc": [0.0, 0.0, hz],
            "center": [x, y, hz], "extent": [hx, hy, hz],
            "world_cord": _box_corners(x, y, hz, heading, car["extent"]).tolist(),
            "semantic_tags": [CAR_TAG], "color": "200,20,20", "speed": float(car["speed"][t]),
            "brake": float(car["speed"][t] < 0.1), "light_state": "NONE", "road_id": 7,
            "lane_id": -1, "section_id": 0,
            "distance": math.hypot(x - ego_xy[0], y - ego_xy[1]), "num_points": n_points,
            "world2vehicle": np.linalg.inv(world).tolist()}


def _targets(sim: dict, t: int) -> tuple[tuple[float, float], tuple[float, float]]:
    """Near (the held route point) and far (30 m further along the road) command points."""
    road = sim["road"]
    tx, ty = (float(v) for v in sim["target"][t])
    i = int(np.argmin((road.x - tx) ** 2 + (road.y - ty) ** 2))
    fx, fy, _ = road.at(np.array([i * base.DS - base.LEAD_IN + 30.0]))
    return (tx, ty), (float(fx[0]), float(fy[0]))


class _ClipWriter:
    """One clip's frames, written file by file under its folder."""

    def __init__(self, clip_dir: Path, episode: int, seed: int, frames: int,
                 size: tuple[int, int]) -> None:
        self.dir, self.episode, self.size = clip_dir, episode, size
        rng = np.random.default_rng([seed, episode, 21])
        self.sim = simulate(rng, frames, DT, extra=8)
        self.cars = cars(rng, self.sim, frames)
        self.renderer = base._Renderer(size[0], size[1], np.random.default_rng([seed, episode, 22]))
        self.rng = np.random.default_rng([seed, episode, 23])
        self.lut = np.arange(256, dtype=np.uint8)
        for old, new in _TAGS_0915.items():
            self.lut[old] = new
        # one flat-ground depth image per field of view, the same every frame: encoded once
        self.depth = {fov: encode(".png", np.minimum(np.round(depth_m(size[0], size[1], fov)),
                                                     255).astype(np.uint8), "depth")
                      for fov in {r[7] for r in B2D_RIG}}

    def put(self, rel: str, data: bytes) -> None:
        path = self.dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)

    def frame(self, t: int) -> None:
        sim, name = self.sim, f"{t:05d}"
        x, y, yaw, speed = (float(sim[k][t]) for k in ("x", "y", "theta", "speed"))
        ego_world = carla_matrix(x, y, 0.0, math.degrees(yaw))
        boxes_ego, boxes_world = [], []
        for car in self.cars:
            fx, ry = to_ego(car["x"][t], car["y"][t], x, y, yaw)
            hx, hy, hz = car["extent"]
            boxes_ego.append((float(fx), float(ry), wrap(float(car["heading"][t]) - yaw), hx, hy, hz))
            boxes_world.append((float(car["x"][t]), float(car["y"][t]), hz,
                                float(car["heading"][t]), car["extent"], car["id"]))
        pts, _ = lidar_points(self.rng, boxes_ego)
        counts = [count_in_box(pts, (b[0], b[1], b[5]), b[2], b[3:]) for b in boxes_ego]
        sensors = _sensors_anno(ego_world, self.size)
        self._cameras(t, name, x, y, yaw, sensors, boxes_world)
        self.put(f"lidar/{name}.laz", laz_bytes(pts))
        self.put(f"radar/{name}.h5", _radar_bytes(self.rng, boxes_ego))
        expert = np.concatenate([[t], self.rng.normal(size=EXPERT_FEATURES - 1),
                                 [self.rng.normal()], [self.rng.integers(0, 39)]]).astype(np.float32)
        self.put(f"expert_assessment/{t - 1:05d}.npz", _npz_bytes(expert))
        self.put(f"anno/{name}.json.gz", gz_json(self._anno(t, x, y, yaw, speed, ego_world,
                                                            sensors, counts)))

    def _cameras(self, t: int, name: str, x: float, y: float, yaw: float, sensors: dict,
                 boxes_world: list[tuple]) -> None:
        poses, s_t = _rig_poses(x, y, yaw), float(self.sim["s"][t])
        for cam, sid, folder, _, _, _, myaw, fov in B2D_RIG:
            self.renderer.f = self.size[0] / 2 / math.tan(math.radians(fov) / 2)
            bgr = self.renderer.render(self.sim["road"], s_t, poses[cam], "front", _view(myaw))
            tags = self.lut[semantics_of(bgr)]
            inst = np.zeros((*bgr.shape[:2], 4), np.uint8)
            inst[..., 2], inst[..., 3] = tags, 255
            k, w2c = (np.array(sensors[sid][key]) for key in ("intrinsic", "world2cam"))
            _draw_cars(bgr, tags, inst, k, w2c, boxes_world)
            ok, jpg = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, 20])
            self.put(f"camera/rgb_{folder}/{name}.jpg", jpg.tobytes())
            self.put(f"camera/depth_{folder}/{name}.png", self.depth[fov])
            self.put(f"camera/semantic_{folder}/{name}.png", encode(".png", tags, "semantic"))
            self.put(f"camera/instance_{folder}/{name}.png", encode(".png", inst, "instance"))

    def _anno(self, t: int, x: float, y: float, yaw: float, speed: float, ego_world: np.ndarray,
              sensors: dict, counts: list[int]) -> dict:
        sim, ep = self.sim, self.episode
        steer, throttle, brake = (float(v) for v in sim["controls"][t])
        (nx, ny), (fx, fy) = _targets(sim, t)
        cmd = int(sim["command"][t])
        theta = (yaw + math.pi / 2) % (2 * math.pi)          # CARLA's compass
        nxt = sim["speed"][t + 1] if t + 1 < len(sim["speed"]) else speed
        ego_class = "vehicle" if ep % 4 == 3 else "ego_vehicle"
        boxes = [_ego_entry(ego_class, 1000 + ep, x, y, yaw, speed, brake > 0.5, ego_world)]
        boxes += [_vehicle_entry(car, t, (x, y), n) for car, n in zip(self.cars, counts)]
        boxes += _others(sim, ep, t, (x, y))
        return {
            "x": x, "y": y, "throttle": throttle, "steer": steer, "brake": brake,
            "reverse": False,
            "theta": float("nan") if (ep % 3 == 1 and t == 5) else theta,
            "speed": None if (ep % 3 == 2 and t == 5) else speed,
            "x_command_far": fx, "y_command_far": fy, "command_far": _next_command(
                sim["command"], t),
            "x_command_near": nx, "y_command_near": ny, "command_near": cmd,
            "should_brake": bool(brake > 0.5), "only_ap_brake": False,
            "x_target": nx, "y_target": ny, "next_command": cmd,
            "weather": {"cloudiness": 10.0 * (ep % 5), "precipitation": 0.0,
                        "sun_altitude_angle": 45.0, "fog_density": 0.0},
            "acceleration": [(float(nxt) - speed) / DT, 0.0, 0.0],
            "angular_velocity": [0.0, 0.0, 0.0],
            "sensors": sensors, "bounding_boxes": boxes}


def write_archive(clip_dir: Path, archive: Path, seed: int) -> None:
    """clip_dir as a .tar.gz holding `<clip>/...`, members in a seeded shuffled order, with
    fixed times and owners (reproducible bytes); written under a temporary name, then renamed."""
    names = sorted(p for p in clip_dir.rglob("*"))
    order = np.random.default_rng([seed, 31]).permutation(len(names))
    tmp = archive.with_name(f".{archive.name}.tmp")
    with open(tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0,
                                               filename="") as gz, \
            tarfile.open(fileobj=gz, mode="w|", format=tarfile.GNU_FORMAT) as tar:
        for i in order:
            path = names[i]
            info = tar.gettarinfo(str(path), arcname=f"{clip_dir.name}/"
                                  f"{path.relative_to(clip_dir).as_posix()}")
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            if info.isfile():
                with open(path, "rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
    tmp.rename(archive)


def _need_h5py() -> None:
    try:
        import h5py  # noqa: F401
    except ImportError:
        raise ValueError("synth --layout bench2drive writes radar .h5 files, which need h5py; "
                         "install it: pip install 'carla-wds[radar]' (in a checkout: "
                         "pip install -e '.[radar]')") from None


def synth_dataset(out_dir: str | Path, layout: str = "bench2drive", episodes: int = 4,
                  frames: int = 40, seed: int = 0, image_size: tuple[int, int] | None = None,
                  progress: bool = True, archives: bool = True) -> list[Path]:
    """Write `episodes` Bench2Drive clips of `frames` 10 Hz frames under out_dir/v1 (and, with
    `archives`, each as out_dir/archives/<clip>.tar.gz), plus the split file naming the last
    clip val. image_size (height, width), default (900, 1600). Returns the clip folders, sorted.
    Byte-identical for the same arguments; FileExistsError if a clip folder holds files."""
    height, width = RIG.image_size   # the rig table's (height, width): B2D's image_size_y/x
    size = base.writer_size(layout, "bench2drive", episodes, frames, seed, image_size,
                            (height, width))
    _need_h5py()   # before anything is written: no half-written clip without radar files
    out = Path(out_dir)
    clips = [out / "v1" / clip_name(ep) for ep in range(int(episodes))]
    refuse_busy(clips)
    roads = {}   # clip -> its road: the HD maps of the towns the clips name (issue 42)
    for ep, clip in enumerate(progress_bar(clips, desc="synth bench2drive", unit="clip",
                                   disable=not progress)):
        writer = _ClipWriter(clip, ep, int(seed), int(frames), size)
        for t in range(int(frames)):
            writer.frame(t)
        roads[clip.name] = writer.sim["road"]
        if archives:
            (out / "archives").mkdir(parents=True, exist_ok=True)
            write_archive(clip, out / "archives" / f"{clip.name}.tar.gz", int(seed) + ep)
    write_town_maps(out / "maps", roads)
    if episodes > 1:
        (out / SPLIT_FILE).write_text(json.dumps({"val": [f"v1/{clips[-1].name}"]}, indent=2))
    logger.info("wrote %s of %s (%dx%d, HxW) under %s", counted(len(clips), f"{layout} clip"),
                counted(frames, "frame"), size[1], size[0], out)   # size: (width, height)
    return sorted(clips)
