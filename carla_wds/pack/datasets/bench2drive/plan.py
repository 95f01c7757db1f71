"""`--layout bench2drive`: Bench2Drive clips (folders or `.tar.gz`) -> sample tasks -> samples.

Per clip, in the main process: open it (clips.py; an archive is streamed once into a bounded
spool), read the anno of every keyframe (every `stride`-th frame, B2D's own 2 Hz at stride 5)
and of its future waypoint frames, decide each frame's fate (sample, tail, skip, or a frame
between keyframes), and read each sample's files into its task. The clip is then closed, so
at most one clip is held at a time; workers (when images are decoded) get tasks with their
bytes and never open a clip. Every frame is accounted for: a sample, a tail (no full future),
a recorded skip, or a frame between keyframes (`between`, counted in the manifest). With the
expert, a sample also carries the TCP port's future labels: the expert files its pairing gives
frames t + 5k, k = 1..pred_len (future_expert_feature.npy, the record's future_expert_action).
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ....datasets.bench2drive import RIG_ROWS as B2D_RIG
from ....codecs import codec_named
from ....extras import MEASUREMENTS, Extra
from ....schema import SampleSpec, make_key
from .vocab import B2D_BOX_COLUMNS
from . import anno as anno_of
from . import boxes as b2d_boxes
from . import future_boxes, futures, temporal
from .raw import npz_array, radar_array  # noqa: F401 - radar_array: read from here too
from .clips import ClipError, ClipRef, by_folder, open_clip
from ..routes.layout_parts import SampleRule
from ...routes import RoutePlan, Skip
from ...sources import decode_json

log = logging.getLogger(__name__)
RATE_HZ, WAYPOINT_HZ = 10.0, 2.0
STEP = round(RATE_HZ / WAYPOINT_HZ)   # frames between waypoints: 2 Hz at 10 Hz
# The Bench2DriveZoo TCP port's sample range (Thinklab-SJTU/Bench2DriveZoo@tcp/admlp 31278ff
# tools/gen_tcp_data.py l.125 and l.182): `length = len(anno) - 1` ("drop last frame"), then
# `range(INPUT_FRAMES-1, length-FUTURE_FRAMES-5)`, FUTURE_FRAMES = 4*5: from frame 0, ending
# 1 + 5 = 6 source frames before the last frame with a full future. Keyframes keep --stride.
SAMPLES = SampleRule(head=0, tail=6, loader="Bench2DriveZoo@tcp/admlp 31278ff "
                     "tools/gen_tcp_data.py l.182: range(0, len(anno) - 1 - 4*5 - 5)")
CAMERAS = tuple(r[0] for r in B2D_RIG)
SENSORS = ("lidar", "boxes", "expert", "radar", "depth", "semantic", "instance")
DEFAULT_SENSORS = ("lidar", "boxes", "expert")
_PER_CAMERA = {"depth": ("depth_b2d8", "depth", "float32", "m"),
               "semantic": ("semantics", "semantics", "uint8", "class id (CARLA 0.9.15)"),
               "instance": ("instance", "instance", "uint8", "R tag, G/B instance id")}
EXPERT_OFFSETS = {"prepare_b2d": -1, "tcp_port": 0}   # --expert-pairing
RADAR_COLUMNS = ("radar", "depth", "altitude", "azimuth", "velocity")


@dataclass(frozen=True)
class B2DSettings:
    stride: int = 5
    pred_len: int = 4
    handedness: str = "left"
    box_radius: float = anno_of.DEFAULT_BOX_RADIUS
    sensors: tuple[str, ...] = DEFAULT_SENSORS
    spool_bytes: int = 1 << 30
    box_visibility: str = "filter"   # prepare_B2D's FILTER_INVISINLE (visible.py)
    expert_offset: int = -1     # expert file of frame t: t - 1 (prepare_B2D) or t (TCP port)
    all_frames: bool = False    # every keyframe with a full future, not the port's range
    masked_future: bool = False   # --future-labels masked: every keyframe (futures.py)
    future_boxes: int = 0       # --future-boxes F: the box sets of infos t+1..t+F (0: none)
    # (past, future) steps of tracks.npy: UniAD's, which hold VAD's 2 past and 6 future
    track_steps: tuple[int, int] = temporal.TRACK_STEPS

    @property
    def frame_name(self) -> str:
        """The label convention (docs/coordinates.md): CARLA's vehicle frame, or mirrored."""
        return "b2d" if self.handedness == "right" else "garage"


