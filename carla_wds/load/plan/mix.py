"""Mixing (issue 29): an epoch drawn from entries over packs, by weight, repeat or count.

    mix = {"epoch_size": 4000,          # optional: the samples `weight` entries share
           "entries": [
               {"source": "shards/train", "where": {"start": ["from_stop"]}, "weight": 0.3},
               {"source": "shards/train", "weight": 0.7},
               {"source": "shards/extra", "repeat": 2},       # every sample, twice
               {"source": "shards/rare", "count": 500}],       # exactly 500 samples
           "schedule": [{"from_epoch": 5, "weights": [0.5, 0.5]}],   # optional curriculum
           "stratify": False}   # True: every global batch holds the entries' shares (strata.py)
    data = CARLAWebData(mix=mix, batch_size=32)    # or a YAML file's path

The epoch is a precomputed plan, a pure function of (seed, epoch, spec, manifests): each
entry's candidate samples are those of its source that match `where` (bucket values recorded
at pack time, pack/buckets.py: every listed key must match one of its listed values);
`repeat: r` takes them r times, `count: n` and `weight: w` (n = w / sum of weights x
epoch_size, rounded by largest remainders so the shares add up exactly) take whole copies
and then a seeded draw without replacement for the rest. The drawn samples are read in the
epoch's shard order (so reads stay sequential), cut into equal whole-batch ranges per rank
and worker as any epoch is, and shuffled by the usual buffer. So `len()` is exact, every rank
gets equal batches, and resume is (plan, position) as always; in another split, the rest of
the draw (reshape.py). History windows: each drawn sample's frames before it are read in
front of it (reshape.cut_stream). Eval ignores weights: every sample of the mix's sources
once.

Sources of alike samples are served as they are; of different layouts, in their common view
(common_view.py: entries' `cameras: {common: own}`, the spec's `view: {waypoint_hz, pred_len}`).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ...rng import derive_seed, numpy_rng
from ...safeyaml import read_yaml
from ...suggest import did_you_mean
from .epoch import WorkerPlan, batches_per_rank, shard_order
from .reshape import cut_stream, plan_stream
from .strata import plan_strata

ENTRY_KEYS = ("source", "where", "weight", "repeat", "count", "cameras")
SPEC_KEYS = ("entries", "epoch_size", "schedule", "stratify", "view")
VIEW_KEYS = ("waypoint_hz", "pred_len")   # the common view of packs of other layouts
# Upper bounds on the spec's own sizes (issue 38), far above any real recipe. Every worker
# plans its epoch as int64 arrays of the epoch's samples (drawn, sorted, located: ~5 copies),
# so 10^7 samples cost ~400 MB in each; SimLingo's and Bench2Drive's whole datasets are a few
# 10^6 samples. A longer training run takes more epochs (each draws anew), not a longer one.
MAX_EPOCH_SAMPLES = 10_000_000
# `repeat` takes an entry's every sample r times; past a few hundred it is a count in
# disguise (and a typo such as 1e9 would plan 10^9 x its samples).
MAX_REPEAT = 1_000
# Weights are relative shares (fractions, percentages or sample counts): bounded so that the
# sum of any spec's weights stays finite (two weights of 1e308 overflow it to inf).
MAX_WEIGHT = 1e12
LIMITS = {"weight": MAX_WEIGHT, "repeat": MAX_REPEAT, "count": MAX_EPOCH_SAMPLES}
_WHY = {"weight": " (weights are relative shares: scale them down together)",
        "repeat": "; for more copies give count: N samples",
        "count": f"; an epoch holds at most {MAX_EPOCH_SAMPLES:,} samples: train more "
                 "epochs instead (each draws anew)"}


class MixError(ValueError):
    """A mix spec that cannot be planned; one line naming the entry and the fix."""


@dataclass(frozen=True)
class Entry:
    source: str
    where: tuple[tuple[str, tuple[str, ...]], ...] = ()
    weight: float | None = None
    repeat: int | None = None
    count: int | None = None
    # common camera name -> this source's own (a mix of layouts); outside repr (identity)
    cameras: tuple[tuple[str, str], ...] = field(default=(), repr=False)


@dataclass(frozen=True)
class MixSpec:
    entries: tuple[Entry, ...]
    epoch_size: int | None = None
    schedule: tuple[tuple[int, tuple[float, ...]], ...] = ()   # (from_epoch, weights)
    stratify: bool = False   # every global batch holds each entry's share (strata.py)
    view: tuple[tuple[str, Any], ...] = field(default=(), repr=False)   # common_view.py

    def sources(self) -> list[str]:
        return list(dict.fromkeys(e.source for e in self.entries))

    def identity(self) -> str:
        # a view's options and cameras only when given: older specs keep their identity
        more = (self.view, tuple(e.cameras for e in self.entries))
        text = repr(self) + (repr(more) if self.view or any(more[1]) else "")
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def weights(self, epoch: int) -> list[float | None]:
        now = [e.weight for e in self.entries]
        for start, weights in self.schedule:
            if epoch >= start:
                now = [w if e.weight is not None else None
                       for e, w in zip(self.entries, weights)]
        return now


def _unknown(given: Mapping, valid: tuple[str, ...], where: str) -> None:
    bad = sorted(set(given) - set(valid))
    if bad:
        raise MixError(f"{where}: unknown keys {bad}; valid keys are {list(valid)}")


def _entry(doc: Any, i: int) -> Entry:
    where = f"mix entries[{i}]"
    if not isinstance(doc, Mapping) or not isinstance(doc.get("source"), str):
        raise MixError(f"{where}: expected a mapping with a source (a pack folder or "
                       f"manifest), got {doc!r}")
    _unknown(doc, ENTRY_KEYS, where)
    ways = [k for k in ("weight", "repeat", "count") if doc.get(k) is not None]
    if len(ways) != 1:
        raise MixError(f"{where}: give exactly one of weight, repeat, count (got {ways})")
    way, value = ways[0], doc[ways[0]]
    ok = (isinstance(value, (int, float)) and not isinstance(value, bool)
          and 0 < value <= LIMITS[way] and (way == "weight" or float(value).is_integer()))
    if not ok:   # inf and nan too: 0 < value <= limit is False for both
        valid = (f"a number > 0 and at most {MAX_WEIGHT:g}" if way == "weight" else
                 f"a whole number > 0 and at most {LIMITS[way]:,}")
        raise MixError(f"{where}: {way}={value!r}; expected {valid}{_WHY[way]}")
    filt = doc.get("where") or {}
    if not isinstance(filt, Mapping) or not all(
            isinstance(v, (list, str)) for v in filt.values()):
        raise MixError(f"{where}: where={filt!r}; expected {{bucket: [values]}}")
    cond = tuple(sorted((str(k), tuple(sorted([v] if isinstance(v, str) else map(str, v))))
                        for k, v in filt.items()))
    number = float(value) if way == "weight" else int(value)
    return Entry(doc["source"], cond, **{way: number}, cameras=_cameras(doc, where))


def _cameras(doc: Mapping, where: str) -> tuple[tuple[str, str], ...]:
    given = doc.get("cameras") or {}
    if not isinstance(given, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in given.items()):
        raise MixError(f"{where}: cameras={given!r}; expected {{common name: its own camera}}, "
                       "e.g. {front: rgb_front}")
    return tuple(sorted(given.items()))


def mix_spec(spec: MixSpec | Mapping | str | Path) -> MixSpec:
    """A MixSpec from itself, a mapping, or a YAML file's path; bad keys and values are
    one-line errors listing the valid ones."""
    if isinstance(spec, MixSpec):
        return spec
    if isinstance(spec, (str, Path)):
        spec = read_yaml(spec, "mix spec")
    if not isinstance(spec, Mapping):
        raise MixError(f"mix: expected a mapping with entries, got {spec!r}")
    _unknown(spec, SPEC_KEYS, "mix")
    entries = tuple(_entry(d, i) for i, d in enumerate(spec.get("entries") or []))
    if not entries:
        raise MixError("mix: no entries; give entries: [{source: ..., weight: ...}, ...]")
    size = spec.get("epoch_size")
    if size is not None and not (isinstance(size, int) and not isinstance(size, bool)
                                 and 0 < size <= MAX_EPOCH_SAMPLES):
        raise MixError(f"mix epoch_size={size!r}; expected a whole number > 0 and at most "
                       f"{MAX_EPOCH_SAMPLES:,}{_WHY['count']}")
    stratify = spec.get("stratify", False)
    if not isinstance(stratify, bool):
        raise MixError(f"mix stratify={stratify!r}; expected true or false")
    schedule = tuple(_step(step, i, entries) for i, step in enumerate(spec.get("schedule") or []))
    return MixSpec(entries, size, tuple(sorted(schedule)), stratify, _view(spec.get("view")))


def _view(view: Any) -> tuple[tuple[str, Any], ...]:
    if view is not None and not isinstance(view, Mapping):   # common_view.py checks values
        raise MixError(f"mix view={view!r}; expected {{waypoint_hz: H, pred_len: N}}")
    _unknown(view or {}, VIEW_KEYS, "mix view")
    return tuple(sorted((view or {}).items()))


def _step(step: Any, i: int, entries: tuple[Entry, ...]) -> tuple[int, tuple[float, ...]]:
    """One schedule step: (from_epoch, a weight per entry; null or any value for a repeat or
    count entry), each weight entry's held to what `weight` itself may be."""
    if not (isinstance(step, Mapping) and isinstance(step.get("from_epoch"), int)
            and isinstance(step.get("weights"), list) and len(step["weights"]) == len(entries)):
        raise MixError(f"mix schedule[{i}]: expected {{from_epoch: N, weights: [one per "
                       f"entry, {len(entries)}]}}, got {step!r:.200}")
    try:
        weights = tuple(None if w is None else float(w) for w in step["weights"])
    except (TypeError, ValueError):
        raise MixError(f"mix schedule[{i}]: weights {step['weights']!r:.200}; expected "
                       "numbers (null for repeat and count entries)") from None
    for j, e in enumerate(entries):
        w = weights[j]
        if e.weight is not None and not (w is not None and 0 < w <= MAX_WEIGHT):
            raise MixError(f"mix schedule[{i}].weights[{j}] (entries[{j}], {e.source}): "
                           f"{step['weights'][j]!r:.40}; every weight entry needs a number > 0 "
                           f"and at most {MAX_WEIGHT:g} there{_WHY['weight']}")
    return step["from_epoch"], weights


