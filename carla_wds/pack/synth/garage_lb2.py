"""Procedural routes in carla_garage's Leaderboard 2.0 on-disk layout (PDM-Lite / SimLingo),
as folders or as the archives they are distributed in.

Per route (carla_garage@0f1cd25 leaderboard_2 team_code/data_agent.py save_sensors,
autopilot.py save, data_agent.py destroy; SimLingo's release leaves out semantics, depth and
BEV, SAVE_TF_LABELS=0): rgb/, rgb_augmented/ NNNN.jpg (default 512 x 1024), lidar/NNNN.laz,
boxes/NNNN.json.gz (with the expert's VQA, static, landmark, weather and ego_info entries),
measurements/NNNN.json.gz (route of 40 points, route_original, speed_limit, ...) and
results.json.gz, the leaderboard's RouteRecord (leaderboard/utils/statistics_manager.py).

Folders follow SimLingo's tree (its loader globs data/simlingo/*/*/*/Town*):
  <root>/data/simlingo/training_1_scenario/routes_training/random_weather_seed_1_balanced_150/
    Town12_Rep0_<n>_0_route0_01_01_00_00_00/
(collect_dataset_slurm.py save_path, autopilot.py TOWN_Rep<r>_<route_index>,
leaderboard_evaluator_local.py route_index = <routes stem>_route<index>_<MM_DD_hh_mm_ss>).

Results by route index % 4: 0 and 2 a perfect 100; 1 score_composed 85 with only min-speed
infractions (garage's filter drops it, SimLingo's keeps it); 3 dropped by both (a collision,
or every second time score_route 90 with only outside-lane infractions).

`synth_archives` writes the same routes as the releases ship them: SimLingo's `.tar.gz`
chunks (several routes each, paths from data/ down) or PDM-Lite's `TownXX/data/<Scenario>.zip`
(paths from <Scenario>/ down, as vqa_dataset/download_pdm_lite_carla_lb2.py unzips them).
"""
from __future__ import annotations

import gzip
import io
import math
import tarfile
import zipfile
from pathlib import Path

import numpy as np

from . import world as base
from .garage import (_GARAGE_FOLDERS, GARAGE_DT, _GarageEpisode, gz_json, to_ego,
                     write_routes)
from .sensors import encode

LB2_SIZE = (512, 1024)   # (height, width), carla_garage leaderboard_2 config.py
LB2_FOLDERS = ("rgb", "rgb_augmented", "lidar", "boxes", "measurements")
GROUP = Path("data/simlingo/training_1_scenario/routes_training/"
             "random_weather_seed_1_balanced_150")
SCENARIOS = ("Accident", "ParkingExit", "HazardAtSideLane", "SignalizedJunctionLeftTurn")
ROUTE_POINTS = 40   # SimLingo team_code/config.py num_route_points_saved
CHUNK_ROUTES = 2    # routes per synthetic .tar.gz chunk
LAYOUTS = ("garage_lb2", "garage_lb2_simlingo")   # the views of these folders
_INFRACTIONS = ("collisions_layout", "collisions_pedestrian", "collisions_vehicle", "red_light",
                "stop_infraction", "outside_route_lanes", "min_speed_infractions",
                "yield_emergency_vehicle_infractions", "scenario_timeouts", "route_dev",
                "vehicle_blocked", "route_timeout")


def route_dir(out_dir: Path, episode: int) -> Path:
    return Path(out_dir) / GROUP / f"Town12_Rep0_{100 + episode}_0_route0_01_01_00_00_00"


def route_record(episode: int) -> dict:
    """results.json.gz of route `episode` (see the module docstring)."""
    infractions: dict[str, list] = {k: [] for k in _INFRACTIONS}
    score_route, penalty = 100.0, 1.0
    if episode % 4 == 1:
        infractions["min_speed_infractions"] = ["Average speed 62% of the surrounding traffic"]
        penalty = 0.85
    elif episode % 4 == 3 and episode // 4 % 2 == 0:
        infractions["collisions_vehicle"] = ["Agent collided against object with id 2017"]
        penalty = 0.6
    elif episode % 4 == 3:
        infractions["outside_route_lanes"] = ["Agent went outside its route lanes for 3.1%"]
        score_route = 90.0
    return {"index": episode, "route_id": f"RouteScenario_{100 + episode}_rep0",
            "status": "Completed" if score_route == 100.0 else "Failed - Agent got blocked",
            "num_infractions": sum(len(v) for v in infractions.values()),
            "infractions": infractions,
            "scores": {"score_route": score_route, "score_penalty": penalty,
                       "score_composed": round(score_route * penalty, 6)},
            "meta": {"route_length": 412.5, "duration_game": 61.2, "duration_system": 240.8}}


