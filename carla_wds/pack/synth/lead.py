"""Procedural routes in LEAD's (kesai-labs/lead@44891760, TransFuser v6) raw on-disk layout.

Written as lead/expert/expert_data.py saves a route (docs/datasets/lead.md), 4 Hz of a 20 Hz
drive from world.py's road:
  <root>/<Scenario>/<Town>_Rep0_<id>_0_route<idx>_01_10_05_46_05/
    rgb/, rgb_perturbated/ NNNN.jpg   the 3 cameras (front_left, front, front_right) side by
                                      side, each image_size (H, W), default 384 x 384
    semantics/ NNNN.png (uint8 ids), depth/ NNNN.png (uint8, 1/4 size), hdmap/ NNNN.png,
    radar/ NNNN.npz, each with its *_perturbated twin (perturbate_sensors = True)
    lidar/NNNN.laz (point format 0, 0.1 m, extra dimension `time`)
    metas/NNNN.pkl, bboxes/NNNN.pkl   lzma pickles (common_utils.write_pickle) of plain
                                      dicts/lists and numpy arrays, as the expert writes them
    results.json                      route 4k+3 failed (left out), 4k+2 completed with only
                                      min-speed and outside-lane infractions (kept)
`write_route_zips` packs each route into one .zip as ln2697/lead_carla distributes them.
"""
from __future__ import annotations

import datetime
import io
import json
import lzma
import math
import pickle
import shutil
import zipfile
from pathlib import Path

import numpy as np

from . import world as base
from .garage import bev_semantics, cars, simulate, to_ego, write_routes
from .sensors import SEM_ROAD, SEM_ROADLINE, encode, lidar_points, semantics_of

STEPS = 5                   # CARLA steps per saved frame (config_base.py data_save_freq)
FUTURE = 60                 # ego_num_temporal_data_points_saved
DEFAULT_SIZE = (384, 384)   # (height, width) of each camera
CAMERAS = (("front_left", "left"), ("front", "front"), ("front_right", "right"))
SCENARIOS = ("Accident", "VehicleOpensDoorTwoWays")
FOLDERS = ("rgb", "rgb_perturbated", "semantics", "semantics_perturbated", "depth",
           "depth_perturbated", "hdmap", "hdmap_perturbated", "lidar", "radar",
           "radar_perturbated", "metas", "bboxes")
TARGET_EVERY = 40.0         # m between the synthetic route's target points
# metas keys the loader copies as they are (carla_dataset.py l.224-300), at quiet values
STATIC_METAS = {
    "previous_active_scenario_type": None, "changed_route": False, "lane_type_str": "Driving",
    "is_intersection": False, "does_emergency_brake_for_pedestrians": False,
    "construction_obstacle_two_ways_stuck": False, "accident_two_ways_stuck": False,
    "parked_obstacle_two_ways_stuck": False, "vehicle_opens_door_two_ways_stuck": False,
    "vehicle_opened_door": False, "vehicle_door_side": None, "ego_lane_id": -1,
    "rear_danger_8": False, "rear_danger_16": False, "brake_cutin": False,
    "weather_setting": "ClearNoon", "jpeg_storage_quality": 30,
    "emergency_brake_for_special_vehicle": False, "visual_visibility": 1,
    "num_parking_vehicles_in_proximity": 0, "slower_bad_visibility": False,
    "slower_clutterness": False, "slower_occluded_junction": False,
    "over_head_traffic_light": False, "europe_traffic_light": False, "stop_sign_close": False,
    "num_dangerous_adversarial": 0, "num_safe_adversarial": 0, "num_ignored_adversarial": 0,
    "rear_adversarial_id": -1}
# LEAD saves semantics grouped (config_base.py save_grouped_semantic = True): the synth's
# CARLA ids -> constants.py TransfuserSemanticSegmentationClass by SEMANTIC_SEGMENTATION_
# CONVERTER's meaning (road 2, road line 5, everything else the render holds unlabeled 0)
GROUPED_SEMANTICS = np.zeros(256, np.uint8)
GROUPED_SEMANTICS[SEM_ROAD], GROUPED_SEMANTICS[SEM_ROADLINE] = 2, 5
SEM_VEHICLE, SEM_UNLABELED = 1, 0    # TransfuserSemanticSegmentationClass of the boxes


def lead_pickle(value: object) -> bytes:
    """common_utils.write_pickle's bytes: xz of pickle.dumps(value, HIGHEST_PROTOCOL)."""
    return lzma.compress(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))


