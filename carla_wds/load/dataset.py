"""CARLAWebData: the typed loader that is exact under DDP and resumable mid-epoch.

    data = CARLAWebData("shards/train", batch_size=32, num_workers=4, augment=True,
                        persistent_workers=True)   # workers kept from epoch to epoch
    for epoch in range(epochs):
        data.set_epoch(epoch)
        for batch in data:          # exactly len(data) CARLABatch on every rank
            batch = batch.to("cuda")
            x = batch.normalized_images()

Counts come from the manifest (see plan.py), so `len()` is O(1) and equal on every rank; the
seed's `with_epoch`, `nodesplitter`, double shuffle and length-by-iteration are all gone. The
workers, their image ring and persistence from pass to pass live in workers.py.
"""
from __future__ import annotations

import gc
import hashlib
import json
import logging
from contextlib import closing
from dataclasses import asdict, replace
from collections.abc import Mapping
from typing import Any, Iterator

from ..dist import rank_world
from ..limits import using as using_limits
from ..manifest import read_manifest
from ..remote import RemoteOptions, with_storage
from ..shardread import ShardRef
from .decode.batch import CARLABatch, field_layout, with_padding_fields
from .decode.fields import check_fields
from .stream.history import history_settings, windowed
from .plan.epoch import EpochPlanner, batches_per_rank
from . import front, loader_doc, resume_state, settings
from .stream import overlay
from .stream import common_view, mappack
from .plan.mix import MixPlanner, mix_spec
from .options import Augment, Decode, History, Overlays, Storage, Transport
from .plan.reshape import Reshape, batches_after
from .decode.model_batch import ModelBatch
from .decode.transform import SampleTransform
from .transport.workers import Epoch, Workers

log = logging.getLogger(__name__)
# a state's fields that must equal the loader's (world_size and num_workers may change:
# load/plan/reshape.py plans the rest of the epoch for the new split)
STATE_FIELDS = ("manifest", "mode", "seed", "batch_size", "batches_per_epoch", "history",
                "history_stride", "mix")
STATE_DEFAULTS = {"history": 0, "history_stride": 1, "mix": None}   # older states lack them