def same_samples(manifests: list[Any]) -> None:
    """Packs mixed in one loader must hold alike samples: cameras, members, codecs, sizes."""
    first = manifests[0]
    for m in manifests[1:]:
        for name in ("cameras", "pred_len", "image_format", "members", "extras", "frames"):
            a, b = getattr(first.spec, name), getattr(m.spec, name)
            if a != b:
                raise MixError(f"mix: {m.where} holds other samples than {first.where}: its "
                               f"{name} is {b!r}, not {a!r}. Mix packs of one layout, packed "
                               "with the same options (padding other fields is not offered)")
        if m.image_sizes != first.image_sizes:
            raise MixError(f"mix: {m.where} stores images of {m.image_sizes}, {first.where} of "
                           f"{first.image_sizes}; pack them at one size (--resize HxW)")


def _matches(shards: list[Mapping[str, Any]], name: str, wanted: tuple[str, ...],
             where: str) -> np.ndarray:
    """Whether each sample of a pack (pack order) has one of `wanted` as its bucket `name`,
    from its shards' runs. Each shard's runs must give its samples one value each (manifest
    reading checks it too): they are expanded to one flag per sample."""
    flags, counts = [], []
    for shard in shards:
        runs = (shard.get("buckets") or {}).get(name)
        if runs is None:
            raise _no_bucket(shards, shard, name, where)
        claimed, samples = sum(int(n) for _, n in runs), int(shard["samples"])
        if claimed != samples:
            raise MixError(f"{where}: its shard {shard.get('name')!r:.100} has {name!r} runs "
                           f"of {claimed} samples but holds {samples}; expected one value per "
                           "sample. Fix: re-pack it, or restore the manifest that `carla-wds "
                           "pack` wrote")
        flags += [v in wanted for v, _ in runs]
        counts += [int(n) for _, n in runs]
    return np.repeat(np.asarray(flags, bool), np.asarray(counts, np.int64))