def route_dir(out_dir: Path, episode: int) -> Path:
    return (Path(out_dir) / SCENARIOS[episode % 2]
            / f"Town{12 + episode % 2}_Rep0_{3790 + episode}_0_route{episode}_01_10_05_46_05")


def results(episode: int) -> dict:
    """results.json: route 4k+3 failed, 4k+2 kept by LEAD's filter despite infractions."""
    kind = episode % 4
    infr = {"collisions_vehicle": [], "min_speed_infractions": [], "outside_route_lanes": []}
    if kind == 3:
        infr["collisions_vehicle"] = ["Agent collided against object type=vehicle.tesla"]
        return {"status": "Failed", "scores": {"score_composed": 40.0, "score_route": 80.0,
                                               "score_penalty": 0.5},
                "num_infractions": 1, "infractions": infr}
    if kind == 2:
        infr["min_speed_infractions"] = ["Average agent speed is 70% of the surrounding"]
        infr["outside_route_lanes"] = ["Agent went outside its route lanes for 1.2% of it"]
        return {"status": "Completed", "scores": {"score_composed": 84.0, "score_route": 100.0,
                                                  "score_penalty": 0.84},
                "num_infractions": 2, "infractions": infr}
    return {"status": "Perfect" if kind == 0 else "Completed",
            "scores": {"score_composed": 100.0, "score_route": 100.0, "score_penalty": 1.0},
            "num_infractions": 0, "infractions": infr}


