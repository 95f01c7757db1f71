"""Raw CARLA folder layouts, described by YAML files (no code per layout); the built-in ones
ship inside the package, in carla_wds/pack/datasets/routes/layouts/."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ....datasets import transforms
from ....modalities.pose import POSE_SOURCES
from .tracks import TrackRule, parse_tracks
from ....safeyaml import read_yaml
from ....schema import CAMERAS
from .layout_parts import (
    TARGET_FROM,
    WAYPOINTS_FROM,
    Field,
    RouteFilter,
    SampleRule,
    Sensor,
    Source,
    fail,
    parse_fields,
    parse_filter,
    parse_samples,
    parse_sensors,
    parse_sources,
)

LAYOUT_DIR = Path(__file__).resolve().parent / "layouts"
FIELD_NAMES = ("x", "y", "theta", "speed", "target_x", "target_y", "command")
OPTIONAL_FIELDS = ("ego_matrix",)   # needed when waypoints come from the 4x4 ego matrix
# the load transforms a layout may name: those the datasets register (carla_wds.datasets)
TRANSFORMS = tuple(transforms())


@dataclass(frozen=True)
class Layout:
    name: str
    cameras: dict[str, str]        # schema camera name -> folder inside a route
    fields: dict[str, str]         # our field name -> measurement JSON key
    measurements: str = "measurements"
    image_ext: str = "png"
    measurements_ext: str = "json"
    rate_hz: float = 2.0
    horizon_s: float = 2.0
    waypoints_from: str = "position"
    waypoint_origin: tuple[float, float, float] = (0.0, 0.0, 0.0)   # ego-frame shift (TF2022)
    target_from: str = "world"
    frames: tuple[tuple[str, str], ...] = ()    # label -> coordinate convention
    twins: tuple[tuple[str, str], ...] = ()     # camera -> folder of its augmented twin
    sensors: tuple[Sensor, ...] = ()
    sources: tuple[Source, ...] = ()
    measurement_fields: tuple[Field, ...] = ()
    route_filter: RouteFilter | None = None
    transforms: tuple[str, ...] = ()
    samples: SampleRule = SampleRule()   # the project's loader's head and tail frames
    # where each frame's ego2world comes from (modalities/pose.py POSE_SOURCES); "": no pose
    pose: str = ""
    tracks: TrackRule | None = None   # agent tracks of a boxes sensor (tracks.py)

    @property
    def camera_names(self) -> tuple[str, ...]:
        # Schema order, so a layout's YAML order cannot change the shard bytes.
        return tuple(c for c in CAMERAS if c in self.cameras)

    @property
    def pred_len(self) -> int:
        """Waypoints over horizon_s at this rate: 2 s is 4 points at 2 Hz, 8 at 4 Hz."""
        return max(1, round(self.horizon_s * self.rate_hz))


def load_layout(name_or_path: str | Path) -> Layout:
    """A built-in layout name (`tcp`, `transfuser4`) or a path to a layout YAML file.

    Every problem with the file is a one-line ValueError naming the file, what was expected
    and the fix."""
    path = Path(name_or_path)
    if not path.suffix:
        path = LAYOUT_DIR / f"{name_or_path}.yaml"
        if not path.is_file():
            # (pack.datasets.dataset_for names every registered layout before this is reached)
            shipped = sorted(p.stem for p in LAYOUT_DIR.glob("*.yaml"))
            raise ValueError(f"unknown layout {str(name_or_path)!r}; the shipped YAML layouts "
                             f"are {shipped}, or pass a path to a layout .yaml file")
    if not path.is_file():
        raise FileNotFoundError(f"layout file {path} does not exist")
    try:
        data = read_yaml(path, "layout YAML")
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise ValueError(f"{path}: not valid YAML ({problem}{at}); expected a mapping like "
                         f"{LAYOUT_DIR / 'tcp.yaml'}. {FIX}") from None
    try:
        return _layout_from_dict({} if data is None else data, str(path))
    except ValueError as exc:   # a message shows at most an excerpt of what the file holds
        text = str(exc)
        raise type(exc)(text if len(text) <= MAX_MESSAGE else
                        text[:MAX_MESSAGE - 40] + " ... " + text[-35:]) from None


MAX_MESSAGE = 600   # characters of a layout error; the value excerpt is the part cut
FIX = f"Fix: copy a file from {LAYOUT_DIR} and edit it"
ALLOWED = ("name", "cameras", "fields", "measurements", "image_ext", "rate_hz", "waypoints",
           "target_point", "frames", "twins", "sensors", "sources", "measurement_fields",
           "route_filter", "transforms", "samples", "pose", "tracks")


def _mapping(value: object, where: str, key: str, example: str) -> dict[str, str]:
    """A YAML mapping of names to plain names (folder or JSON key), else a one-line error."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"{where}: {key} is a {type(value).__name__}; expected a mapping "
                         f"such as `{example}`. {FIX}")
    bad = {k: v for k, v in value.items() if not isinstance(k, str)
           or not isinstance(v, (str, int)) or isinstance(v, bool)}
    if bad:
        raise ValueError(f"{where}: {key} maps {bad}; expected names to names such as "
                         f"`{example}`. {FIX}")
    return {k: str(v) for k, v in value.items()}