@dataclass
class ClipPlan(RoutePlan):
    between: int = 0            # frames between keyframes, left out by --stride
    null_speed: int = 0         # `speed: null`, replaced by the speed the positions give
    ego_as_vehicle: int = 0     # the ego's class written 'vehicle'


@dataclass
class ClipTask:
    episode: str
    frame: int
    key: str
    labels: dict[str, Any]
    record: dict[str, Any]
    files: dict[str, tuple[str, bytes]] = field(default_factory=dict)   # member -> (file, bytes)


def b2d_settings(opts, own) -> B2DSettings:
    """The bench2drive settings of a PackOptions and its Bench2DriveOptions `own` (the
    defaults where an option is None)."""
    d = B2DSettings()
    return B2DSettings(stride=own.stride or d.stride, pred_len=opts.pred_len or d.pred_len,
                       handedness=own.handedness,
                       box_radius=d.box_radius if own.box_radius is None else own.box_radius,
                       sensors=d.sensors if own.sensors is None else tuple(own.sensors),
                       spool_bytes=opts.spool_bytes, box_visibility=own.box_visibility,
                       expert_offset=EXPERT_OFFSETS[own.expert_pairing],
                       all_frames=opts.all_frames or own.future_labels == "masked",
                       masked_future=own.future_labels == "masked",
                       future_boxes=own.future_boxes)


@dataclass(frozen=True)
class CLIP_LAYOUT_INFO:   # noqa: N801 - stands where a Layout stands, for the manifest
    """What the manifest says of a bench2drive pack: its name, the keyframe rate, and the
    handedness of its labels."""
    settings: B2DSettings
    name: str = "bench2drive"

    samples: SampleRule = SAMPLES

    @property
    def rate_hz(self) -> float:
        return RATE_HZ / self.settings.stride

    def spec_doc(self) -> dict[str, Any]:
        return {"handedness": self.settings.handedness, "source_rate_hz": RATE_HZ,
                "stride": self.settings.stride, "waypoint_rate_hz": WAYPOINT_HZ,
                "box_radius_m": self.settings.box_radius, "radar_columns": list(RADAR_COLUMNS),
                # future_expert_*: the expert files the pairing gives frames t + these
                "future_expert_frames": _future_frames(self.settings),
                **b2d_boxes.spec_doc(self.settings),
                **futures.spec_doc(self.settings.masked_future),
                **future_boxes.spec_doc(self.settings.future_boxes)}


def _future_frames(s: B2DSettings) -> list[int]:
    """Frame offsets of the future expert labels (the TCP port's 4 at 2 Hz: 5, 10, 15, 20)."""
    return [STEP * k for k in range(1, s.pred_len + 1)] if "expert" in s.sensors else []


def b2d_spec(s: B2DSettings, image_format: str = "jpg") -> SampleSpec:
    """The sample spec of a bench2drive pack with these settings."""
    frame = s.frame_name
    extras: list[Extra] = []
    if "lidar" in s.sensors:
        # decoded once at pack time (docs/benchmarks.md: LAZ costs a loader 150-240x npy),
        # in the ego frame of the labels (the LAZ holds CARLA's left-handed one)
        extras.append(Extra("lidar", "lidar.npy", "points", "lidar", "float32", (None, 3), "m",
                            frame))
    if "boxes" in s.sensors:
        extras += [Extra("boxes", "boxes.npy", "npy", "boxes", "float32",
                         (None, len(B2D_BOX_COLUMNS)), "see carla_wds.pack.b2d_vocab.B2D_BOX_COLUMNS",
                         frame),
                   Extra("boxes_raw", "boxes_raw.json", "json", "json", "json", (), "", "world")]
    if "radar" in s.sensors:
        extras.append(Extra("radar", "radar.npy", "npy", "radar", "float32", (None, 5),
                            "m, rad, rad, m/s", "radar sensor"))
    for kind, (codec, modality, dtype, units) in _PER_CAMERA.items():
        if kind in s.sensors:
            extras += [Extra(f"{kind}_{cam}", f"{kind}_{cam}.png", codec, modality, dtype, (),
                             units, f"camera {cam}") for cam in CAMERAS]
    if "expert" in s.sensors:   # its length is the file's (1536 in the TCP port's data)
        extras += [Extra("expert_feature", "expert_feature.npy", "npy", "expert", "float32",
                         (None,)),
                   Extra("future_expert_feature", "future_expert_feature.npy", "npy", "expert",
                         "float32", (s.pred_len, None))]
    masked = futures.record_fields(s.pred_len) if s.masked_future else ()
    masked += future_boxes.record_fields(s.future_boxes, frame) if s.future_boxes else ()
    extras.append(Extra(MEASUREMENTS, f"{MEASUREMENTS}.npy", "record", "measurements", "record",
                        (), fields=anno_of.record_fields("expert" in s.sensors, s.pred_len)
                        + masked))
    extras += temporal.temporal_extras(s, frame)   # ego2world, can_bus, tracks (issue 27)
    extras += futures.masked_extras() if s.masked_future else []
    extras += future_boxes.extras(frame) if s.future_boxes else []
    frames = {"waypoints": frame, "target_point": frame, "boxes": frame, "lidar": frame,
              "calibration": "b2d" if s.handedness == "right" else "carla_ue4"}
    return SampleSpec(CAMERAS, s.pred_len, image_format, extras=tuple(extras),
                      frames=tuple(sorted(frames.items())))