def _no_bucket(shards: list[Mapping[str, Any]], shard: Mapping[str, Any], name: str,
               where: str) -> MixError:
    """A where= bucket a shard does not record: a typo when the pack records others (name
    them), else a pack made before buckets were recorded."""
    recorded = sorted({k for s in shards for k in (s.get("buckets") or {})})
    if recorded:
        return MixError(f"{where}: where names bucket {name!r}{did_you_mean(name, recorded)}, "
                        f"which its shard {shard.get('name')} does not record; the pack records "
                        f"buckets {recorded}. Fix: use one of those names in the entry's where "
                        "(`carla-wds inspect` lists each with its values)")
    return MixError(f"{where}: its shard {shard.get('name')} records no bucket {name!r} (packs "
                    "made before buckets were recorded have none). Fix: re-pack it with this "
                    "version, or drop the entry's where")


def _unmatched(shards: list[Mapping[str, Any]], where: tuple[tuple[str, tuple[str, ...]], ...]
               ) -> str:
    """Each where= value the pack's shards never record, with the values they do."""
    out = []
    for name, wanted in where:
        have = sorted({str(v) for s in shards for v, _ in (s.get("buckets") or {}).get(name, [])})
        out += [f"{name} {v!r}{did_you_mean(v, have)} is not recorded (the pack records "
                f"{have})" for v in wanted if str(v) not in have]
    return "; ".join(out)