def _layout_from_dict(data: object, where: str) -> Layout:
    if not isinstance(data, dict):
        raise ValueError(f"{where}: the file holds a {type(data).__name__}, expected a mapping "
                         f"with keys {list(ALLOWED)}. {FIX}")
    unknown = [k for k in data if k not in ALLOWED]
    if unknown:
        raise ValueError(f"{where}: unknown keys {sorted(map(str, unknown))}; valid keys are "
                         f"{sorted(ALLOWED)}. {FIX}")
    cameras = _mapping(data.get("cameras"), where, "cameras", "front: rgb")
    bad = [c for c in cameras if c not in CAMERAS]
    if not cameras or bad:
        raise ValueError(f"{where}: cameras {list(cameras)} invalid; map some of {list(CAMERAS)} "
                         f"to folder names, e.g. `front: rgb`. {FIX}")
    fields = _mapping(data.get("fields"), where, "fields", "x: x")
    missing = [f for f in FIELD_NAMES if f not in fields]
    extra = [f for f in fields if f not in FIELD_NAMES + OPTIONAL_FIELDS]
    if missing or extra:
        raise ValueError(f"{where}: fields must map exactly {list(FIELD_NAMES)} to measurement "
                         f"keys; missing {missing}, unknown {extra}. {FIX}")
    for key in ("name", "image_ext"):
        if key in data and not isinstance(data[key], str):
            raise ValueError(f"{where}: {key} is {data[key]!r}; expected a plain string. {FIX}")
    ext = data.get("image_ext", "png").lower()
    if ext not in ("png", "jpg"):
        raise ValueError(f"{where}: image_ext {ext!r}; expected png or jpg. {FIX}")
    folder, meas_ext = _measurements(data.get("measurements", "measurements"), where)
    return Layout(name=data.get("name", Path(where).stem), cameras=cameras, fields=fields,
                  measurements=folder, image_ext=ext, measurements_ext=meas_ext,
                  **_derived(data, fields, where), **_parts(data, cameras, where))


def _measurements(value: Any, where: str) -> tuple[str, str]:
    """`measurements: folder`, or `{folder: measurements, ext: json.gz}`."""
    if isinstance(value, str):
        return value, "json"
    if isinstance(value, dict) and set(value) <= {"folder", "ext"} and isinstance(
            value.get("folder"), str) and value.get("ext", "json") in ("json", "json.gz"):
        return value["folder"], value.get("ext", "json")
    raise fail(where, "measurements", value, "a folder name, or {folder: NAME, ext: json|json.gz}")