class _LB2Episode(_GarageEpisode):
    """One leaderboard_2 route: garage's simulation, LB2's camera, fields and boxes."""

    def __init__(self, route: Path, episode: int, seed: int, frames: int,
                 size: tuple[int, int]) -> None:
        super().__init__(route, episode, seed, frames, size)
        for folder in sorted(set(_GARAGE_FOLDERS) - set(LB2_FOLDERS)):
            (route / folder).rmdir()   # made empty by garage's writer; LB2 has no such folder

    def _measurement(self, t: int, pose: tuple[float, float, float], speed: float,
                     trans: float, rot: float) -> dict:
        """autopilot.py save: garage's fields plus speed_limit, route_original, ..."""
        out = super()._measurement(t, pose, speed, trans, rot)
        (x, y, theta), road, s_t = pose, self.road, float(self.sim["s"][t])
        rx, ry = road.at(s_t + np.arange(1, ROUTE_POINTS + 1) * 1.0)[:2]
        fx, right = to_ego(rx, ry, x, y, theta)
        lateral = 1.5 if self.episode % 2 and 8 <= t < 14 else 0.0   # a shifted route for a while
        out["route"] = [[float(a), float(b) - lateral] for a, b in zip(fx, right)]
        out["route_original"] = [[float(a), float(b)] for a, b in zip(fx, right)]
        vmax = float(road.vmax[road.index(s_t)])
        out.update(speed_limit=vmax / 0.72, changed_route=lateral != 0.0,
                   speed_reduced_by_obj_type=None, speed_reduced_by_obj_id=None,
                   speed_reduced_by_obj_distance=None, vehicle_affecting_id=None,
                   walker_affecting_id=None, walker_close_id=None)
        return out

    def _target_speed(self, t: int, hazard: str) -> float:
        """PDM-Lite's (carla_garage@0f1cd25 autopilot.py l.354): speed_limit *
        ratio_target_speed_limit 0.72, the road's comfortable speed here; 0 at a hazard."""
        return 0.0 if hazard else float(self.road.vmax[self.road.index(float(self.sim["s"][t]))])

    def _boxes(self, t: int, pose: tuple[float, float, float], speed: float,
               boxes_ego: list[tuple], counts: list[int]) -> list[dict]:
        """data_agent.py get_bounding_boxes: garage's entries plus the LB2 expert's others."""
        out = super()._boxes(t, pose, speed, boxes_ego, counts)
        for entry in list(out):
            if entry["class"] in ("traffic_light", "stop_sign"):
                out.append({**entry, "class": entry["class"] + "_vqa"})
        out += [{"class": "static_car", "extent": [2.2, 0.95, 0.8], "position": [25.0, 4.5, 0.0],
                 "yaw": 0.1, "distance": 25.4, "road_id": 7, "lane_id": 1},
                {"class": "landmark", "name": "Stencil_STOP", "position": [18.0, 2.0, 0.0],
                 "yaw": 0.0, "distance": 18.1, "id": 31, "text": "", "value": 0.0},
                {"class": "weather", "cloudiness": 10.0, "sun_altitude_angle": 45.0},
                {"class": "ego_info", "scenario": SCENARIOS[self.episode % len(SCENARIOS)],
                 "is_in_junction": bool(self.sim["junction"][t]), "lane_id": -1}]
        return out

    def _cameras(self, t: int, name: str, pose: tuple[float, float, float],
                 boxes_ego: list[tuple], trans: float, rot: float) -> None:
        """rgb and its twin rgb_augmented (shifted trans m right, turned rot degrees)."""
        x, y, theta = pose
        aug_pose = (x - trans * math.sin(theta), y + trans * math.cos(theta),
                    theta + math.radians(rot))
        s_t = float(self.sim["s"][t])
        for folder, at in (("rgb", pose), ("rgb_augmented", aug_pose)):
            bgr = self.renderer.render(self.road, s_t, at, "front")
            (self.route / folder / f"{name}.jpg").write_bytes(encode(".jpg", bgr, "rgb"))

    def results(self) -> None:
        (self.route / "results.json.gz").write_bytes(gz_json(route_record(self.episode)))


