"""`--layout lead`: one LEAD route -> its frames' tasks (main process), and the sample
spec of a pack (which cameras the strip holds, which sensor folders the routes have).

Per route: LEAD's route filter (routes.py), its frame count (bboxes/ entries), and for every
frame LEAD's loader serves, the metas pickle read through the opcode walker
(pickles.py) into the frame's labels and record (labels.py); the sensor files are read by the
encoder (encoder.py), in the workers. Every frame is a sample, the loader's head or tail, or
a recorded skip.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ....datasets.lead import DEPTH_CODEC, FRAME, LAYOUT, strip_cameras, strip_geometry
from ....extras import Extra
from ....imagesize import image_size
from ....schema import SampleSpec, make_key
from ...errors import PackError
from ...routes import RoutePlan, Skip
from ...sources import PickleRefused, is_dir, read_bytes
from ..routes.layout_parts import SampleRule
from .labels import PRED_LEN, frame_values, record_extra
from .archive import route_files
from .pickles import plain, read_lead_pickle
from .routes import SKIP_FIRST, SKIP_LAST, LeadRoute, frame_count, left_out, sample_frames

RATE_HZ = 4.0   # config_base.py data_save_freq = 5 of CARLA's 20 Hz
SAMPLES = SampleRule(head=SKIP_FIRST, tail=0, loader=(
    "kesai-labs/lead@44891760 lead/data_buckets/abstract_bucket_collection.py iter_route: "
    f"range(skip_first={SKIP_FIRST}, num_seq - skip_last={SKIP_LAST})"))
OPTIONAL = ("instance", "camera_pc")   # saved in LEAD's debug runs only
SENSORS = ("semantics", "depth", "hdmap", "lidar", "radar")
# sensors LEAD also saves from the perturbated cameras (<folder>_perturbated/, expert_data.py
# l.958-1071): packed as the `_augmented` twins of their members
TWINNED = ("semantics", "depth", "instance", "hdmap", "radar")


@dataclass(frozen=True)
class LeadLayout:
    """What the manifest says of a lead pack."""
    cameras: tuple[str, ...]
    twin: bool
    optional: tuple[str, ...] = ()
    sensor_twins: tuple[str, ...] = ()
    name: str = LAYOUT
    rate_hz: float = RATE_HZ
    samples: SampleRule = SAMPLES

    def spec_doc(self) -> dict[str, Any]:
        return {"strip_cameras": list(self.cameras), "twin": "rgb_perturbated" if self.twin
                else "", "sensor_twins": [f"{f}_perturbated" for f in self.sensor_twins],
                "waypoint_spacing_steps_20hz": 5, "radar_columns":
                "the saved columns, then the sensor number 1..4",
                "lidar_columns": "x, y, z m, time (LEAD's accumulation step)"}


@dataclass
class LeadTask:
    episode: str
    frame: int
    key: str
    labels: dict[str, Any]
    record: dict[str, Any]
    route: str                      # the route folder (a zip route's: where it would be)
    archive: str | None = None      # the route's zip
    metas: dict[str, Any] = field(default_factory=dict)   # the frame's metas, plain values


def inspect_routes(routes: list[LeadRoute], allow_pickle: bool) -> LeadLayout:
    """The cameras, the twin and the optional folders of the first route LEAD would train on
    (every other route must match or its frames are skips). The cameras: metas/0000.pkl's
    sensor_information.num_cameras with --allow-pickle-input, else the strip's width (LEAD's
    384 px cameras), so listing the routes (`carla-wds plan`) needs no unpickling."""
    for r in routes:
        where = f"{r.name}/metas/0000.pkl"
        try:
            with route_files(r):
                if left_out(r.folder):
                    continue
                return _layout_of(r, where, allow_pickle)
        except PickleRefused:
            raise
        except (ValueError, OSError, KeyError, TypeError) as exc:
            raise PackError(f"{where}: {exc}; expected LEAD's metas with "
                            "sensor_information.num_cameras. Fix: re-download the route, or "
                            "pack the other routes (--select)") from None
    raise PackError(f"no route LEAD trains on: all {len(routes)} are left out by its route "
                    "filter (results.json). Fix: check the routes' results.json, or point "
                    "INPUT_DIR at other routes")


def _layout_of(r: LeadRoute, where: str, allow_pickle: bool) -> LeadLayout:
    cams = None
    if not allow_pickle:
        cams = strip_geometry(image_size(read_bytes(r.folder / "rgb" / "0000.jpg")[:1 << 16]))
    if cams is None:   # refused here without the flag: the count is only in the pickle
        meta = read_lead_pickle(read_bytes(r.folder / "metas" / "0000.pkl"), where,
                                allow_pickle)
        cams = strip_cameras(meta["sensor_information"]["num_cameras"])
    optional = tuple(o for o in OPTIONAL if is_dir(r.folder / o))
    twins = tuple(f for f in TWINNED if (f in SENSORS or f in optional)
                  and is_dir(r.folder / f"{f}_perturbated"))
    return LeadLayout(cams, is_dir(r.folder / "rgb_perturbated"), optional, twins)


def lead_spec(layout: LeadLayout, image_format: str) -> SampleSpec:
    """Cameras from the strip, the twin, per-camera semantics/depth (+ instance), the BEV map,
    LiDAR, radar (+ camera_pc), each packed sensor twin, the metas and boxes as JSON and the
    measurements record."""
    cams = layout.cameras
    extras: list[Extra] = []
    if layout.twin:
        extras += [Extra(f"{c}_augmented", f"{c}_augmented.{image_format}", image_format, "rgb",
                         "uint8", (), "", FRAME, twin_of=c) for c in cams]
    by_folder = {
        "semantics": [Extra(f"semantic_{c}", f"semantic_{c}.png", "semantics", "semantics",
                            "uint8", (), "class id (LEAD grouped)", f"camera {c}") for c in cams],
        "depth": [Extra(f"depth_{c}", f"depth_{c}.png", DEPTH_CODEC, "depth", "float32", (),
                        "m", f"camera {c}") for c in cams],
        "instance": [Extra(f"instance_{c}", f"instance_{c}.png", "instance", "instance",
                           "uint8", (), "R tag, G/B instance id", f"camera {c}") for c in cams],
        "hdmap": [Extra("hdmap", "hdmap.png", "bev_classes", "bev", "uint8", (), "class id",
                        FRAME)],
        "lidar": [Extra("lidar", "lidar.npy", "points", "lidar", "float32", (None, 4), "m",
                        FRAME)],
        "radar": [Extra("radar", "radar.npy", "npy", "radar", "float32", (None, None), "",
                        FRAME)],
        "camera_pc": [Extra("camera_pc", "camera_pc.npy", "npy", "radar", "float32",
                            (None, None), "", FRAME)]}
    for folder, own in by_folder.items():
        if folder in SENSORS or folder in layout.optional:
            extras += own
    for folder in layout.sensor_twins:
        extras += [replace(e, name=f"{e.name}_augmented", twin_of=e.name,
                           member=e.member.replace(".", "_augmented.", 1))
                   for e in by_folder[folder]]
    extras += [Extra("bboxes", "bboxes.json", "json", "json", "json", (), "", FRAME),
               Extra("metas", "metas.json", "json", "json", "json", (), "", FRAME),
               record_extra()]
    frames = {"waypoints": FRAME, "target_point": FRAME, "lidar": FRAME}
    return SampleSpec(cams, PRED_LEN, image_format, extras=tuple(extras),
                      frames=tuple(sorted(frames.items())))


def plan_lead_route(route: LeadRoute, opts: Any) -> RoutePlan:
    """Every frame of one route (a folder, or a zip read in place): a LeadTask, the loader's
    head/tail, or a Skip. ArchiveError for a zip that cannot be read."""
    with route_files(route):
        return _plan(route, opts)


def _plan(route: LeadRoute, opts: Any) -> RoutePlan:
    why = left_out(route.folder)
    if why:   # listed in the manifest's filtered_routes, its frames not counted
        return RoutePlan(route.name, filtered=why)
    n = frame_count(route.folder)
    plan = RoutePlan(route.name, n_frames=n)
    keep = sample_frames(n, opts.all_frames)
    plan.head = min(keep.start, n)
    plan.loader_tail = max(n - max(keep.stop, plan.head), 0)
    for t in keep:
        got = _task(route, t, opts)
        if isinstance(got, Skip):
            plan.skipped.append(got)
        elif got is None:   # --all-frames: the metas hold no full future
            plan.tail += 1
        else:
            plan.tasks.append(got)
    return plan


def _task(route: LeadRoute, t: int, opts: Any) -> LeadTask | Skip | None:
    file = f"metas/{t:04d}.pkl"
    try:
        meta = read_lead_pickle(read_bytes(route.folder / file), f"{route.name}/{file}",
                                opts.allow_pickle_input)
        if not isinstance(meta, dict):
            raise ValueError(f"holds a {type(meta).__name__}; expected LEAD's metas dict")
        if opts.all_frames and len(meta.get("future_positions", ())) <= 5 * PRED_LEN:
            return None
        labels, record = frame_values(meta, route.name, t)
        return LeadTask(route.name, t, make_key(route.name, t, opts.dot_replacement), labels,
                        record, str(route.folder), None if route.archive is None else
                        str(route.archive), plain(meta))
    except PickleRefused:
        raise
    except FileNotFoundError:
        return Skip(route.name, t, file, "missing; expected LEAD's metas of every frame in "
                    "bboxes/")
    except (ValueError, OSError, KeyError, TypeError) as exc:
        return Skip(route.name, t, file, str(exc))


__all__ = ["LeadLayout", "LeadTask", "RATE_HZ", "SAMPLES", "inspect_routes", "lead_spec",
           "plan_lead_route"]
