"""Overlays with a mix (issue 40): `CARLAWebData(mix=SPEC, overlays=[OUT, ...])`.

Each overlay pack's manifest names the base pack it was built for (the sha256 of its
manifest, pack/overlay.py), so the caller lists the overlays of every mixed pack in one flat
list and each is joined to the mix source(s) whose manifest it names: nothing to map by hand,
and an overlay of a pack that is not mixed is refused. Per kind, the join sees one overlay over
the mix's shards (its sources' shards one after the other, as the loader lists them): a source
without an overlay of that kind has no entries, so its rows get None, the same as a sample
its overlay has no entry for. `Overlays(required=True)` needs every kind for every source
(else one line naming the source and kind) and filters each source's samples; the mix's
candidates are then renumbered among the kept samples, so its draw, `len()` and resume stay
the mix's plan over what is served.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from typing import Any, Sequence

import numpy as np

from ..plan.mix import MixError, MixPlanner

_FIX = "Fix: run `carla-wds pack-overlay OVERLAY_DIR BASE_PACK OUT --kind ...` against it"


def sources_of(where: str, built_for: str | None, shas: Sequence[str],
               sources: Sequence[str]) -> list[int]:
    """The mix sources (indexes) an overlay was built for: those whose manifest it names."""
    found = [i for i, sha in enumerate(shas) if sha == built_for]
    if not found:
        raise ValueError(f"overlay {where} was built for a pack that is not in the mix (its "
                         f"base's manifest sha256 {str(built_for)[:12]}...; the mix's packs: "
                         f"{list(sources)}). Fix: drop it from overlays=, add its base pack "
                         f"to the mix, or re-run pack-overlay against a mixed pack")
    return found


def merged(kind: str, parts: Sequence[Any | None], shard_counts: Sequence[Sequence[int]],
           sources: Sequence[str], required: bool) -> Any:
    """One kind's overlay over the mix's shards from each source's (an overlay.Overlay, or
    None where the source has none: no shard to read, no entries)."""
    missing = [s for s, p in zip(sources, parts) if p is None]
    if missing and required:
        raise ValueError(f"mix source {missing[0]} has no overlay of kind {kind!r}, and "
                         "Overlays(required=True) serves only samples with an entry in every "
                         f"overlay (it would serve none of that pack's). {_FIX} pack and pass "
                         "it in overlays=, or Overlays(required=False): its rows get None")
    first = next(p for p in parts if p is not None)
    shards, has = [], []
    for part, counts in zip(parts, shard_counts):
        shards += list(part.shards) if part is not None else [None] * len(counts)
        has += list(part.has) if part is not None else [np.zeros(n, bool) for n in counts]
    ident = hashlib.sha256(json.dumps([p and p.sha256 for p in parts]).encode()).hexdigest()
    where = ", ".join(p.where for p in parts if p is not None)
    return replace(first, where=where, sha256=ident, shards=tuple(shards), has=tuple(has))


def one_per_source(found: Sequence[Any], served: Sequence[list[int]], kind: str,
                   n_sources: int) -> list[Any | None]:
    """Each source's overlay of `kind` (None without); two for one source is refused."""
    parts: list[Any | None] = [None] * n_sources
    for overlay, mine in zip(found, served):
        if overlay.field != kind:
            continue
        for i in mine:
            if parts[i] is not None:
                raise ValueError(f"overlays {parts[i].where} and {overlay.where} both give "
                                 f"kind {kind!r} for the same mixed pack: one each is taken. "
                                 "Fix: pass one overlay per kind and pack")
            parts[i] = overlay
    return parts


def kept_planner(mixer: MixPlanner, keep: Sequence[np.ndarray],
                 counts: Sequence[int]) -> MixPlanner:
    """The mix over the kept samples only: each entry's candidates (positions among all the
    mix's samples) as positions among the kept ones; an entry left with none is refused."""
    mask = np.zeros(int(sum(counts)), bool)
    starts = np.concatenate([[0], np.cumsum(counts)])[:-1].astype(np.int64)
    for start, kept in zip(starts, keep):
        mask[start + kept] = True
    renumbered = np.cumsum(mask) - 1
    cands = []
    for i, (entry, c) in enumerate(zip(mixer.spec.entries, mixer.candidates)):
        c = renumbered[c[mask[c]]]
        if not len(c):
            raise MixError(f"mix entries[{i}] ({entry.source}): none of its samples has an "
                           "entry in every overlay, which Overlays(required=True) serves. Fix: "
                           "drop the entry or its where=, or Overlays(required=False)")
        cands.append(c.astype(np.int64))
    return MixPlanner(mixer.spec, tuple(cands)).checked()
