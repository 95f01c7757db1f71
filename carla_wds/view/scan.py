"""The report's first pass: every sample's light labels (route, frame, command, speed), read
from the shards as `inspect` reads them (shardread: one sample in memory at a time, sha256
checked while streaming), and the deterministic, stratified choice of samples to draw.

The choice: samples fall into strata of (route, command, speed bin); the report greedily takes
the next sample of the stratum whose route, command and speed bin were drawn least so far (so
a few samples already span every command and route), ties going to the stratum that has
waited longest (at first: by the sha256 of the sample keys), and within a stratum in order of
the sha256 of its keys. Nothing is random: the same pack gives the same report.
"""
from __future__ import annotations

import hashlib
import logging
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..manifest import Manifest
from ..modalities.boxes import BOX_CLASSES
from ..remote import RemoteOptions
from ..schema import COMMAND_NAMES, SchemaError, decode_member
from ..shardread import ShardRef, open_shard, samples_of
from ..tario import ShardError

log = logging.getLogger(__name__)

# Speed bins (m/s) the choice spreads over: standing, creeping, urban, faster.
SPEED_EDGES: tuple[float, ...] = (0.1, 2.0, 5.0, 8.0)
SPEED_BINS: tuple[str, ...] = ("stopped", "< 2 m/s", "2-5 m/s", "5-8 m/s", ">= 8 m/s")
_TOWN = re.compile(r"town[_ ]?(\d+)", re.I)
_CLIP = re.compile(r"^(.+?)_Town\d+")   # case-sensitive: clips are <Scenario>_TownNN_...


_EGO = BOX_CLASSES["ego"]
_CLASS_NAMES = {v: k.replace("_", " ") for k, v in BOX_CLASSES.items()}
_CONTROLS = ("steer", "throttle", "brake")   # the expert's, in a measurements record
NOT_ONE_HOT = -1   # Row.command of a target_command with no single hot entry


def command_name(index: int) -> str:
    """A Row's command as the report labels it: its RoadOption name, or what the shard holds
    where that is no command this version knows (a one-hot of another width, or none)."""
    if 0 <= index < len(COMMAND_NAMES):
        return COMMAND_NAMES[index]
    if index == NOT_ONE_HOT:
        return "not one-hot"
    return f"unknown command (one-hot index {index})"


class ViewError(ValueError):
    """A pack the report cannot read; one line naming the shard and the fix."""


@dataclass(frozen=True)
class Row:
    """One sample's light labels: what the choice and the histograms need."""
    key: str
    shard: int
    route: str
    frame: int
    command: int    # the one-hot's index (COMMAND_NAMES for a known one), or NOT_ONE_HOT
    speed: float    # m/s
    end: tuple[float, float] = (float("nan"), float("nan"))   # last waypoint, label axes
    classes: tuple[int, ...] = ()   # its boxes' classes (not the ego), where the pack has boxes
    controls: tuple[float, float, float] | None = None   # the expert's steer, throttle, brake

    @property
    def speed_bin(self) -> int:
        return int(np.searchsorted(SPEED_EDGES, self.speed, side="right"))


def town_of(route: str) -> str:
    """'Town12' from a route or clip name holding a town's number, else '?'."""
    m = _TOWN.search(route)
    return f"Town{int(m.group(1)):02d}" if m else "?"


def scenario_of(route: str) -> str:
    """A clip's scenario: the name before '_TownNN' of its last path part (clips named
    <Scenario>_TownNN_RouteNNN_...), else its top folder when that names no town (folders of
    routes grouped by scenario), else '-'."""
    parts = [p for p in route.split("/") if p]
    if parts and (m := _CLIP.match(parts[-1])):
        return m.group(1)
    if len(parts) > 1 and not _TOWN.search(parts[0]):
        return parts[0]
    return "-"


def _row(spec: Any, raw: dict[str, Any], shard: int, where: str) -> Row:
    speed = decode_member(spec, raw, "speed.json", where)
    meta = decode_member(spec, raw, "meta.json", where)
    onehot = np.asarray(decode_member(spec, raw, "target_command.npy", where)).reshape(-1)
    if not isinstance(speed, (int, float)) or isinstance(speed, bool) or not isinstance(meta, dict):
        raise ValueError(f"{where}: speed.json or meta.json hold other types than a pack writes")
    route = str(meta.get("episode", raw["__key__"].rsplit("__", 1)[0]))
    # any width: an index past COMMAND_NAMES or no single hot entry is labelled, not an error
    command = int(onehot.argmax()) if np.count_nonzero(onehot) == 1 else NOT_ONE_HOT
    return Row(raw["__key__"], shard, route, int(meta.get("frame", -1)), command, float(speed),
               **_whole_pack(spec, raw, where))


def _member(spec: Any, modality: str) -> str | None:
    return next((e.member for e in spec.extras if e.modality == modality and e.twin_of is None),
                None)


