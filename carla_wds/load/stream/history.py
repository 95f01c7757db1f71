"""History windows (issue 27): each sample with the K earlier frames of its route.

No frame is stored twice: a pack holds every frame once, and the windows are put together at
load time from the route's consecutive samples, which a worker reads in order anyway.

* The plan keeps the shards a route links adjacent in the epoch's order (plan.shard_order with
  sequence.chains) and has each worker read the `context` samples before its first one
  (plan.context_before): every frame a window needs reaches the worker, in order, before the
  window's own frame, and no shard is read more often than without windows.
* `windows` (before the shuffle buffer, on encoded bytes) keeps the route's last frames and
  gives each served sample a window of references to them, oldest first; the shuffle buffer
  then mixes windows, as it mixed samples.
* `flatten` (after grouping) turns a group of B windows into B * (K + 1) frames, which the
  usual decode stage decodes into one batch; each earlier frame is decoded with its window's
  key as its draw key (rng.draw_key), so augmentation is the same for every frame of a window.
* `windowed` (in the main process, views only) gives every per-frame tensor its time axis.

A time step whose frame the route does not have (before the route's first frame, or across a
gap: a frame missing inside the route) is padding: all its values are zeros, as eval padding
is, and `frame_valid` is False. A window is cut at a gap: the steps older than it are padding
too, even where those frames exist, so a window never spans a gap.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace
from dataclasses import fields as dc_fields
from typing import Any, Iterable, Iterator, Mapping

import torch

from ...manifest import Manifest
from ...schema import SchemaError
from ...sequence import chains, has_keys, key_rate_hz, split_key
from ..decode.batch import CARLABatch

log = logging.getLogger(__name__)
Raw = dict[str, Any]
WINDOW = "__window__"   # a window: its frames' raw samples, oldest first (None: padding)


def _route_frame(raw: Raw) -> tuple[str, int]:
    found = split_key(raw["__key__"])
    if found is None:
        raise SchemaError(f"shard {raw.get('__shard__')} sample {raw['__key__']!r}: history "
                          "windows need keys <route>__<frame> as `carla-wds pack` writes them. "
                          "Fix: re-pack with carla-wds pack, or load with history=0")
    return found


def past_frames(recent: dict[int, Raw], frame: int, history: int, every: int, step: int
                ) -> list[Raw | None]:
    """The `history` frames before `frame`, every `every` frame numbers, oldest first; cut at
    the first frame missing at the pack's frame `step` (a gap), even between two steps of
    the window: the steps from the gap back are None, so a window never spans a gap."""
    past: list[Raw | None] = []
    reached = frame   # the oldest frame back to which none is missing
    for j in range(1, history + 1):
        want = frame - j * every
        while reached > want and reached - step in recent:
            reached -= step
        if reached > want:
            past += [None] * (history - j + 1)
            break
        past.append(recent[want])
    return past[::-1]


# stage: raw samples (with "__context__" ones, see shardio.read_with_context) -> windows
def windows(samples: Iterable[Raw], history: int, every: int, step: int,
            by_shard: Mapping[str, tuple[int, int, int]] | None = None) -> Iterator[Raw]:
    """`every`: frame numbers between two steps of a window (history_stride * frame_step);
    `step`: the pack's frame step, at which every frame between a window's steps must be
    there too. The worker reads every sample of that span (plan.context_before reads
    history * history_stride samples back), so a frame missing here is missing in the route.
    `by_shard`: a mix, each shard's (pack, every, step): a route is its pack's (two packs
    may name routes alike), and packs of other sample rates step by their own frames."""
    recent: dict[int, Raw] = {}
    route: Any = None
    for raw in samples:
        if "__error__" in raw:   # a sample that could not be read stays a marker
            yield raw
            continue
        name, frame = _route_frame(raw)
        if by_shard is not None:
            pack, every, step = by_shard[raw["__shard__"]]
            name = (pack, name)
        if name != route:
            recent, route = {}, name
        if not raw.get("__context__"):
            yield {"__key__": raw["__key__"],
                   WINDOW: (*past_frames(recent, frame, history, every, step), raw)}
        recent[frame] = raw
        # only what a later window of this route can still reach: this frame's own window
        # again too (a mix that drew the frame twice reads it twice in a row)
        for old in [f for f in recent if f < frame - history * every]:
            del recent[old]


# stage: groups of windows -> groups of their frames, window after window, oldest first
def flatten(groups: Iterable[list[Raw | None]], steps: int) -> Iterator[list[Raw | None]]:
    for group in groups:
        flat: list[Raw | None] = []
        for item in group:
            if item is None or WINDOW not in item:   # padding, or a marker for the frame
                flat += [None] * (steps - 1) + [item]
                continue
            *past, now = item[WINDOW]
            key = now["__key__"]
            flat += [None if p is None else {**p, "__draw_key__": key} for p in past] + [now]
        yield flat


@dataclass(frozen=True)
class Windows:
    """Encoded stage (served.py): raw samples -> windows (`windows`)."""
    history: int
    every: int   # frame numbers between two steps: history_stride * the pack's frame_step
    step: int    # the pack's frame step
    # a mix: each shard url's (pack, every, step), so that a route is its own pack's and a
    # window spans one time in every pack (history_settings); empty for one pack
    by_shard: tuple[tuple[str, tuple[int, int, int]], ...] = ()

    def __call__(self, samples: Iterable[Raw], at: Any) -> Iterator[Raw]:
        return windows(samples, self.history, self.every, self.step,
                       dict(self.by_shard) if self.by_shard else None)

    @classmethod
    def of(cls, history: int, sequence: Mapping[str, Any]) -> "Windows":
        """The stage for history_settings' record of the packs."""
        every, step = sequence["windows"][0]
        return cls(history, every, step, sequence.get("by_shard", ()))