class CARLAWebData:
    __doc__ = loader_doc.__doc__   # the arguments' docs, for help() and the API page

    def __init__(self, source: str | None = None, *, batch_size: int, mode: str = "train",
                 num_workers: int = 0, seed: int = 0, image_size: tuple[int, int] | None = None,
                 cameras: list[str] | None = None, fields: list[str] | None = None,
                 augment: bool | Augment = False, shuffle_buffer: int = 256,
                 on_error: str = "raise", rank: int | None = None, world_size: int | None = None,
                 batches_per_epoch: int | None = None, transport: Transport | None = None,
                 storage: Storage | None = None, decode: Decode | None = None,
                 overlays: list[str] | Overlays | None = None,
                 label_options: Mapping[str, Any] | None = None,
                 adapter: str | SampleTransform | None = None, history: int | History = 0,
                 mix: Any = None, **aliases: Any) -> None:
        # every keyword as given, before a name below is bound: the front door reads them all
        r = front.request({k: v for k, v in locals().items() if k not in ("self", "aliases")},
                          aliases)
        self.limits = r.limits()
        self._read(source, with_storage(r.storage.remote, r.storage.options), mix, r)
        self._decoding(r)
        self._adopt(r)
        self._set_shards(r.storage, r.overlays)
        self._plan(r)

    def _plan(self, r: front.Request) -> None:
        """History windows, the epoch's batch count, the start position and the workers."""
        self.history, self.history_stride, self._sequence = history_settings(
            self._manifests, r.history.frames, r.history.stride)
        # a row: its own frame's entries; a filter decides on that frame, and its window
        # still reaches the frames the filter left out (overlay.OverlayJoin._context)
        self._overlay = overlay.windowed(self._overlay, self.history, self.history_stride,
                                         self._chains())
        self._encoded, self._stages = front.stream_stages(
            mode=self.mode, batches_per_epoch=self.batches_per_epoch,
            stratified=self.mode == "train" and self._mixer is not None
            and self._mixer.spec.stratify,
            history=self.history, sequence=self._sequence,
            join=self._overlay, transform=self.sample_transform, view=self._view,
            maps=self._map_stage(r))
        self._planner = EpochPlanner(self.mode, self.batches_per_epoch)
        self._len = settings.batches(self.where, self._epoch_counts(), self.batch_size,
                                     self.world_size, self.mode, self.batches_per_epoch)
        self._start_position()
        self._workers = Workers(self.num_workers, prefetch_factor=self.prefetch_factor,
                                pin_memory=self.pin_memory, persistent=r.transport.persistent,
                                stats=self.stats)

    def _map_stage(self, r: front.Request) -> mappack.MapVectors | None:
        """Overlays(map=): the map stage, checked against the shards' dataset and towns."""
        if r.overlays.map is None:
            return mappack.attach_map(None, "", (), r.overlays.map_gt)
        if self._view is not None:
            raise ValueError("Overlays(map=...) with a mix of layouts is not served yet. Fix: "
                             "load one layout's shards with it")
        keys = [s[k] for s in self.manifest.doc["shards"] for k in ("first_key", "last_key")
                if s.get(k)]
        return mappack.attach_map(r.overlays.map, self.manifest.doc.get("layout", ""), keys,
                                  r.overlays.map_gt)

    def _decoding(self, r: front.Request) -> None:
        """What a sample decodes to: the model adapter's settings or the caller's, the
        cameras and fields selected, and how each field decodes."""
        self.adapter, self.sample_transform, given, options = front.model(r, self.manifest) \
            if self._view is None else common_view.model(self._view, r)
        packed = self.manifest.spec if self._view is None else self._view.spec
        cameras, fields, lidar_histogram = (given[k] for k in ("cameras", "fields",
                                                               "lidar_histogram"))
        spec = front.select_cameras(packed, cameras)
        # extra members decoded: only those selected (default none, as before extras existed)
        self.fields = check_fields(spec, fields)
        if r.overlays.map is not None and mappack.POSE not in self.fields:   # its pose
            self.fields = [*self.fields, mappack.POSE]
        self.spec = replace(spec, extras=tuple(e for e in spec.extras if e.name in self.fields))
        self.field_opts = replace(
            front.field_options(spec, options, lidar_histogram, self.fields),
            **front.decode_options(spec, packed, fields),
            exact_resize=bool(r.decode.exact_resize),
            extra_sizes=settings.extra_sizes(self.manifest) if self._view is None else
            common_view.extra_sizes(self._view, self._manifests))
        self.image_size = tuple(given["image_size"])

    def _adopt(self, r: front.Request) -> None:
        """The request's plain settings, as the loader's attributes."""
        self.rank, self.world_size = rank_world(r.rank, r.world_size)
        self.batch_size, self.mode, self.num_workers, self.seed = (r.batch_size, r.mode,
                                                                   r.num_workers, r.seed)
        self.verify, self.cache_dir = r.storage.verify, r.storage.cache_dir
        self.augment, self.per_camera_augment = r.augment.enabled, r.augment.per_camera
        self.shuffle_buffer, self.on_error = r.shuffle_buffer, r.on_error
        self.batches_per_epoch, self.pin_memory = r.batches_per_epoch, r.transport.pin_memory
        self.prefetch_factor = r.transport.prefetch_factor
        self._field_layout: dict | None = None   # shapes of the selected fields, once seen
        self.stats = dict(skipped_samples=0, batches=0, batches_outside_ring=0)

    def _start_position(self) -> None:
        self.epoch, self.consumed, self.step_at_epoch_start = 0, 0, 0
        self._live_pass: object | None = None   # the train pass that moves it (_claim_pass)
        # a resume from another split (reshape.py), and its epoch's rest in batches
        self._reshape: Reshape | None = None
        self._reshape_len = 0

    def _epoch_counts(self) -> tuple[int, ...]:
        """What an epoch draws from: the shards' samples, or a mix's drawn total (train)."""
        if self._mixer is None or self.mode != "train":
            return self.counts
        if self.batches_per_epoch:
            raise ValueError("mix= plans its own epoch, whose size the mix gives: "
                             "batches_per_epoch does not apply. Fix: drop batches_per_epoch "
                             "and set the mix's epoch_size (samples of its weight entries)")
        return (sum(self._mixer.sizes(0, self.batch_size * self.world_size)),)

    def _chains(self) -> list[list[int]] | None:
        """The shard runs a route links (history windows), which the epoch's order keeps."""
        return [list(c) for c in self._sequence.get("chains") or ()] or None

    def _read(self, source: str | None, remote: RemoteOptions | None, mix: Any,
              r: front.Request) -> None:
        """The pack's manifest, or a mix's packs' (load/plan/mix.py): alike samples, or packs of
        other layouts in their common view (load/stream/common_view.py)."""
        if (source is None) == (mix is None):
            raise ValueError("give a source (a pack folder, manifest path or URL) or mix= (a "
                             "mix spec over packs), one of the two")
        self.mix = mix_spec(mix) if mix is not None else None
        with using_limits(self.limits):   # the recorded sizes are held to these limits too
            self._manifests = [read_manifest(s, remote)
                               for s in (self.mix.sources() if self.mix else [source])]
        self.manifest = self._manifests[0]
        self._view = common_view.of(self.mix, self._manifests, r.cameras, r.fields)
        self.where, self.remote = self.manifest.where, remote

    def _set_shards(self, storage: Storage, overlays: Overlays) -> None:
        """Every shard of the pack (of a mix's packs, one after the other); label overlays
        read in step (load/stream/overlay.py: a filter changes the counts)."""
        shard_urls = None if storage.shard_urls is None else list(storage.shard_urls)
        if shard_urls is not None and len(self._manifests) > 1:
            raise ValueError("shard_urls= names one pack's shards; a mix reads its packs' own")
        shards = [s for m in self._manifests for s in m.shards]
        self.counts = tuple(s.samples for s in shards)
        own = tuple(u for m in self._manifests for u in m.shard_urls())
        self.urls = own if shard_urls is None else settings.shard_urls(self.manifest, shard_urls)
        self.shards = tuple(ShardRef(u, s.samples, s.bytes, s.sha256)
                            for u, s in zip(self.urls, shards))
        self.cache_limit_bytes = settings.cache_limit(storage.cache_limit_bytes,
                                                      self.cache_dir, self.shards)
        # of the shard list as written, so that states saved by earlier versions still resume
        docs = [m.doc["shards"] for m in self._manifests]
        self.manifest_id = hashlib.sha256(json.dumps(docs[0] if len(docs) == 1 else docs,
                                                     sort_keys=True).encode()).hexdigest()
        self._mixer = MixPlanner.of(self.mix, {m_src: m.doc["shards"] for m_src, m in zip(
            self.mix.sources(), self._manifests)}) if self.mix else None
        with using_limits(self.limits):   # the overlay manifests are file data too
            self._overlay = overlay.attach(self, list(overlays.packs), overlays.required)

    def __len__(self) -> int:
        """Batches per rank in this epoch: the rest of it after a resume in another split."""
        return self._len if self._reshape is None else self._reshape_len

    @property
    def camera_names(self) -> list[str]:
        return list(self.spec.cameras)

    @property
    def pred_len(self) -> int:
        return self.spec.pred_len

    @property
    def waypoint_hz(self) -> float | None:
        """Waypoints a second: a mix of layouts' common view's, else the pack's record."""
        return common_view.waypoint_hz(self._view, self.manifest)

    @property
    def persistent_workers(self) -> bool:
        """Workers (and their ring) kept from one whole pass to the next; False without workers."""
        return self._workers.persistent

    def set_epoch(self, epoch: int, global_step: int | None = None) -> None:
        """Select the epoch (its shard order and shuffle) and the step the augmenter ramps from.

        global_step defaults to epoch * len(self). Setting the current epoch again keeps a
        resume position loaded with load_state_dict.
        """
        if epoch != self.epoch:
            self.consumed, self._reshape = 0, None
        self.epoch = epoch
        self.step_at_epoch_start = epoch * self._len if global_step is None else global_step

    def __iter__(self) -> Iterator[CARLABatch | dict[str, Any]]:
        if self.mode == "eval":   # always whole: passes at once are independent
            yield from self._pass()
            return
        token = self._claim_pass()
        try:
            yield from self._pass()
        finally:
            if self._live_pass is token:
                self._live_pass = None

    def _claim_pass(self) -> object:
        """Make this the loader's one live train pass. The position in the epoch (`consumed`,
        what state_dict saves) is the loader's, so a second live pass would go on from the
        first's and each would take batches from the other: refused, naming the fix."""
        if self._live_pass is not None:
            gc.collect()   # a dropped iterator in a reference cycle is closed by the collector
        if self._live_pass is not None:
            raise RuntimeError(
                f"{self.where}: a pass over this CARLAWebData is still running (an earlier "
                f"iterator took {self.consumed} of {len(self)} batches and was neither "
                "exhausted nor closed); a second one would go on from its position and the "
                "two would split the epoch's batches. Fix: finish the first or close it "
                "(`it.close()`) before iterating again, or make a second CARLAWebData for a "
                "pass of its own")
        self._live_pass = token = object()
        return token

    def _pass(self) -> Iterator[CARLABatch | dict[str, Any]]:
        if self.consumed >= len(self) or self.mode == "eval":
            # A finished epoch restarts, like DistributedSampler (whole, in this split); eval
            # always runs whole, so an interrupted pass (Lightning's sanity check) never hides
            # samples from the next.
            self.consumed, self._reshape = 0, None
        # closing: a caller's early stop reaches the pass now, not when it is collected
        with closing(self._workers.run(self._epoch(), len(self) - self.consumed)) as batches:
            for batch in batches:
                if isinstance(batch, ModelBatch):   # a sample_transform's dict
                    self.consumed += 1
                    self.stats["batches"] += 1
                    self.stats["skipped_samples"] += len(batch.errors)
                    yield batch.data
                    continue
                # an all-padding batch gets the pass's fields as zeros (load/decode/batch.py)
                batch = with_padding_fields(batch, self._field_layout)
                self._field_layout = field_layout(batch) or self._field_layout
                if self.history:   # B windows of K + 1 frames (views of the flat batch)
                    batch = windowed(batch, self.history + 1)
                self.consumed += 1
                self.stats["batches"] += 1
                self.stats["skipped_samples"] += len(batch.errors)
                yield batch

    def _epoch(self) -> Epoch:
        """What this pass's workers are told; Workers adds the ring and the shared pass state."""
        return Epoch(shards=self.shards, verify=self.verify, remote=self.remote, spec=self.spec,
                     image_sizes=self.manifest.sizes_of(self.spec.cameras) if self._view is None
                     else (None,) * len(self.spec.cameras),   # checked per pack (IntoView)
                     image_size=self.image_size, batch_size=self.batch_size, mode=self.mode,
                     num_workers=self.num_workers, seed=self.seed, epoch=self.epoch,
                     rank=self.rank, world_size=self.world_size, resume_batches=self.consumed,
                     batches_per_epoch=self.batches_per_epoch,
                     shuffle_buffer=self.shuffle_buffer, transform_augment=self.augment,
                     # an adapter with its codebase's own augmentation: the loader's stays off
                     augment=self.augment and not getattr(self.adapter, "own_augment", False),
                     per_camera_augment=self.per_camera_augment,
                     step_at_epoch_start=self.step_at_epoch_start, cache_dir=self.cache_dir,
                     on_error=self.on_error, field_opts=self.field_opts,
                     cache_limit_bytes=self.cache_limit_bytes, limits=self.limits,
                     sample_transform=self.sample_transform, history=self.history,
                     history_stride=self.history_stride,
                     chains=self._sequence.get("chains"), encoded=self._encoded,
                     stages=self._stages, planner=self._reshape or
                     (self._mixer if self.mode == "train" else None) or self._planner)

    def close(self) -> None:
        """Shut down persistent workers now rather than when this object is collected; those
        of a pass still running are not kept when it ends."""
        self._workers.close()

    def state_dict(self) -> dict[str, Any]:
        """Where this rank is in the epoch; load it into a fresh loader to continue exactly."""
        return {"manifest": self.manifest_id, "mode": self.mode, "seed": self.seed,
                "batch_size": self.batch_size, "world_size": self.world_size,
                "num_workers": self.num_workers, "batches_per_epoch": self.batches_per_epoch,
                "history": self.history, "history_stride": self.history_stride,
                "mix": self.mix.identity() if self.mix else None, "epoch": self.epoch,
                "consumed": self.consumed, "step_at_epoch_start": self.step_at_epoch_start,
                "shuffle_buffer": self.shuffle_buffer,
                "reshape": self._reshape.doc() if self._reshape else None}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        resume_state.check_counters(state)   # whole numbers in range, before any is used
        mine = self.state_dict()
        for name in STATE_FIELDS:
            if state.get(name, STATE_DEFAULTS.get(name)) != mine[name]:
                raise ValueError(f"cannot resume: {name} was {state.get(name)!r} when the state "
                                 f"was saved, but is {mine[name]!r} now. Use the same {name}")
        self.epoch, self.consumed = int(state["epoch"]), int(state["consumed"])
        self.step_at_epoch_start = int(state["step_at_epoch_start"])
        self._reshape = (Reshape(**state["reshape"], base=self._mixer)
                         if state.get("reshape") else None)
        split = (state.get("world_size"), state.get("num_workers"))
        if split != (self.world_size, self.num_workers) and self.mode == "train":
            self._resplit(state, split)   # (eval passes always run whole)
        if self._reshape is not None:
            self._reshape_len = batches_after(list(self.counts), self._reshape, self.batch_size,
                                              self.world_size, self.seed, self.epoch,
                                              self._chains())
        if split == (self.world_size, self.num_workers):   # else: _resplit checked it
            resume_state.check_consumed(state, len(self), split)

    def _resplit(self, state: dict[str, Any], split: tuple) -> None:
        """The state was saved with other ranks or workers: plan the rest of its epoch for
        this split (load/plan/reshape.py); the consumed batches are then those of the old one."""
        why = ("it was saved inside an epoch already resumed in another split"
               if self._reshape else
               "sampling with replacement (batches_per_epoch)" if self.batches_per_epoch
               else None)
        if why:
            raise ValueError(f"cannot resume: (world_size, num_workers) was {split} when the "
                             f"state was saved, but is {(self.world_size, self.num_workers)} "
                             f"now, and the rest of an epoch is re-planned for a new split "
                             f"only in train mode without {why}. Use the same world_size "
                             "and num_workers")
        old_len = (self._mixer.batches(self.batch_size, int(split[0])) if self._mixer else
                   batches_per_rank(list(self.counts), self.batch_size, int(split[0]), "train"))
        resume_state.check_consumed(state, old_len, split)
        if self.consumed >= old_len:
            self.consumed = self._len   # that epoch was whole: nothing of it is left
            return
        self._reshape = Reshape(int(split[0]), int(split[1]), self.consumed,
                                int(state.get("shuffle_buffer", self.shuffle_buffer)),
                                base=self._mixer)
        self.consumed = 0

    def config(self) -> dict[str, Any]:
        return {"source": self.where, "batch_size": self.batch_size, "mode": self.mode,
                "num_workers": self.num_workers, "world_size": self.world_size,
                "rank": self.rank, "spec": asdict(self.spec), "len": self._len}