def _whole_pack(spec: Any, raw: dict[str, Any], where: str) -> dict[str, Any]:
    """What the whole-pack charts need of a sample, each where the pack holds it: the last
    waypoint, its boxes' classes and the expert's controls (a few numbers: bounded work)."""
    wp = np.asarray(decode_member(spec, raw, "waypoints.npy", where), np.float64).reshape(-1, 2)
    out: dict[str, Any] = {"end": (float(wp[-1, 0]), float(wp[-1, 1]))} if len(wp) else {}
    if (boxes := _member(spec, "boxes")) and boxes in raw:
        table = np.asarray(decode_member(spec, raw, boxes, where))
        if table.ndim == 2 and table.shape[0] and table.shape[1]:
            out["classes"] = tuple(int(c) for c in table[:, 0] if int(c) != _EGO)
    if (record := _member(spec, "measurements")) and record in raw:
        m = decode_member(spec, raw, record, where)
        if all(k in (getattr(getattr(m, "dtype", None), "names", None) or ()) for k in _CONTROLS):
            out["controls"] = tuple(float(m[k]) for k in _CONTROLS)
    return out


def _raws(manifest: Manifest, shard: int, remote: RemoteOptions | None,
          verify: bool = False) -> Iterator[dict]:
    s = manifest.shards[shard]
    ref = ShardRef(manifest.shard_urls()[shard], s.samples, s.bytes, s.sha256)
    stream = open_shard(ref.url, None, ref.sha256, ref.bytes, verify=verify, remote=remote)
    try:
        yield from samples_of(stream, ref)
    finally:
        stream.close()


def _unreadable(manifest: Manifest, shard: int, exc: Exception) -> ViewError:
    text = str(exc).rstrip(".")
    if "Fix:" in text:   # the reader's own message names the shard and its fix
        return ViewError(text)
    return ViewError(f"{manifest.shard_urls()[shard]}: cannot read it ({text}). Fix: run "
                     "`carla-wds verify` on the pack and re-pack the shard it names")


def scan(manifest: Manifest, remote: RemoteOptions | None = None,
         progress: Any = None) -> list[Row]:
    """Every sample's Row, in pack order; `progress` (a tqdm) is advanced per sample. Each
    shard is hashed against the manifest before it is read (the report describes a pack as
    it was packed, or names the shard that is not)."""
    rows: list[Row] = []
    for i in range(len(manifest.shards)):
        try:
            for raw in _raws(manifest, i, remote, verify=True):
                rows.append(_row(manifest.spec, raw, i, f"{manifest.shard_urls()[i]}:"
                                 f"{raw['__key__']}"))
                if progress is not None:
                    progress.update(1)
        except (ShardError, SchemaError, KeyError, ValueError) as exc:
            raise _unreadable(manifest, i, exc) from None
    return rows


def read_samples(manifest: Manifest, keys: list[str], shards: set[int],
                 remote: RemoteOptions | None = None) -> list[dict]:
    """The raw samples (member bytes) of `keys`, in the order of `keys`, reading only the
    shards that hold them."""
    wanted, found = set(keys), {}
    for i in sorted(shards):
        try:
            found.update({r["__key__"]: r for r in _raws(manifest, i, remote)
                          if r["__key__"] in wanted})
        except (ShardError, KeyError, ValueError) as exc:
            raise _unreadable(manifest, i, exc) from None
    return [found[k] for k in keys if k in found]


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def choose(rows: list[Row], n: int) -> list[Row]:
    """Up to n rows spread over routes, commands and speed bins (the module's rule)."""
    strata: dict[tuple[str, int, int], list[Row]] = {}
    for r in rows:
        strata.setdefault((r.route, r.command, r.speed_bin), []).append(r)
    # each stratum's samples, next first; `left` holds each stratum's next one
    queues = [sorted(q, key=lambda r: _digest(r.key), reverse=True) for q in strata.values()]
    left = sorted(((q.pop(), q) for q in queues), key=lambda e: _digest(e[0].key))
    seen: list[Counter] = [Counter(), Counter(), Counter()]
    chosen: list[Row] = []
    while left and len(chosen) < n:
        # fewest times its route, command and speed bin were drawn so far; ties: first
        j = min(range(len(left)), key=lambda j: (seen[0][left[j][0].route]
                                                 + seen[1][left[j][0].command]
                                                 + seen[2][left[j][0].speed_bin]))
        best, queue = left.pop(j)
        chosen.append(best)
        for c, v in zip(seen, (best.route, best.command, best.speed_bin)):
            c[v] += 1
        if queue:   # the stratum's next sample waits at the end: other strata come first
            left.append((queue.pop(), queue))
    return chosen


def counts(rows: list[Row], skipped: list[dict]) -> dict[str, dict[str, int]]:
    """The histograms' counts: samples per command, speed bin, town and scenario, boxes per
    class; skipped
    frames per reason (numbers folded, so one kind of fault is one bar)."""
    return {"commands": dict(Counter(command_name(r.command) for r in rows)),
            "speeds": dict(Counter(SPEED_BINS[r.speed_bin] for r in rows)),
            "towns": dict(Counter(town_of(r.route) for r in rows)),
            "scenarios": dict(Counter(scenario_of(r.route) for r in rows)),
            "box_classes": dict(Counter(_CLASS_NAMES.get(c, f"class {c}") for r in rows
                                        for c in r.classes)),
            "skipped": dict(Counter(reason_of(s) for s in skipped))}


def reason_of(skip: dict) -> str:
    """A skipped frame's reason with its numbers folded to N ('truncated at byte N')."""
    return re.sub(r"\d+", "N", str(skip.get("reason", "?")))[:80]