def _wanted(s: B2DSettings) -> list[tuple[str, str, str, int]]:
    """(member, folder, what, frame offset) of every file a sample takes besides the anno."""
    out = [(f"{cam}.jpg", f"camera/rgb_{cam}", f"{cam} camera", 0) for cam in CAMERAS]
    if "lidar" in s.sensors:
        out.append(("lidar.npy", "lidar", "LiDAR", 0))
    if "radar" in s.sensors:
        out.append(("radar.npy", "radar", "radar", 0))
    if "expert" in s.sensors:   # data_collect.py names frame t's assessment t - 1
        out += [(f"expert{k}", "expert_assessment", "expert assessment" if k == 0 else
                 f"future expert assessment (frame t + {k})", s.expert_offset + k)
                for k in [0, *_future_frames(s)]]
    for kind in _PER_CAMERA:
        if kind in s.sensors:
            out += [(f"{kind}_{cam}.png", f"camera/{kind}_{cam}", f"{kind} {cam}", 0)
                    for cam in CAMERAS]
    return out


def plan_clip(ref: ClipRef, s: B2DSettings, dot_replacement: str | None = None) -> ClipPlan:
    """Open one clip and plan its frames (see the module docstring)."""
    try:
        clip = open_clip(ref, s.spool_bytes)
    except ClipError as exc:
        return ClipPlan(ref.name, filtered=f"{ref.path.name}: {exc}")
    try:
        return _ClipPlanner(clip, ref, s, dot_replacement).plan()
    finally:
        clip.close()