class _LeadRoute:
    """One route: the 20 Hz drive, written every STEPS steps (random streams drawn in file
    order, so the output is byte-identical for the same arguments)."""

    def __init__(self, route: Path, episode: int, seed: int, frames: int,
                 size: tuple[int, int]) -> None:
        rng = np.random.default_rng([seed, episode, 31])
        self.route, self.episode, self.frames = route, episode, frames
        self.n = frames * STEPS
        self.sim = simulate(rng, self.n, 1.0 / (4 * STEPS), extra=4)
        self.vehicles = cars(rng, self.sim, self.n)
        h, w = size
        self.renderer = base._Renderer(w, h, np.random.default_rng([seed, episode, 32]))
        self.rng = np.random.default_rng([seed, episode, 33])
        self.depth = np.full((h // 4, w // 4 * len(CAMERAS)), 40, np.uint8)
        self.depth[h // 8:] = np.linspace(200, 20, h // 4 - h // 8, dtype=np.uint8)[:, None]
        for folder in FOLDERS:
            (route / folder).mkdir(parents=True, exist_ok=True)

    def pose(self, step: int) -> tuple[float, float, float]:
        return tuple(float(self.sim[k][step]) for k in ("x", "y", "theta"))  # type: ignore

    def write(self) -> None:
        for t in range(self.frames):
            self.frame(t)
        (self.route / "results.json").write_text(json.dumps(results(self.episode), indent=2))

    def frame(self, t: int) -> None:
        step, name = t * STEPS, f"{t:04d}"
        x, y, theta = self.pose(step)
        trans = float(self.rng.uniform(0.1, 1.0) * self.rng.choice([-1, 1]))
        rot = float(self.rng.uniform(5.0, 12.5) * self.rng.choice([-1, 1]))
        boxes = [(*(float(v) for v in to_ego(c["x"][step], c["y"][step], x, y, theta)),
                  float(c["heading"][step]) - theta, *c["extent"]) for c in self.vehicles]
        self._images(name, step, trans, rot)
        pts, _ = lidar_points(self.rng, boxes)
        (self.route / "lidar" / f"{name}.laz").write_bytes(lidar_laz(pts, self.rng))
        for folder in ("radar", "radar_perturbated"):
            (self.route / folder / f"{name}.npz").write_bytes(radar_npz(self.rng, boxes))
        (self.route / "metas" / f"{name}.pkl").write_bytes(lead_pickle(self.meta(t, trans, rot)))
        (self.route / "bboxes" / f"{name}.pkl").write_bytes(lead_pickle(self.boxes(step)))

    def _images(self, name: str, step: int, trans: float, rot: float) -> None:
        """rgb, semantics, depth and hdmap from the cameras, and from the perturbated ones
        (shifted `trans` m sideways, turned `rot` deg) into the *_perturbated folders."""
        x, y, theta = self.pose(step)
        s_t = float(self.sim["s"][step])
        aug = (x - trans * math.sin(theta), y + trans * math.cos(theta),
               theta + math.radians(rot))
        for suffix, pose in (("", (x, y, theta)), ("_perturbated", aug)):
            strip = np.concatenate([self.renderer.render(self.sim["road"], s_t, pose, view)
                                    for _, view in CAMERAS], axis=1)
            folder = self.route / f"rgb{suffix}"
            (folder / f"{name}.jpg").write_bytes(encode(".jpg", strip, "rgb"))
            (self.route / f"semantics{suffix}" / f"{name}.png").write_bytes(
                encode(".png", GROUPED_SEMANTICS[semantics_of(strip)], "semantics"))
            (self.route / f"depth{suffix}" / f"{name}.png").write_bytes(
                encode(".png", self.depth, "depth"))
            (self.route / f"hdmap{suffix}" / f"{name}.png").write_bytes(
                encode(".png", lead_hdmap(self.sim["road"], pose), "hdmap"))

    def _future(self, step: int) -> list[int]:
        return [step + k for k in range(FUTURE + 1) if step + k < self.n]

    def meta(self, t: int, trans: float, rot: float) -> dict:
        """The metas dict (expert.py l.2969-3155 and the future_* of expert_data.py
        l.1141-1228) with the keys LEAD's loader reads, in their types."""
        step = t * STEPS
        x, y, theta = self.pose(step)
        mat = np.array(ego_matrix(x, y, theta), np.float32)
        inv = np.linalg.inv(mat.astype(np.float64))
        future = self._future(step)
        fpos = [(inv @ np.array([*self.pose(k)[:2], 0.0, 1.0]))[:3].tolist() for k in future]
        fyaw = [float((self.pose(k)[2] - theta + math.pi) % (2 * math.pi) - math.pi)
                for k in future]
        points, commands = self._targets(t, step)
        steer, throttle, brake = (float(v) for v in self.sim["controls"][step])
        hazard = str(self.sim["hazard"][step])
        return {"pos_global": [x, y], "theta": theta, "speed": float(self.sim["speed"][step]),
                "ego_matrix": mat, "future_positions": np.array(fpos, np.float32),
                "future_yaws": np.array(fyaw, np.float32),
                "future_speeds": np.array([self.sim["speed"][k] for k in future], np.float32),
                "next_target_points_3.25": points, "next_commands_3.25": commands,
                "steer": steer, "throttle": throttle, "brake": bool(brake > 0.5),
                "target_speed": 8.0, "speed_limit": 13.9, "town": f"Town{12 + self.episode % 2}",
                "perturbation_translation": trans, "perturbation_rotation": rot,
                "vehicle_hazard": hazard == "vehicle", "light_hazard": hazard == "light",
                "walker_hazard": hazard == "walker", "stop_sign_hazard": hazard == "stop_sign",
                "dist_to_pedestrian": float("inf"), **STATIC_METAS,
                "current_active_scenario_type": SCENARIOS[self.episode % 2],
                "past_positions": np.zeros((4, 2), np.float32),
                "past_filtered_state": np.zeros((4, 4), np.float32),
                "privileged_past_positions": np.zeros((4, 2), np.float32),
                "past_speeds": np.zeros(4, np.float32), "past_yaws": np.zeros(4, np.float32),
                "previous_target_points": points[:1], "next_target_points": points,
                "previous_commands": commands[:1], "next_commands": commands,
                "route": self._route(step),
                "sensor_information": {"num_cameras": 3, "camera_calibration": {
                    k + 1: {"width": 384, "height": 384, "fov": 60} for k in range(3)}},
                "dataset_information": {"save_depth_resolution_ratio": 4, "data_save_freq": 5}}

    def _route(self, step: int) -> np.ndarray:
        """The dense route ahead in the ego frame as expert_base.py remaining_route takes it:
        from tf_first_checkpoint_distance = 2.5 m on, every 1 m (points_per_meter = 10 apart),
        num_route_points_saved = 50 (config_base.py l.36-38, config_expert.py l.390)."""
        x, y, theta = self.pose(step)
        rx, ry, _ = self.sim["road"].at(float(self.sim["s"][step]) + 2.5 + np.arange(50) * 1.0)
        return np.stack(to_ego(rx, ry, x, y, theta), axis=1).astype(np.float32)

    def _targets(self, t: int, step: int) -> tuple[list, list]:
        """World target points [x, y, z] from the last passed one on, and their commands;
        some frames repeat a point (LEAD's loader merges consecutive duplicates), the last
        frames have only 2 (the route's end)."""
        road, s = self.sim["road"], float(self.sim["s"][step])
        k0 = int(s // TARGET_EVERY)
        count = 2 if t >= self.frames - 2 else 4
        xs, ys, _ = road.at(np.array([(k0 + i) * TARGET_EVERY for i in range(count)]))
        points = [[float(a), float(b), 0.0] for a, b in zip(xs, ys)]
        # each point's road option (the 30 m of road before the next point), VOID (-1) now
        # and then as CARLA's planner gives it
        commands = [-1 if i == 0 and t % 4 == 1 else
                    _road_option(road, (k0 + i + 1) * TARGET_EVERY) for i in range(count)]
        if t % 5 == 3 and count > 2:
            points.insert(1, list(points[0]))
            commands.insert(1, 4)
        return points, commands

    def boxes(self, step: int) -> list:
        """bboxes list: the ego, then each car with its future in the ego frame (float16),
        with the fields LEAD's get_bbox_labels reads (expert_data.py l.1353-1367 and
        l.1537-1570): brake (the control's float; a car slowing down brakes 1.0),
        transfuser_semantics_id, visible_pixels, num_radar_points, role_name, type_id."""
        x, y, theta = self.pose(step)
        out: list = [{"class": "ego_car", "transfuser_semantics_id": SEM_UNLABELED,
                      "extent": [2.45, 1.08, 0.76], "position": [0, 0, 0],
                      "yaw": 0.0, "num_points": -1, "distance": 0, "id": 100 + self.episode,
                      "speed": float(self.sim["speed"][step]),
                      "brake": float(self.sim["controls"][step][2]),
                      "matrix": ego_matrix(x, y, theta), "visible_pixels": -1}]
        for c in self.vehicles:
            fx, ry = to_ego(c["x"][step], c["y"][step], x, y, theta)
            fut = [to_ego(c["x"][k], c["y"][k], x, y, theta) for k in self._future(step)[:41]]
            speed = c["speed"]
            slowing = step + 1 < len(speed) and speed[step + 1] < speed[step]
            out.append({"class": "car", "transfuser_semantics_id": SEM_VEHICLE,
                        "extent": list(c["extent"]), "id": c["id"],
                        "position": [float(fx), float(ry), 0.0],
                        "yaw": float(c["heading"][step]) - theta, "speed": float(speed[step]),
                        "brake": 1.0 if slowing else 0.0, "steer": 0.0,
                        "throttle": 0.0 if slowing else 0.5, "num_points": 20,
                        "num_radar_points": 2, "visible_pixels": 100,
                        "distance": float(math.hypot(fx, ry)), "role_name": "autopilot",
                        "type_id": "vehicle.lincoln.mkz_2020", "lane_type_str": "Driving",
                        "matrix": ego_matrix(c["x"][step], c["y"][step], c["heading"][step]),
                        "future_positions": np.array(fut, np.float16),
                        "future_yaws": np.zeros(len(fut), np.float16)})
        return out


def _road_option(road, s: float) -> int:
    """What the road does in the 30 m before arc length s: a turn (by its curvature's sign),
    a junction crossing, else lane following."""
    kinds = road.kind[road.index(max(s - 30.0, 0.0)):road.index(s) + 1]
    turns = np.flatnonzero(kinds == base._TURN)
    if turns.size:
        return base.RIGHT if road.curv[road.index(max(s - 30.0, 0.0)) + turns[0]] > 0 \
            else base.LEFT
    return base.STRAIGHT if (kinds == base._JUNCTION).any() else base.LANEFOLLOW


def lead_hdmap(road, pose: tuple[float, float, float]) -> np.ndarray:
    """hdmap/NNNN.png as LEAD's expert saves it (lead/expert/hdmap/chauffeurnet.py
    get_observation, expert_data.py obs_config): 256 x 256 at pixels_per_meter_collection = 2,
    the ego at the centre, ChauffeurNet ids (1 road, 2 sidewalk, 3 lane marking, 4 broken
    lane marking; no actors: LEAD's loader draws the boxes in), turned by np.rot90(k=-1) so
    forward is +column and right +row, as their LiDAR grid."""
    return np.ascontiguousarray(np.rot90(bev_semantics(road, pose, [], 256, 2.0), k=-1))


def ego_matrix(x: float, y: float, yaw: float) -> list[list[float]]:
    c, s = math.cos(float(yaw)), math.sin(float(yaw))
    return [[c, -s, 0.0, float(x)], [s, c, 0.0, float(y)], [0.0, 0.0, 1.0, 0.0],
            [0.0, 0.0, 0.0, 1.0]]


def lidar_laz(points: np.ndarray, rng: np.random.Generator) -> bytes:
    """expert_data.py l.1077-1098: point format 0, scales 0.1 m, offsets the minimum, and the
    uint8 extra dimension `time` (the accumulation step, 0 or 1 here)."""
    import laspy

    header = laspy.LasHeader(point_format=0, version="1.2")
    header.creation_date = datetime.date(2025, 1, 10)   # fixed: the bytes repeat
    header.generating_software = "carla_wds synth"
    header.offsets = np.min(points, axis=0)[:3]
    header.scales = np.array([0.1, 0.1, 0.1])
    header.add_extra_dim(laspy.ExtraBytesParams(name="time", type=np.uint8))
    record = laspy.ScaleAwarePointRecord.zeros(len(points), header=header)
    record.x, record.y, record.z = points[:, 0], points[:, 1], points[:, 2]
    record["time"] = rng.integers(0, 2, len(points)).astype(np.uint8)
    buf = io.BytesIO()
    with laspy.open(buf, mode="w", header=header, do_compress=True, closefd=False) as w:
        w.write_points(record)
    return buf.getvalue()


def radar_npz(rng: np.random.Generator, boxes: list) -> bytes:
    """np.savez_compressed(radar1=..., radar4=...) of float16 (N, 4) rows: x, y, z, velocity."""
    arrays = {}
    for k in range(1, 5):
        rows = [[b[0], b[1], 0.5, rng.normal(0, 2)] for b in boxes if (b[0] > 0) == (k < 3)]
        rows += [[rng.uniform(-40, 40), rng.uniform(-40, 40), 0.3, 0.0] for _ in range(3)]
        arrays[f"radar{k}"] = np.array(rows, np.float16)
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return buf.getvalue()


def write_route_zips(routes: list[Path], out_dir: str | Path,
                     prefix: str = "data/carla_leaderboard2/data") -> list[Path]:
    """One <out_dir>/<Scenario>/<route>.zip per route, members under
    `prefix/<Scenario>/<route>/` as LEAD's scripts/unzip_routes.sh extracts them (`unzip -d .`
    from its repository root); fixed member dates, so the bytes repeat."""
    out = []
    for route in routes:
        scenario = route.parent.name
        target = Path(out_dir) / scenario / f"{route.name}.zip"
        target.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(target, "w", zipfile.ZIP_STORED) as z:
            for f in sorted(p for p in route.rglob("*") if p.is_file()):
                rel = f"{prefix}/{scenario}/{route.name}/{f.relative_to(route).as_posix()}"
                z.writestr(zipfile.ZipInfo(rel, (2025, 1, 10, 5, 46, 4)), f.read_bytes())
        out.append(target)
    return out


def synth_dataset(out_dir: str | Path, layout: str = "lead", episodes: int = 4,
                  frames: int = 40, seed: int = 0, image_size: tuple[int, int] | None = None,
                  progress: bool = True) -> list[Path]:
    """Write `episodes` LEAD route folders (4 Hz, `frames` frames each) under out_dir and return
    them sorted. image_size (height, width) of each camera of the strip, default (384, 384).
    Byte-identical output for the same arguments; FileExistsError if a route folder to be
    written already holds files."""
    if layout != "lead":
        raise ValueError(f"this writer writes layout 'lead', not {layout!r}")
    base.check_args(episodes, frames, seed, image_size)
    size = tuple(int(v) for v in (image_size or DEFAULT_SIZE))
    if size[0] < 16 or size[1] < 16 or size[0] % 4 or size[1] % 4:
        raise ValueError(f"image_size must be (height, width), multiples of 4 and >= 16 "
                         f"(depth is saved at 1/4), got {image_size!r}")
    routes = [route_dir(Path(out_dir), ep) for ep in range(int(episodes))]
    return write_routes("lead", out_dir, routes, lambda route, ep: _LeadRoute(
        route, ep, int(seed), int(frames), size).write(), frames, size[::-1], progress)


ARCHIVE_FORMS = ("zip",)   # synth_archives' forms (carla-wds synth --archives)


def synth_archives(out_dir: str | Path, form: str = "zip", episodes: int = 4, frames: int = 40,
                   seed: int = 0, image_size: tuple[int, int] | None = None) -> list[Path]:
    """The routes of synth_dataset as LEAD distributes them, one .zip per route
    (write_route_zips); the route folders written on the way are removed. The zips, sorted."""
    if form not in ARCHIVE_FORMS:
        raise ValueError(f"form {form!r}; expected one of {list(ARCHIVE_FORMS)}")
    staging = Path(out_dir) / ".synth_routes"
    routes = synth_dataset(staging, episodes=episodes, frames=frames, seed=seed,
                           image_size=image_size, progress=False)
    zips = write_route_zips(routes, out_dir)
    shutil.rmtree(staging)
    return sorted(zips)


__all__ = ["ARCHIVE_FORMS", "DEFAULT_SIZE", "lead_pickle", "route_dir", "synth_archives",
           "synth_dataset", "write_route_zips"]