@dataclass(frozen=True)
class Flatten:
    """Worker stage (pipeline.py): groups of windows -> groups of their frames (`flatten`)."""
    steps: int

    def __call__(self, groups: Iterable[list[Raw | None]], at: Any
                 ) -> Iterator[list[Raw | None]]:
        return flatten(groups, self.steps)


def _split(value: Any, n: int, steps: int) -> Any:
    if isinstance(value, torch.Tensor) and value.dim() and value.shape[0] == n * steps:
        return value.unflatten(0, (n, steps))
    if isinstance(value, dict):
        return {k: _split(v, n, steps) for k, v in value.items()}
    if isinstance(value, list) and len(value) == n * steps:
        return [value[i * steps:(i + 1) * steps] for i in range(n)]
    return value


def windowed(batch: CARLABatch, steps: int) -> CARLABatch:
    """A decoded batch of B * steps frames -> B windows: every per-frame tensor (B, steps,
    ...), `frame_valid` (B, steps), `valid` and `keys` those of each window's own frame, the
    frames' keys in `frame_keys` ("" for padding); with ego2world selected, the transform
    from each frame's ego to the window's own (`ego2current`; zeros where padding)."""
    n = len(batch.keys) // steps
    frame_valid = batch.valid.view(n, steps)
    parts = {f.name: _split(getattr(batch, f.name), n, steps)
             for f in dc_fields(batch)
             if f.name not in ("keys", "valid", "errors", "frame_valid", "frame_keys")}
    keys = [batch.keys[i * steps:(i + 1) * steps] for i in range(n)]
    out = replace(batch, **parts, keys=[k[-1] for k in keys], valid=frame_valid[:, -1].clone(),
                  frame_valid=frame_valid, frame_keys=keys)
    for name in ("ego2world", "ego2world_rh"):
        if name in out.fields and isinstance(out.fields[name], torch.Tensor):
            out.fields[name.replace("2world", "2current")] = to_current(out.fields[name],
                                                                        frame_valid)
    return out


def to_current(ego2world: torch.Tensor, frame_valid: torch.Tensor) -> torch.Tensor:
    """(B, T, 4, 4) poses -> the transform from each step's ego frame to the last step's:
    inverse(pose[-1]) @ pose[t], the inverse of a rigid transform taken as (R^T, -R^T t) so
    a padding pose (zeros) cannot make it singular; zeros where either step is padding."""
    now = ego2world[:, -1:]
    rot_t = now[..., :3, :3].transpose(-1, -2)
    inv = torch.zeros_like(now)
    inv[..., :3, :3] = rot_t
    inv[..., :3, 3:] = -rot_t @ now[..., :3, 3:]
    inv[..., 3, 3] = 1
    rel = inv @ ego2world
    keep = frame_valid & frame_valid[:, -1:]
    return rel * keep[..., None, None].to(rel.dtype)


# Upper bounds of the history settings (issue 38), far above real recipes: UniAD's and VAD's
# queues hold 3-4 frames, the clip benchmarks 32 (docs/benchmarks.md); a stride of 1,000
# samples is over 8 minutes at 2 Hz. They match the trainer's data.history bounds
# (train/config.py). The frames a worker keeps for windows are one route's within the span,
# so the route's length bounds the memory; these bound the context reads and batch shapes.
MAX_HISTORY = 256
MAX_STRIDE = 1000


def frame_rate(manifest: Manifest) -> float | None:
    """Frame numbers per second of the pack's keys (sequence.key_rate_hz of its spec)."""
    return key_rate_hz(manifest.doc.get("spec") or {})


def frame_step(manifest: Manifest) -> int:
    """Frame numbers between two samples of a route in the pack (its sequence record)."""
    return int((manifest.doc.get("sequence") or {}).get("frame_step") or 1)


def _seconds(stride: str) -> float | None:
    try:
        seconds = float(stride[:-1])
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds > 0 else None