def synth_dataset(out_dir: str | Path, layout: str = "garage_lb2", episodes: int = 4,
                  frames: int = 40, seed: int = 0, image_size: tuple[int, int] | None = None,
                  progress: bool = True) -> list[Path]:
    """Write `episodes` leaderboard_2 route folders (4 Hz, `frames` frames each) under
    out_dir in SimLingo's tree; image_size (height, width), default (512, 1024).
    Byte-identical output for the same arguments; FileExistsError if a route folder to be
    written already holds files."""
    if layout not in LAYOUTS:
        raise ValueError(f"this writer writes layouts {list(LAYOUTS)}, not {layout!r}")
    size = base.draw_size(episodes, frames, seed, image_size, LB2_SIZE)
    routes = [route_dir(Path(out_dir), ep) for ep in range(int(episodes))]

    def write(route: Path, ep: int) -> None:
        episode_writer = _LB2Episode(route, ep, int(seed), int(frames), size)
        for t in range(int(frames)):
            episode_writer.frame(t)
        episode_writer.results()
    return write_routes(layout, out_dir, routes, write, frames, size, progress)


def _files(route: Path) -> list[Path]:
    return sorted(p for p in route.rglob("*") if p.is_file())


ARCHIVE_FORMS = ("simlingo", "pdm_lite")   # synth_archives' forms (carla-wds synth --archives)


def synth_archives(out_dir: str | Path, form: str = "simlingo", episodes: int = 4,
                   frames: int = 40, seed: int = 0,
                   image_size: tuple[int, int] | None = None) -> list[Path]:
    """Write the routes of `synth_dataset` as distributed, under out_dir: form "simlingo"
    gives data_simlingo_..._chunk_NNN.tar.gz of CHUNK_ROUTES routes each, "pdm_lite"
    Town12/data/<Scenario>.zip per scenario; the archives, sorted. Byte-identical for the same
    arguments (fixed member times); FileExistsError if one exists."""
    if form not in ("simlingo", "pdm_lite"):
        raise ValueError(f"form {form!r}; expected 'simlingo' or 'pdm_lite'")
    out = Path(out_dir)
    staging = out / ".synth_routes"
    routes = synth_dataset(staging, episodes=episodes, frames=frames, seed=seed,
                           image_size=image_size, progress=False)
    groups: dict[Path, list[Path]] = {}
    for ep, route in enumerate(routes):
        if form == "simlingo":
            name = "_".join(GROUP.parts) + f"_chunk_{ep // CHUNK_ROUTES + 1:03d}.tar.gz"
            groups.setdefault(out / name, []).append(route)
        else:
            groups.setdefault(out / "Town12" / "data" / f"{SCENARIOS[ep % 4]}.zip",
                              []).append(route)
    for archive, members in groups.items():
        if archive.exists():
            raise FileExistsError(f"{archive} exists; choose an empty out_dir or remove it")
        archive.parent.mkdir(parents=True, exist_ok=True)
        if form == "simlingo":
            _write_tar(archive, staging, members)
        else:
            _write_zip(archive, archive.stem, members)
    for route in routes:   # the staging folders go; only the archives stay
        for p in sorted(route.rglob("*"), reverse=True):
            p.unlink() if p.is_file() else p.rmdir()
    _remove_empty(staging)
    return sorted(groups)


def _write_tar(archive: Path, root: Path, routes: list[Path]) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for route in routes:
            for path in _files(route):
                info = tarfile.TarInfo(path.relative_to(root).as_posix())
                data = path.read_bytes()
                info.size, info.mtime, info.mode = len(data), 1700000000, 0o644
                tar.addfile(info, io.BytesIO(data))
    archive.write_bytes(gzip.compress(buf.getvalue(), mtime=0))


def _write_zip(archive: Path, scenario: str, routes: list[Path]) -> None:
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_STORED) as zf:
        for route in routes:
            for path in _files(route):
                info = zipfile.ZipInfo(f"{scenario}/{route.name}/"
                                       f"{path.relative_to(route).as_posix()}",
                                       date_time=(2024, 5, 1, 0, 0, 0))
                zf.writestr(info, path.read_bytes())


def _remove_empty(folder: Path) -> None:
    for p in sorted(folder.rglob("*"), reverse=True):
        if p.is_dir() and not any(p.iterdir()):
            p.rmdir()
    if folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()