def _largest_remainder(shares: list[float], total: int) -> list[int]:
    raw = [s * total for s in shares]
    out = [int(np.floor(r)) for r in raw]
    by_rest = sorted(range(len(raw)), key=lambda i: (-(raw[i] - out[i]), i))
    for i in by_rest[:total - sum(out)]:
        out[i] += 1
    return out


@dataclass(frozen=True, eq=False)   # compared by identity: its arrays have no single truth
class MixPlanner:
    """The spec with each entry's candidate samples (positions in the concatenation of its
    sources' shards, in manifest order): what a worker needs to plan any epoch."""
    spec: MixSpec
    candidates: tuple[np.ndarray, ...]

    @classmethod
    def of(cls, spec: MixSpec, shard_docs: dict[str, list[Mapping[str, Any]]]) -> "MixPlanner":
        """`shard_docs`: each source's manifest shard records, in the loader's source order."""
        start, starts = 0, {}
        for source, shards in shard_docs.items():
            starts[source] = start
            start += sum(int(s["samples"]) for s in shards)
        cands = []
        for i, e in enumerate(spec.entries):
            shards = shard_docs[e.source]
            keep = np.ones(sum(int(s["samples"]) for s in shards), bool)
            for name, values in e.where:
                keep &= _matches(shards, name, values, f"mix entries[{i}] ({e.source})")
            if not keep.any():
                unmatched = _unmatched(shards, e.where)
                raise MixError(f"mix entries[{i}]: no sample of {e.source} matches where="
                               f"{dict(e.where)}{f' ({unmatched})' if unmatched else ''}. Fix: "
                               "check the values `carla-wds inspect` lists for its buckets")
            cands.append(np.flatnonzero(keep) + starts[e.source])
        return cls(spec, tuple(cands)).checked()

    def checked(self) -> "MixPlanner":
        """Itself, once its epoch (the same total in every epoch: a schedule only moves the
        weights' shares) is within MAX_EPOCH_SAMPLES; counted before anything is drawn."""
        sizes = self._drawn_sizes(0)
        if sum(sizes) > MAX_EPOCH_SAMPLES:
            parts = ", ".join(f"entries[{i}] ({e.source}) {n:,}"
                              for i, (e, n) in enumerate(zip(self.spec.entries, sizes)))
            raise MixError(f"mix: an epoch of {sum(sizes):,} samples ({parts}); expected at "
                           f"most {MAX_EPOCH_SAMPLES:,}. Fix: lower repeat, count or "
                           "epoch_size (weight entries share epoch_size, by default their "
                           "candidates), and train more epochs instead: each draws anew")
        return self

    def sizes(self, epoch: int, global_batch: int | None = None) -> list[int]:
        """Samples each entry gives in `epoch`; stratified, its quota of every global batch
        (world_size x batch_size samples) times the epoch's global batches."""
        drawn = self._drawn_sizes(epoch)
        if not self.spec.stratify:
            return drawn
        if global_batch is None:
            raise ValueError("a stratified mix's sizes depend on the global batch")
        total = sum(drawn)
        quotas = self.quotas(epoch, global_batch)
        return [total // global_batch * g for g in quotas]

    def quotas(self, epoch: int, global_batch: int) -> list[int]:
        """Stratified: each entry's samples in every global batch, its share of the epoch
        rounded by largest remainders (they add up to the global batch)."""
        drawn = self._drawn_sizes(epoch)
        return _largest_remainder([n / sum(drawn) for n in drawn], global_batch)

    def _drawn_sizes(self, epoch: int) -> list[int]:
        weights = self.spec.weights(epoch)
        weighted = [i for i, w in enumerate(weights) if w is not None]
        total = self.spec.epoch_size or sum(len(self.candidates[i]) for i in weighted)
        shares = _largest_remainder([weights[i] / sum(weights[j] for j in weighted)
                                     for i in weighted], total) if weighted else []
        out = []
        for i, e in enumerate(self.spec.entries):
            if e.repeat is not None:
                out.append(e.repeat * len(self.candidates[i]))
            elif e.count is not None:
                out.append(e.count)
            else:
                out.append(shares[weighted.index(i)])
        return out

    def entry_samples(self, seed: int, epoch: int, global_batch: int | None = None
                      ) -> list[np.ndarray]:
        """Each entry's drawn samples in `epoch` (pack-order positions, repeats included):
        whole copies of its candidates, then a seeded draw without replacement."""
        drawn = []
        for i, n in enumerate(self.sizes(epoch, global_batch)):
            c = self.candidates[i]
            rng = numpy_rng(derive_seed(seed, epoch, "mix", i))
            drawn.append(np.concatenate([np.tile(c, n // len(c)),
                                         rng.choice(c, n % len(c), replace=False)]))
        return [d.astype(np.int64) for d in drawn]

    def epoch_samples(self, seed: int, epoch: int, global_batch: int | None = None
                      ) -> np.ndarray:
        """The epoch's drawn samples (pack-order positions, repeats included), unordered."""
        return np.concatenate(self.entry_samples(seed, epoch, global_batch))

    def batches(self, batch_size: int, world_size: int) -> int:
        return batches_per_rank([sum(self.sizes(0, batch_size * world_size))], batch_size,
                                world_size, "train")

    def stream(self, counts: list[int], seed: int, epoch: int,
               chains: list[list[int]] | None = None, global_batch: int | None = None,
               samples: np.ndarray | None = None) -> np.ndarray:
        """The epoch's drawn samples (or `samples`) as positions in its shard order,
        increasing (so reads stay sequential); a sample drawn twice is there twice."""
        order = shard_order(len(counts), seed, epoch, True, chains)
        pack_start = np.concatenate([[0], np.cumsum(counts)])
        stream_start = np.zeros(len(counts), np.int64)
        stream_start[order] = np.concatenate([[0], np.cumsum([counts[s] for s in order])])[:-1]
        if samples is None:
            samples = self.epoch_samples(seed, epoch, global_batch)
        shard = np.searchsorted(pack_start, samples, side="right") - 1
        return np.sort(stream_start[shard] + samples - pack_start[shard])

    def entry_streams(self, counts: list[int], seed: int, epoch: int,
                      chains: list[list[int]] | None, global_batch: int) -> list[np.ndarray]:
        """Stratified: each entry's drawn samples as stream positions, increasing."""
        return [self.stream(counts, seed, epoch, chains, samples=s)
                for s in self.entry_samples(seed, epoch, global_batch)]

    def worker_plan(self, counts: list[int], *, seed: int, epoch: int,
                    chains: list[list[int]] | None = None, context: int = 0,
                    **where: Any) -> WorkerPlan:
        """plan.plan_worker for a mixed epoch: its samples in the epoch's shard order."""
        if self.spec.stratify:
            g = where["batch_size"] * where["world_size"]
            return plan_strata(self.entry_streams(counts, seed, epoch, chains, g), self.quotas(epoch, g), counts,
                               cut=lambda p: cut_stream(p, counts, seed, epoch, chains, context),
                               **where)
        return plan_stream(self.stream(counts, seed, epoch, chains), counts, seed=seed,
                           epoch=epoch, chains=chains, context=context, **where)