def _derived(data: dict, fields: dict[str, str], where: str) -> dict[str, Any]:
    """rate_hz, the waypoint horizon in seconds and source, and the target point's frame."""
    rate = data.get("rate_hz", 2.0)
    if not isinstance(rate, (int, float)) or isinstance(rate, bool) or not 0 < rate <= 100:
        raise fail(where, "rate_hz", rate, "the frames per second of the saved data, e.g. 2 or 4")
    wp = data.get("waypoints") or {}
    if not isinstance(wp, dict) or set(wp) - {"horizon_s", "from", "origin"}:
        raise fail(where, "waypoints", wp, "{horizon_s: 2.0, from: position|ego_matrix, "
                   "origin: [x, y, z]}")
    horizon = wp.get("horizon_s", 2.0)
    if not isinstance(horizon, (int, float)) or isinstance(horizon, bool) or horizon <= 0:
        raise fail(where, "waypoints.horizon_s", horizon, "seconds > 0, e.g. 2.0")
    source = wp.get("from", "position")
    if source not in WAYPOINTS_FROM or (source == "ego_matrix" and "ego_matrix" not in fields):
        raise fail(where, "waypoints.from", source, f"one of {list(WAYPOINTS_FROM)}; "
                   "ego_matrix needs fields.ego_matrix")
    origin = wp.get("origin", [0.0, 0.0, 0.0])
    if not (isinstance(origin, list) and len(origin) == 3
            and all(isinstance(v, (int, float)) for v in origin)):
        raise fail(where, "waypoints.origin", origin, "[x, y, z] in metres")
    target_point = data.get("target_point") or {}
    if not isinstance(target_point, dict):
        raise fail(where, "target_point", target_point, "{from: world|ego}")
    target = target_point.get("from", "world")
    if target not in TARGET_FROM:
        raise fail(where, "target_point.from", target, f"one of {list(TARGET_FROM)}")
    return {"rate_hz": float(rate), "horizon_s": float(horizon), "waypoints_from": source,
            "waypoint_origin": tuple(float(v) for v in origin), "target_from": target,
            "pose": _pose(data.get("pose"), fields, where)}


def _pose(value: Any, fields: dict[str, str], where: str) -> str:
    """`pose: {from: ego_matrix|gnss_compass|world_yaw}`: how a frame's ego2world is read
    (docs/poses.md); absent: the pack has no pose member."""
    if value is None:
        return ""
    source = value.get("from") if isinstance(value, dict) and set(value) == {"from"} else None
    if source not in POSE_SOURCES or (source == "ego_matrix" and "ego_matrix" not in fields):
        raise fail(where, "pose", value, f"{{from: SOURCE}}, SOURCE one of {list(POSE_SOURCES)} "
                   "(ego_matrix needs fields.ego_matrix)")
    return source


def _parts(data: dict, cameras: dict[str, str], where: str) -> dict[str, Any]:
    sources = parse_sources(data.get("sources"), where)
    frames = _mapping(data.get("frames"), where, "frames", "waypoints: tcp")
    twins = _mapping(data.get("twins"), where, "twins", "front: rgb_augmented")
    if set(twins) - set(cameras):
        raise fail(where, "twins", sorted(twins), f"cameras of this layout ({sorted(cameras)})")
    transforms = data.get("transforms") or []
    if not isinstance(transforms, list) or any(t not in TRANSFORMS for t in transforms):
        raise fail(where, "transforms", transforms, f"a list from {list(TRANSFORMS)}")
    sensors = parse_sensors(data.get("sensors"), where)
    if data.get("tracks") is not None and data.get("pose") is None:
        raise fail(where, "tracks", data["tracks"], "a layout with pose: (tracks are in the "
                   "ego frame, moved between frames by the poses)")
    return {"frames": tuple(sorted(frames.items())), "twins": tuple(sorted(twins.items())),
            "sensors": sensors, "sources": sources,
            "tracks": parse_tracks(data.get("tracks"), sensors, frames, where),
            "measurement_fields": parse_fields(data.get("measurement_fields"), sources, where),
            "route_filter": parse_filter(data.get("route_filter"), where),
            "transforms": tuple(transforms),
            "samples": parse_samples(data.get("samples"), where)}
