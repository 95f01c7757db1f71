"""Routes as sequences of samples: what a pack records so that the loader can build history
windows without reading a shard to find where a route begins or breaks.

A sample key is `<route>__<frame>` (schema.make_key), so the route and the frame number of a
sample are in its key. Each shard record of the manifest carries its first and last key and
`steps`: how often each frame difference between consecutive samples of one route occurs in
it (counting the step from the previous shard's last sample when the route goes on). From
those alone:

* `continues(shards)[i]`: shard i begins with the route shard i - 1 ended with, so the two
  must stay adjacent in an epoch's shard order (`chains`) for a window to reach back across;
* `sequence_doc(shards)`: the pack's frame step (the most common difference: 1 for TCP's
  every frame, the keyframe interval where a layout keeps every n-th frame) and its gaps (a
  step that is not the frame step: frames missing inside a route, e.g. skipped bad images).
"""
from __future__ import annotations

import math
from collections import Counter
from typing import Any, Iterable, Mapping

KEY_SEP = "__"


def key_rate_hz(spec: Mapping[str, Any]) -> float | None:
    """Frame numbers per second of a pack's keys, from its spec: `source_rate_hz` where the
    layout keeps every n-th source frame and its keys count source frames (Bench2Drive: every
    5th of 10 Hz, keys 0, 5, 10, ... at a 2 Hz `rate_hz`), else `rate_hz` (the keys count the
    saved frames: garage's 4 Hz). None where neither is a positive, finite number. The one
    rule for the packer's buckets and the loader's history strides."""
    rate = spec.get("source_rate_hz", spec.get("rate_hz"))
    try:
        rate = float(rate)
    except (TypeError, ValueError):
        return None
    return rate if math.isfinite(rate) and rate > 0 else None


def split_key(key: str) -> tuple[str, int] | None:
    """(route, frame) of a key written by schema.make_key; None for a key of another form."""
    route, sep, frame = key.rpartition(KEY_SEP)
    if not sep or not route or not frame.isdigit():
        return None
    return route, int(frame)


class StepCounter:
    """Counts frame steps between consecutive samples of one route, across shard ends."""

    def __init__(self, last_key: str = "") -> None:
        self.prev = split_key(last_key) if last_key else None
        self.steps: Counter[int] = Counter()   # of the shard being written

    def add(self, key: str) -> None:
        here = split_key(key)
        if self.same_route(key):
            self.steps[here[1] - self.prev[1]] += 1
        self.prev = here

    def same_route(self, key: str) -> bool:
        """Does `key` go on with the route of the sample counted last?"""
        here = split_key(key)
        return here is not None and self.prev is not None and here[0] == self.prev[0]

    def take(self) -> dict[str, int]:
        """This shard's counts (JSON keys are strings), and a fresh count for the next."""
        done = {str(k): v for k, v in sorted(self.steps.items())}
        self.steps = Counter()
        return done


def _steps(shards: Iterable[Mapping[str, Any]]) -> Counter[int]:
    total: Counter[int] = Counter()
    for s in shards:
        total.update({int(k): int(v) for k, v in (s.get("steps") or {}).items()})
    return total


def sequence_doc(shards: list[Mapping[str, Any]]) -> dict[str, Any]:
    """The manifest's `sequence` entry: frame step, gaps, and shards that continue a route."""
    steps = _steps(shards)
    # the most common step; on a tie the smaller, so a route with gaps never sets it
    step = min(steps, key=lambda d: (-steps[d], d)) if steps else 1
    return {"frame_step": step, "gaps": sum(n for d, n in steps.items() if d != step),
            "continuing_shards": sum(continues(shards))}


def has_keys(shards: list[Mapping[str, Any]]) -> bool:
    """Whether the shard records carry first and last keys (packs made before issue 27 don't)."""
    return all(s.get("first_key") and s.get("last_key") for s in shards if s.get("samples"))


def continues(shards: list[Mapping[str, Any]]) -> list[bool]:
    """Per shard: does it begin with the route its predecessor (in pack order) ended with?"""
    out = [False] * len(shards)
    prev_route = None
    for i, s in enumerate(shards):
        if not s.get("samples"):   # an empty shard keeps its neighbours linked
            out[i] = prev_route is not None
            continue
        first, last = (split_key(s.get(k) or "") for k in ("first_key", "last_key"))
        out[i] = first is not None and prev_route is not None and first[0] == prev_route
        prev_route = last[0] if last else None
    return out


def chains(shards: list[Mapping[str, Any]]) -> list[list[int]]:
    """Runs of shards that a route links (each shard in exactly one run, in pack order)."""
    runs: list[list[int]] = []
    for i, linked in enumerate(continues(shards)):
        if linked and runs:
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs
