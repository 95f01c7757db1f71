"""Overlays read in step with their base pack: `CARLAWebData(source=BASE, overlays=[OUT])`.

An overlay pack (`carla-wds pack-overlay`, pack/overlay.py) has one shard per base shard with
the same keys in the same order, so the epoch's plan, made for the base, says which overlay
samples to read too: every read of base shard s, samples a..b, reads samples a..b of each
overlay's shard s beside it, and each pair must have the same key. The entry (parsed JSON,
or None where the sample has none) travels with the still-encoded sample through the shuffle
and is put in `batch.fields[<kind>]` after decoding, a list with one value per sample (None
for padding rows too, whose `valid` is False).

`overlay_required=True` keeps only the samples that have an entry in every overlay. The
overlay manifests' runs say which those are, so the plan is made over their counts (exact
len()), and a read of kept samples i..j of a shard reads its samples from the i-th kept
one's position to the j-th's, leaving out the others before they are decoded.

With history windows (`history=K`, load/stream/history.py) a read also reads the samples its windows
reach back to, marked as context as shardio.read_with_context marks them, and a batch row gets
the entries of its window's own (last) frame: `batch.fields[<kind>]` holds B entries, one per
window. With the filter too, it decides on that frame: the plan counts kept samples, and each
read of kept ones reads its windows' context itself, the route's own frames, kept or not.

With a mix, the overlays of every mixed pack come in one list, each joined to the pack its
manifest names; per kind the join sees one overlay over all the mix's shards (overlay_mix.py).
"""
from __future__ import annotations

import hashlib
import json
import re
from collections import deque
from itertools import repeat
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import numpy as np

from ...codecs import json_loads
from ...manifest import Manifest, manifest_location, shard_url
from ...manifest_schema import MAX_MANIFEST_BYTES
from ...objstore import is_objstore, read_object
from ...remote import RemoteOptions, is_http, read_url
from ...schema import SchemaError
from ...shardread import ShardRef
from ...tario import ShardError
from . import overlay_mix, shardio
from ..decode.fields import selectable
from ..plan.epoch import context_before, previous_shards

OVERLAY_FORMAT = "carla-wds-overlay"   # pack/overlay.py writes it (the wings do not import)
_FIELD = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
_FIX = "Fix: run `carla-wds pack-overlay OVERLAY_DIR BASE_PACK OUT --kind ...` against this base"


def manifest_bytes(where: str, remote: RemoteOptions | None) -> bytes:
    """A manifest's bytes as stored (their sha256 names a base pack), bounded."""
    if is_http(where):
        return read_url(where, MAX_MANIFEST_BYTES, remote)
    if is_objstore(where):
        return read_object(where, MAX_MANIFEST_BYTES, remote)
    with open(where, "rb") as f:
        data = f.read(MAX_MANIFEST_BYTES + 1)
    if len(data) > MAX_MANIFEST_BYTES:
        raise ValueError(f"{where}: over {MAX_MANIFEST_BYTES} bytes; not a manifest")
    return data


def _runs(entry: dict, samples: int, where: str) -> np.ndarray:
    """A shard's entry runs -> one bool per sample (has an entry)."""
    runs = entry.get("entries")
    ok = isinstance(runs, list) and all(
        isinstance(r, list) and len(r) == 2 and r[0] in (0, 1) and isinstance(r[1], int)
        and not isinstance(r[1], bool) and r[1] > 0 for r in runs)
    if not ok or sum(r[1] for r in runs) != samples:
        raise ValueError(f"overlay manifest {where}: shard {entry.get('name')!r} has no valid "
                         f"'entries' runs for its {samples} samples. {_FIX}")
    return np.repeat(np.array([r[0] for r in runs], bool), [r[1] for r in runs])


@dataclass(frozen=True)
class Overlay:
    """One overlay pack as the loader uses it."""
    field: str
    where: str
    sha256: str                      # of its manifest: the loader's identity
    shards: tuple[ShardRef, ...]
    has: tuple[np.ndarray, ...]      # per shard, one bool per sample


def read_overlay(source: str, base: Manifest, base_sha: str,
                 remote: RemoteOptions | None) -> Overlay:
    """An overlay pack's manifest, checked against its base: one ValueError line otherwise."""
    return checked(*overlay_doc(source, remote), base, base_sha)


def overlay_doc(source: str, remote: RemoteOptions | None) -> tuple[str, bytes, dict]:
    """(where, bytes, parsed) of an overlay pack's manifest, which must be one."""
    where = manifest_location(source)
    raw = manifest_bytes(where, remote)
    try:
        doc = json_loads(raw)
    except ValueError as exc:
        raise ValueError(f"overlay manifest {where}: not valid JSON ({exc}). {_FIX}") from None
    if not isinstance(doc, dict) or doc.get("format") != OVERLAY_FORMAT:
        raise ValueError(f"overlay {where}: not an overlay pack (its manifest has no format "
                         f"{OVERLAY_FORMAT!r}); overlays=[...] takes `carla-wds pack-overlay` "
                         f"outputs, source= the base pack. {_FIX}")
    return where, raw, doc


def built_for(doc: dict) -> str | None:
    """The sha256 of the base pack's manifest the overlay was built for."""
    return (doc.get("base") or {}).get("manifest_sha256")


def checked(where: str, raw: bytes, doc: dict, base: Manifest, base_sha: str) -> Overlay:
    """The overlay as the loader uses it, checked against its base pack."""
    made_for = built_for(doc)
    if made_for != base_sha:
        raise ValueError(f"overlay {where} was built for another base pack (manifest sha256 "
                         f"{str(made_for)[:12]}...), not {base.where} ({base_sha[:12]}...). "
                         f"{_FIX} pack")
    field, shards = doc.get("field"), doc.get("shards")
    if not isinstance(field, str) or not _FIELD.match(field) or not isinstance(shards, list) \
            or len(shards) != len(base.shards):
        raise ValueError(f"overlay manifest {where}: expected a field name and one shard per "
                         f"base shard ({len(base.shards)}). {_FIX}")
    refs, has = [], []
    for entry, b in zip(shards, base.shards):
        if not isinstance(entry, dict) or entry.get("samples") != b.samples:
            raise ValueError(f"overlay manifest {where}: shard {entry!r:.80} does not hold "
                             f"the {b.samples} samples of base shard {b.name}. {_FIX}")
        url = shard_url(where, entry.get("name"))
        if "://" not in url and not Path(url).is_file():
            raise ValueError(f"overlay shard {url} is missing. Fix: copy the overlay pack "
                             "whole (its manifest and every shard), or re-run pack-overlay")
        refs.append(ShardRef(url, b.samples, entry.get("bytes"), entry.get("sha256")))
        has.append(_runs(entry, b.samples, where))
    return Overlay(field, where, hashlib.sha256(raw).hexdigest(), tuple(refs), tuple(has))