class _ClipPlanner:
    def __init__(self, clip, ref: ClipRef, s: B2DSettings, dot_replacement: str | None) -> None:
        self.clip, self.ref, self.s, self.dots = clip, ref, s, dot_replacement
        self.files = by_folder(clip.names())
        self.annos: dict[int, dict | str] = {}   # frame -> anno, or why it is unusable
        self.null_speed = self.ego_as_vehicle = 0
        self.tracks = temporal.TrackIndex(self._anno_or_none, s.box_radius)
        self.tables: dict[int, np.ndarray] = {}   # frame -> box table (computed once)
        self.infos = futures.Infos(self._anno_or_none, (lambda f, a: futures.kept_boxes(
            self._boxes(f, a), s.box_visibility)) if "boxes" in s.sensors else None)

    def _anno_or_none(self, t: int) -> dict | None:
        got = self.anno(t) if t in self.files.get("anno", {}) else None
        return got if isinstance(got, dict) else None

    def anno(self, t: int) -> dict | str:
        if t not in self.annos:
            try:
                doc = decode_json(self.clip.read(self.files["anno"][t]), gz=True)
                if not isinstance(doc, dict):
                    raise ValueError(f"holds a {type(doc).__name__}; expected an object")
                anno_of.compass(doc)
                for k in ("x", "y", "x_target", "y_target", "next_command"):
                    anno_of.number(doc, k)
                self.annos[t] = doc
            except ValueError as exc:
                self.annos[t] = str(exc)
        return self.annos[t]

    def plan(self) -> ClipPlan:
        frames = sorted(self.files.get("anno", {}))
        plan = ClipPlan(self.ref.name, n_frames=len(frames))
        if not frames:
            plan.filtered = "no anno/NNNNN.json.gz files; expected a Bench2Drive clip"
            return plan
        keys = [t for t in frames if t % self.s.stride == 0]
        plan.n_frames, plan.between = len(keys), len(frames) - len(keys)
        last = frames[-1]
        for t in keys:
            got = self._frame(t, last)
            if isinstance(got, ClipTask):
                plan.tasks.append(got)
            elif got is None:
                plan.tail += 1
            elif got == "loader_tail":
                plan.loader_tail += 1
            else:
                plan.skipped.append(got)
        sampled = [task.frame for task in plan.tasks]
        plan.nan_theta = sum(anno_of.compass(self.annos[t])[1] for t in sampled)
        plan.void_command = sum(anno_of.number(self.annos[t], "next_command") < 0
                                for t in sampled)
        plan.null_speed, plan.ego_as_vehicle = self.null_speed, self.ego_as_vehicle
        plan.check()
        return plan

    def _skip(self, t: int, file: str, reason: str, derived: bool = False) -> Skip:
        return Skip(self.ref.name, t, file, reason, derived=derived)

    def _frame(self, t: int, last: int) -> ClipTask | Skip | str | None:
        now = self.anno(t)
        if isinstance(now, str):
            return self._skip(t, f"anno/{t:05d}.json.gz", now)
        if self.s.masked_future and self.infos.boxless(t):   # no info of prepare_B2D's
            return "loader_tail"
        future = [t + STEP * k for k in range(1, self.s.pred_len + 1)]
        experts = self.files.get("expert_assessment") if "expert" in self.s.sensors else None
        # the future expert labels need file t + offset + 5 pred_len: past the clip's last
        # one (--all-frames --expert-pairing tcp_port's last frame), no full future either
        real = futures.real_steps(future, last, max(experts) if experts else None,
                                  self.s.expert_offset)
        if not all(real) and not self.s.masked_future or experts and \
                t + self.s.expert_offset > max(experts):   # (tcp_port: the last frame's own)
            return None
        if not self.s.all_frames and future[-1] + SAMPLES.tail > last:
            return "loader_tail"
        for f in future[:sum(real)]:   # --future-labels masked: the real ones
            got = self.anno(f) if f in self.files["anno"] else "missing"
            if isinstance(got, str):
                return self._skip(t, f"anno/{f:05d}.json.gz", f"future frame {f:05d} is "
                                  f"{got if got == 'missing' else f'unusable ({got})'}; "
                                  f"waypoints need frames {future}", derived=True)
        return self._task(t, now, [self.annos[f] if ok else now for f, ok in zip(future, real)],
                          real)

    def _task(self, t: int, now: dict, future: list[dict], real: list[bool]) -> ClipTask | Skip:
        files: dict[str, tuple[str, bytes]] = {}
        masked = {f"expert{STEP * (k + 1)}" for k, ok in enumerate(real) if not ok}
        for member, folder, what, offset in _wanted(self.s):
            if member in masked:   # a future expert file past the clip's end: masked
                continue
            name = self.files.get(folder, {}).get(t + offset)
            if name is None:
                return self._skip(t, f"{folder}/{t + offset:05d}", f"missing {what} file; "
                                  "expected one for every frame of anno/")
            files[member] = (name, self.clip.read(name))
        expert = self._experts(t, files)
        if isinstance(expert, Skip):
            return expert
        try:
            labels, record = self._values(t, now, future, files, expert)
        except ValueError as exc:
            return self._skip(t, f"anno/{t:05d}.json.gz", str(exc))
        if self.s.masked_future:
            futures.mask_labels(labels, real)
            record[futures.FUTURE_VALID] = np.asarray(real, bool)
            files[f"{futures.SDC_FUT}.npy"] = ("", codec_named("npy").encode(
                futures.sdc_fut_traj(now, self.infos.ahead(t, sorted(self.files["anno"])))))
        if self.s.future_boxes:   # the box sets of infos t+1..t+F and their poses
            try:
                table, values = future_boxes.members(t, now, self.infos.frames_ahead(
                    t, sorted(self.files["anno"]), self.s.future_boxes, 1), self._anno_or_none,
                    self._boxes, self.s.handedness == "right")
            except future_boxes.FutureFrameError as exc:
                return self._skip(t, f"anno/{exc.frame:05d}.json.gz", str(exc), derived=True)
            files[f"{future_boxes.FUTURE_BOXES}.npy"] = ("", codec_named("npy").encode(table))
            record.update(values)
        return ClipTask(self.ref.name, t, make_key(self.ref.name, t, self.dots), labels, record,
                        files)

    def _experts(self, t: int, files: dict) -> tuple[np.ndarray, dict] | Skip | None:
        """Frame t's expert file and its future ones (popped from `files`): the array and the
        future_expert values, or a Skip naming the file that is not usable."""
        if "expert0" not in files:
            return None
        arrays, names = [], []
        try:   # frame t's own values are checked with its record (record_values)
            for k in [0, *_future_frames(self.s)]:
                if f"expert{k}" not in files:   # masked (--future-labels masked): zeros
                    arrays.append(futures.no_expert(len(arrays[0]) - 2))
                    continue
                name, data = files.pop(f"expert{k}")
                names.append(name)
                arrays.append(npz_array(data))
                if k:
                    arrays[-1] = anno_of.expert_values(arrays[-1], len(arrays[0]) - 2)
            return arrays[0], anno_of.future_expert(arrays[1:])
        except ValueError as exc:   # a future file's fault is derived (not frame t's own)
            return self._skip(t, names[-1], str(exc), derived=len(names) > 1)

    def _values(self, t: int, now: dict, future: list[dict], files: dict,
                expert: tuple[np.ndarray, dict] | None) -> tuple[dict, dict]:
        theta, _ = anno_of.compass(now)
        speed = anno_of.number(now, "speed", allow_none=True)
        null_speed = speed is None
        if null_speed:
            speed = self._speed_from_positions(t)
        labels = anno_of.frame_labels([now, *future], theta, speed, self.s.handedness)
        labels["meta"] = {"episode": self.ref.name, "frame": t,
                          "command": int(anno_of.number(now, "next_command"))}
        record = anno_of.record_values(now, theta, speed, self.s.handedness,
                                       None if expert is None else expert[0])
        if expert is not None:
            record.update(expert[1])
            for member in ("expert_feature", "future_expert_feature"):
                files[f"{member}.npy"] = ("", codec_named("npy").encode(record.pop(member)))
        table = self._boxes(t, now) if "boxes" in self.s.sensors else None
        files.update(temporal.frame_members(now, speed, t, self.s, self.tracks, table))
        if table is not None:
            boxes = now.get("bounding_boxes")
            files["boxes.npy"] = ("", codec_named("npy").encode(table))
            files["boxes_raw.json"] = ("", codec_named("json").encode(boxes))
            self.ego_as_vehicle += anno_of.ego_entry(boxes)[1]
        self.null_speed += null_speed   # counted once the frame is sure to be a sample
        return labels, record

    def _boxes(self, t: int, now: dict) -> np.ndarray:
        """The box table as prepare_B2D keeps it (boxes.py): frame t - 1 for walker
        speeds, the depth PNGs for the visibility test."""
        if t not in self.tables:
            self.tables[t] = self._new_boxes(t, now)
        return self.tables[t]

    def _new_boxes(self, t: int, now: dict) -> np.ndarray:
        prev = self.anno(t - 1) if t - 1 in self.files["anno"] else None
        rules = b2d_boxes.BoxRules(self.s.box_radius, self.s.handedness, self.s.box_visibility)
        depth = None if rules.visibility == "off" else b2d_boxes.depth_maps(
            self.files, self.clip.read, t)
        return b2d_boxes.boxes_table(now, rules, prev if isinstance(prev, dict) else None, depth)

    def _speed_from_positions(self, t: int) -> float:
        """|p[t+1] - p[t-1]| / 2dt (one-sided at a clip's ends): how fast the ego moved."""
        near = [f for f in (t - 1, t + 1) if f in self.files["anno"]
                and isinstance(self.anno(f), dict)] or [t]
        pts = [(anno_of.number(self.anno(f), "x"), anno_of.number(self.anno(f), "y"))
               for f in ([near[0], near[-1]] if len(near) > 1 else [t, near[0]])]
        span = (max(near[-1], t) - min(near[0], t)) / RATE_HZ
        return math.dist(*pts) / span if span > 0 else 0.0