def _stride(manifest: Manifest, stride: int | str) -> int | str:
    """history_stride as samples: a whole number, or seconds written "0.5s": that many
    seconds of frame numbers (frame_rate), which must be a whole number of the pack's frame
    steps (sequence.frame_step: 5 frame numbers a sample on Bench2Drive, 1 on garage)."""
    if not (isinstance(stride, str) and stride.endswith("s")):
        return stride
    rate, seconds = frame_rate(manifest), _seconds(stride)
    step = frame_step(manifest)
    if rate is None or seconds is None:
        recorded = (manifest.doc.get("spec") or {}).get("rate_hz")
        raise ValueError(f"history_stride={stride!r}: expected a positive, finite number of "
                         "seconds such as '0.5s', in a pack that records its frame rate "
                         f"({manifest.where}: rate_hz {recorded!r})")
    samples = seconds * rate / step
    if not (math.isfinite(samples) and 1 <= round(samples) <= MAX_STRIDE
            and abs(samples - round(samples)) <= 1e-6):
        raise ValueError(f"history_stride={stride!r}: {seconds:g} s is {samples:g} sample steps "
                         f"of {manifest.where} ({step} frame numbers at {rate:g} Hz each, "
                         f"{step / rate:g} s); choose a whole multiple of {step / rate:g} s, "
                         f"at most {MAX_STRIDE} of them")
    return int(round(samples))


def _check(history: Any, stride: Any) -> None:
    """Whole numbers within the bounds (a bool is not one: history=True is a mistake)."""
    whole = all(isinstance(v, int) and not isinstance(v, bool) for v in (history, stride))
    if not (whole and 0 <= history <= MAX_HISTORY and 1 <= stride <= MAX_STRIDE):
        raise ValueError(f"history={history!r}, history_stride={stride!r}: expected whole "
                         f"numbers, 0 <= history <= {MAX_HISTORY} (earlier frames) and "
                         f"1 <= history_stride <= {MAX_STRIDE} (samples), or history_stride "
                         "in seconds such as '0.5s'")


def history_settings(manifests: list[Manifest], history: int, stride: int | str
                     ) -> tuple[int, int, dict[str, Any]]:
    """Checked history settings, and what the workers need of the packs' sequence records
    (a mix's packs one after the other: their shards' chains offset by the shards before).
    The stride returned is the most samples any pack steps by (the context a worker reads
    back); `windows` holds each pack's (every, step), `by_shard` (a mix) each shard's
    (pack, every, step)."""
    strides = [_stride(m, stride) for m in manifests]   # seconds: each pack's own samples
    for s in dict.fromkeys(strides):
        _check(history, s)
    if not history:
        return 0, strides[0], {}
    steps = [frame_step(m) for m in manifests]
    _one_time(manifests, stride, strides, steps)
    runs: list[tuple[int, ...]] = []
    n_shards = 0
    for manifest in manifests:
        runs += [tuple(n_shards + s for s in c) for c in _chains(manifest)]
        n_shards += len(manifest.doc["shards"])
    per_pack = [(s * st, st) for s, st in zip(strides, steps)]
    record: dict[str, Any] = {"chains": tuple(runs), "windows": tuple(per_pack)}
    if len(manifests) > 1:
        record["by_shard"] = tuple((u, (i, *w)) for i, (m, w) in enumerate(zip(manifests,
                                                                                per_pack))
                                   for u in m.shard_urls())
    return history, max(strides), record


def _one_time(manifests: list[Manifest], stride: int | str, strides: list[int],
              steps: list[int]) -> None:
    """A window's steps must mean one time in every pack of a mix: the same stride and
    frame step everywhere, or packs that record their rates and steps of equal seconds."""
    rates = [frame_rate(m) for m in manifests]
    if len(set(zip(strides, steps))) == 1 and len(set(rates) - {None}) <= 1:
        return
    spans = {round(s * st / r, 9) for s, st, r in zip(strides, steps, rates) if r}
    if None in rates or len(spans) > 1:
        seconds = sorted({round(st / r, 9) for st, r in zip(steps, rates) if r})
        raise ValueError(f"history_stride={stride!r} over packs of frame steps "
                         f"{sorted(set(steps))} at {sorted({r for r in rates if r})} frame "
                         f"numbers a second ({seconds} s a sample): a window's steps would "
                         "mean other times in each pack. Fix: history_stride in seconds, a "
                         "whole multiple of every pack's sample time (e.g. "
                         f"'{max(seconds or [0.5]):g}s'), in packs that record their rate")


def _chains(manifest: Manifest) -> list[list[int]]:
    shards = manifest.doc["shards"]
    if not has_keys(shards):
        raise ValueError(f"{manifest.where}: this pack was made before carla-wds recorded where "
                         "routes begin in its shards, which history windows need. Fix: "
                         "re-pack it with this version, or load with history=0")
    runs = chains(shards)
    if len(runs) < len(shards) / 2:   # the shuffle mixes runs, not shards
        log.warning("%s: %d of %d shards go on with a route of the shard before, so an epoch "
                    "shuffles %d runs of linked shards; pack with --route-shards to mix more",
                    manifest.where, len(shards) - len(runs), len(shards), len(runs))
    return runs