@dataclass(frozen=True, eq=False)   # compared by identity (it holds arrays): one per loader
class OverlayJoin:
    """What the workers need to read overlays in step (picklable; Epoch.overlay)."""
    overlays: tuple[Overlay, ...]
    base: tuple[ShardRef, ...]       # the base shards with their own sample counts
    keep: tuple[np.ndarray, ...] | None   # overlay_required: per shard, the kept positions
    # frames a sample is decoded as: a history window's K + 1, of which the last is the
    # sample's own and the one whose entries its batch row gets (load/stream/history.py)
    steps: int = 1
    # samples a window reaches back (history * history_stride) and, per shard, the shard
    # whose route it continues (plan.previous_shards): with a filter, each read's windows
    # reach back over the shard's own samples, kept or not (OverlayJoin.read)
    context: int = 0
    previous: tuple[int | None, ...] = ()

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(o.field for o in self.overlays)

    def counts(self) -> tuple[int, ...]:
        """Samples per shard the plan sees: the kept ones, or all."""
        if self.keep is None:
            return tuple(s.samples for s in self.base)
        return tuple(len(k) for k in self.keep)

    def identity(self) -> str:
        """What a resume state must match: the overlays and whether they filter."""
        return hashlib.sha256(json.dumps([[o.sha256 for o in self.overlays],
                                          self.keep is not None]).encode()).hexdigest()

    def read(self, reads: Iterable[tuple[int, int, int, int]], shards: list[ShardRef],
             on_error: str = "raise", cache_dir: str | None = None, verify: bool = False,
             remote: RemoteOptions | None = None, cache_limit_bytes: int | None = None
             ) -> Iterator[dict[str, Any]]:
        """shardio.read_with_context's stage over base and overlays together: the plan's
        reads (in kept positions when filtering; `shards` is then ignored for the base's own
        refs) -> raw base samples, each with its entries under "__overlays__"."""
        opts = (on_error, cache_dir, verify, remote, cache_limit_bytes)
        for shard, lo, start, stop in reads:
            mask = None
            if self.keep is not None:   # kept positions -> the shard's own
                if self.context and start < stop:   # the windows' context, as the shard's own
                    yield from self._context(shard, int(self.keep[shard][start]), opts)
                lo, start, stop, mask = self._raw(shard, start, stop)
                if start == stop:
                    continue
            seg = [(shard, lo, stop)]
            base = shardio.read_segments(seg, list(self.base), *opts)
            # a mix source without an overlay of a kind has no shard of it: no entries
            over = [repeat(None) if o.shards[shard] is None else
                    shardio.read_segments(seg, list(o.shards), *opts) for o in self.overlays]
            for i, (raw, *entries) in enumerate(zip(base, *over), lo - start):
                if i < 0:   # a window's earlier frame, as shardio.read_with_context marks it
                    if "__error__" not in raw:
                        raw["__context__"] = True
                        yield raw
                elif mask is None or mask[i]:
                    yield self._joined(raw, entries, on_error)
                elif self.context and "__error__" not in raw:   # a frame a window may reach
                    raw["__context__"] = True
                    yield raw

    def _raw(self, shard: int, start: int, stop: int) -> tuple[int, int, int, np.ndarray]:
        """A read of kept positions start..stop -> (first read, first served, stop, which of
        them are kept) in the shard's own positions."""
        kept = self.keep[shard][start:stop]
        if not len(kept):   # the plan's context read, in kept positions: nothing here
            return 0, 0, 0, np.zeros(0, bool)
        first, end = int(kept[0]), int(kept[-1]) + 1
        mask = np.zeros(end - first, bool)
        mask[kept - first] = True
        return first, first, end, mask

    def _context(self, shard: int, first: int, opts: tuple) -> Iterator[dict[str, Any]]:
        """With a filter and windows: the `context` samples before sample `first` of `shard`
        (and the shards its route continues), kept or not, marked as context; the plan's
        context reads, which count kept samples, are left out for these."""
        counts = [s.samples for s in self.base]
        for seg in context_before(shard, first, self.context, counts, list(self.previous)):
            for raw in shardio.read_segments([seg], list(self.base), *opts):
                if "__error__" not in raw:
                    raw["__context__"] = True
                    yield raw

    def _joined(self, raw: dict, entries: list[dict], on_error: str) -> dict:
        if "__error__" in raw:
            return raw
        values = {}
        for o, e in zip(self.overlays, entries):
            if e is None:   # no overlay of this kind for the sample's pack (overlay_mix.py)
                values[o.field] = None
                continue
            if "__error__" in e:
                return shardio.error_marker(e["__error__"])
            if e["__key__"] != raw["__key__"]:
                raise ShardError(f"overlay shard {e.get('__shard__')} holds sample "
                                 f"{e['__key__']!r} where base shard {raw.get('__shard__')} "
                                 f"holds {raw['__key__']!r}: not built for this base. {_FIX}")
            try:
                values[o.field] = json_loads(bytes(e[f"{o.field}.json"]))
            except (KeyError, ValueError) as exc:
                msg = (f"overlay shard {e.get('__shard__')} sample {e['__key__']!r}: no valid "
                       f"{o.field}.json ({exc!s:.300}). {_FIX}")
                if on_error == "raise":
                    raise SchemaError(msg) from None
                return shardio.error_marker(msg)
            if self.keep is not None and values[o.field] is None:
                # the runs chose it as having an entry: a manifest whose runs lie would
                # otherwise serve None where overlay_required promises an entry
                msg = (f"overlay {o.where}: sample {e['__key__']!r} has no entry (its "
                       f"{o.field}.json in {e.get('__shard__')} is null), yet the overlay "
                       "manifest's entries runs say it has one and overlay_required=True "
                       f"kept it. {_FIX}")
                if on_error == "raise":
                    raise SchemaError(msg)
                return shardio.error_marker(msg)
        raw["__overlays__"] = values
        return raw

    def tapped(self, groups: Iterable[list]) -> tuple[Iterator[list], Callable]:
        """(the same groups, attach): attach(batches) puts each group's entries in its batch's
        fields, batch n being the decoded group n (stages.decode_batches)."""
        pending: deque = deque()

        last = slice(self.steps - 1, None, self.steps)   # each window's own frame

        def tap() -> Iterator[list]:
            for group in groups:
                pending.append([None if r is None else r.get("__overlays__")
                                for r in group[last]])
                yield group

        def attach(batches: Iterable[Any]) -> Iterator[Any]:
            for batch in batches:
                rows, valid = pending.popleft(), batch.valid.tolist()[last]
                for name in self.fields:
                    batch.fields[name] = [row[name] if row is not None and ok else None
                                          for row, ok in zip(rows, valid)]
                yield batch
        return tap(), attach


@dataclass(frozen=True)
class ReadJoined:
    """Encoded stage (served.py): reads -> base samples with their entries (OverlayJoin.read)."""
    join: OverlayJoin

    def __call__(self, reads: Iterable, at: Any) -> Iterator[dict[str, Any]]:
        e = at.e
        return self.join.read(reads, list(e.shards), e.on_error, e.cache_dir, e.verify,
                              e.remote, e.cache_limit_bytes)


@dataclass(frozen=True)
class Tap:
    """Worker stage (pipeline.py) before decoding: notes each group's entries for Attach."""
    join: OverlayJoin

    def __call__(self, groups: Iterable[list], at: Any) -> Iterator[list]:
        groups, at.notes["overlay"] = self.join.tapped(groups)
        return groups


@dataclass(frozen=True)
class Attach:
    """Worker stage after decoding: each group's entries into its batch's fields."""
    def __call__(self, batches: Iterable[Any], at: Any) -> Iterator[Any]:
        return at.notes.pop("overlay")(batches)


def attach(data: Any, overlays: list[str] | None, required: bool) -> OverlayJoin | None:
    """CARLAWebData's overlays (its counts, shards and identity follow a filter); None
    without. One ValueError line for what is not offered with them."""
    if not overlays:
        if required:
            raise ValueError("Overlays(required=True) filters by overlays, but none is given. "
                             "Fix: overlays=Overlays([PACK, ...], required=True)")
        return None
    if data.mix:
        found = _mixed(data, overlays, required)
    else:
        base_sha = hashlib.sha256(manifest_bytes(data.manifest.where, data.remote)).hexdigest()
        found = tuple(read_overlay(str(o), data.manifest, base_sha, data.remote)
                      for o in overlays)
    names = [o.field for o in found]
    if len(set(names)) != len(names):
        raise ValueError(f"overlays {list(overlays)} give the batch fields {names}: one each "
                         "is taken. Fix: pass each kind's overlay once")
    _not_the_bases(found, data.manifest)
    keep = None
    if required:
        keep = tuple(np.flatnonzero(np.logical_and.reduce([o.has[s] for o in found]))
                     for s in range(len(data.shards)))
    join = OverlayJoin(found, tuple(data.shards), keep)
    if keep is not None:
        if data._mixer is not None:   # the mix draws among the kept samples
            data._mixer = overlay_mix.kept_planner(data._mixer, keep, data.counts)
        data.counts = join.counts()
        data.shards = tuple(replace(s, samples=n) for s, n in zip(data.shards, data.counts))
        data.manifest_id = hashlib.sha256(
            (data.manifest_id + join.identity()).encode()).hexdigest()
    return join


def _mixed(data: Any, overlays: list[str], required: bool) -> tuple[Overlay, ...]:
    """A mix's overlays, one per kind over all its shards: each overlay joins the mixed
    pack(s) its manifest names (overlay_mix.py)."""
    manifests, sources = data._manifests, data.mix.sources()
    shas = [hashlib.sha256(manifest_bytes(m.where, data.remote)).hexdigest() for m in manifests]
    found, served = [], []
    for o in overlays:
        where, raw, doc = overlay_doc(str(o), data.remote)
        mine = overlay_mix.sources_of(where, built_for(doc), shas, sources)
        found.append(checked(where, raw, doc, manifests[mine[0]], shas[mine[0]]))
        served.append(mine)
    counts = [[s.samples for s in m.shards] for m in manifests]
    kinds = list(dict.fromkeys(o.field for o in found))
    return tuple(overlay_mix.merged(k, overlay_mix.one_per_source(found, served, k, len(shas)),
                                    counts, sources, required) for k in kinds)


def _not_the_bases(found: tuple[Overlay, ...], base: Manifest) -> None:
    """An overlay's field must be none the base serves in batch.fields (whether selected or
    not: selecting it later must not silently swap the pack's values for the overlay's)."""
    members, derived = selectable(base.spec)
    served = sorted(members + derived)
    for o in found:
        if o.field in served + [f"{n}_len" for n in served]:   # row fields' counts (fields.py)
            raise ValueError(f"overlay {o.where} serves the field {o.field!r}, which the base "
                             f"pack {base.where} serves itself (its fields: {served} and their "
                             "<name>_len counts); an overlay adds a field, it never replaces "
                             "one. Fix: use the overlay `carla-wds pack-overlay` wrote (its "
                             "field is its kind's name), or restore its manifest")


def windowed(join: OverlayJoin | None, history: int, stride: int = 1,
             chains: list[list[int]] | None = None) -> OverlayJoin | None:
    """The join for samples of `history` earlier frames each: a batch row gets the entries of
    its window's own (last) frame."""
    if join is None:
        return None
    previous = previous_shards(chains or [[i] for i in range(len(join.base))])
    return replace(join, steps=history + 1, context=history * stride, previous=tuple(previous))


def kinds(join: OverlayJoin | None) -> tuple[str, ...]:
    """The overlay kinds an adapter's dict carries under "overlays" (transform.Transformer)."""
    return () if join is None else join.fields
