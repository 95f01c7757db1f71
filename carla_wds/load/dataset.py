"""CARLAWebData: the typed loader that is exact under DDP and resumable mid-epoch.

    data = CARLAWebData("shards/train", batch_size=32, num_workers=4, augment=True,
                        persistent_workers=True)   # workers kept from epoch to epoch
    for epoch in range(epochs):
        data.set_epoch(epoch)
        for batch in data:          # exactly len(data) CARLABatch on every rank
            batch = batch.to("cuda")
            x = batch.normalized_images()

Counts come from the manifest (see plan.py), so `len()` is O(1) and equal on every rank; the
seed's `with_epoch`, `nodesplitter`, double shuffle and length-by-iteration are all gone.
"""
from __future__ import annotations

import hashlib
import json
import logging
import multiprocessing
from dataclasses import asdict, dataclass, replace
from typing import Any, Iterator

import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from ..dist import rank_world
from ..manifest import image_sizes_of, read_manifest, shard_url, spec_of
from ..remote import RemoteOptions
from ..rng import derive_seed, numpy_rng
from ..schema import SampleSpec
from ..shardread import ShardRef
from . import shardio, stages
from .augment import image_iteration
from .batch import CARLABatch
from .plan import batches_per_rank, plan_worker, resampled_shards
from .ring import BatchRing, RingItem

log = logging.getLogger(__name__)
STATE_FIELDS = ("manifest", "mode", "seed", "batch_size", "world_size", "num_workers",
                "batches_per_epoch")


@dataclass(frozen=True)
class _Epoch:
    """Everything a worker needs to produce its share of one epoch; picklable."""
    shards: tuple[ShardRef, ...]
    verify: bool
    remote: RemoteOptions | None
    spec: SampleSpec
    image_sizes: tuple[tuple[int, int] | None, ...]   # per camera, as packed (None: unknown)
    image_size: tuple[int, int]
    batch_size: int
    mode: str
    num_workers: int
    seed: int
    epoch: int
    rank: int
    world_size: int
    resume_batches: int
    batches_per_epoch: int | None
    shuffle_buffer: int
    augment: bool
    per_camera_augment: bool
    step_at_epoch_start: int
    cache_dir: str | None
    on_error: str
    ring: BatchRing | None
    live: "_PassState | None" = None   # persistent workers read the per-pass fields here


class _PassState:
    """The fields of _Epoch that change between passes, in a mapping shared with persistent
    workers, which forked with the first pass's _Epoch. The main process publishes them before
    it starts a pass; torch then sends each worker its `_ResumeIteration` through a queue, so
    the worker's next pass reads them after the write."""
    NAMES = ("epoch", "resume_batches", "step_at_epoch_start")

    def __init__(self, context: multiprocessing.context.BaseContext) -> None:
        # inherited by forked workers; spawned ones get the shared block itself, pickled
        self._values = context.RawArray("q", len(self.NAMES))

    def publish(self, e: _Epoch) -> None:
        self._values[:] = [getattr(e, name) for name in self.NAMES]

    def current(self, e: _Epoch) -> _Epoch:
        return replace(e, **{name: int(v) for name, v in zip(self.NAMES, self._values)})

    @classmethod
    def fixed(cls, e: _Epoch) -> _Epoch:
        """e without what changes between passes: kept workers serve only equal ones."""
        return replace(e, ring=None, live=None, **{name: 0 for name in cls.NAMES})


class _EpochStream(IterableDataset):
    """Yields one worker's CARLABatches of one epoch, following plan.plan_worker."""

    def __init__(self, e: _Epoch) -> None:
        self.e = e

    def __iter__(self) -> Iterator[CARLABatch]:
        e = self.e if self.e.live is None else self.e.live.current(self.e)
        info = get_worker_info()
        counts = [s.samples for s in e.shards]
        plan = plan_worker(counts, rank=e.rank, world_size=e.world_size,
                           worker=info.id if info else 0, num_workers=e.num_workers,
                           batch_size=e.batch_size, mode=e.mode, seed=e.seed, epoch=e.epoch,
                           resume_batches=e.resume_batches, batches_per_epoch=e.batches_per_epoch)
        w = plan.logical_worker
        segments = plan.segments
        if plan.resampled:   # endless whole shards, cut by `take` below
            segments = ((s, 0, counts[s]) for s in
                        resampled_shards(len(counts), e.seed, e.epoch, e.rank, w))
        # raw samples (member bytes) of this worker, in plan order
        raw = shardio.read_segments(segments, list(e.shards), e.on_error, e.cache_dir,
                                    e.verify, e.remote)
        if e.mode == "train":   # buffered shuffle of encoded samples
            rng = numpy_rng(derive_seed(e.seed, e.epoch, e.rank, w, "buffer"))
            raw = stages.shuffle(raw, e.shuffle_buffer, rng)
        raw = stages.take(raw, plan.n_real)
        # drop what was consumed before a resume, still encoded
        skipped = plan.skip_batches * e.batch_size
        raw = stages.skip(raw, skipped)
        # lists of batch_size raw samples, exactly this worker's remaining batch count
        groups = stages.group(raw, e.batch_size, plan.n_batches - plan.skip_batches)
        slots: list[int | None] = []   # per decoded batch, its ring slot (None: own block)
        alloc = None
        if e.ring is not None and info is not None:
            def alloc() -> torch.Tensor | None:
                got = e.ring.acquire()   # None: all slots held, a block of its own
                slots.append(None if got is None else got[0])
                return None if got is None else got[1]
        batches = stages.decode_batches(groups, e.spec, e.image_size, e.on_error,
                                        self._augmenter(e, w), first_position=skipped,
                                        alloc=alloc, sizes=e.image_sizes)
        for batch in batches:   # CARLABatch, or RingItem (the images stay in the ring slot)
            slot = slots.pop(0) if alloc else None
            yield batch if slot is None else RingItem.of(batch, slot)

    @staticmethod
    def _augmenter(e: _Epoch, logical_worker: int):
        if not (e.augment and e.mode == "train"):
            return None
        w_count = max(1, e.num_workers)

        def iteration_of(pos: int) -> int:
            # The global step of the batch holding this position: the trainer's step, not a
            # per-worker counter (TCP's bug).
            step = e.step_at_epoch_start + (pos // e.batch_size) * w_count + logical_worker
            return image_iteration(step, e.batch_size, e.world_size)
        return stages.augmenter(e.seed, e.epoch, e.per_camera_augment, iteration_of)


class CARLAWebData:
    """Decoded, optionally augmented, exactly counted batches of packed CARLA shards."""

    def __init__(self, source: str, *, batch_size: int, mode: str = "train",
                 num_workers: int = 0, seed: int = 0, image_size: tuple[int, int] = (256, 512),
                 cameras: list[str] | None = None, augment: bool = False,
                 per_camera_augment: bool = True, shuffle_buffer: int = 256,
                 cache_dir: str | None = None, on_error: str = "raise", rank: int | None = None,
                 world_size: int | None = None, batches_per_epoch: int | None = None,
                 verify: bool = False, pin_memory: bool = False, prefetch_factor: int = 2,
                 persistent_workers: bool = False, shard_urls: list[str] | None = None,
                 remote: RemoteOptions | None = None) -> None:
        if mode not in ("train", "eval"):
            raise ValueError(f"mode {mode!r}; expected 'train' or 'eval'")
        if on_error not in ("raise", "skip"):
            raise ValueError(f"on_error {on_error!r}; expected 'raise' or 'skip'")
        if batch_size < 1 or num_workers < 0:
            raise ValueError(f"batch_size {batch_size} must be >= 1, num_workers {num_workers} >= 0")
        if batches_per_epoch is not None and mode != "train":
            raise ValueError("batches_per_epoch (sampling with replacement) is for mode='train'")
        self.manifest, self.where = read_manifest(source, remote)
        self.remote = remote
        self.spec = self._select_cameras(spec_of(self.manifest), cameras)
        self.rank, self.world_size = rank_world(rank, world_size)
        self.batch_size, self.mode, self.num_workers, self.seed = batch_size, mode, num_workers, seed
        self.image_size = tuple(image_size)
        self.augment, self.per_camera_augment = augment, per_camera_augment
        self.shuffle_buffer, self.cache_dir, self.on_error = shuffle_buffer, cache_dir, on_error
        self.batches_per_epoch, self.verify = batches_per_epoch, verify
        self.pin_memory, self.prefetch_factor = pin_memory, prefetch_factor
        # Workers kept from one whole pass to the next skip the fork and keep their ring slots
        # (each costs a worker 12,800 page faults to write first; ring.py). No workers, no-op.
        self.persistent_workers = persistent_workers and num_workers > 0
        self._idle: tuple[DataLoader, _Epoch] | None = None   # persistent, between passes
        self._closes = 0
        shards = self.manifest["shards"]
        self.counts = tuple(s["samples"] for s in shards)
        self.urls = self._shard_urls(shard_urls)
        self.shards = tuple(ShardRef(u, s["samples"], s["bytes"], s.get("sha256"))
                            for u, s in zip(self.urls, shards))
        self.manifest_id = hashlib.sha256(json.dumps(shards, sort_keys=True).encode()).hexdigest()
        self._len = batches_per_rank(list(self.counts), batch_size, self.world_size, mode,
                                     batches_per_epoch)
        if self._len < 1:
            raise ValueError(
                f"{self.where}: {sum(self.counts)} samples give no full batch of {batch_size} on "
                f"each of {self.world_size} ranks. Fix: lower batch_size, use fewer ranks, or "
                "pack more data")
        self.epoch, self.consumed, self.step_at_epoch_start = 0, 0, 0
        self.stats = {"skipped_samples": 0, "batches": 0, "batches_outside_ring": 0}
        self._spare_ring: BatchRing | None = None
        self._mp = multiprocessing.get_context()   # the ring's semaphores and the workers'

    def _shard_urls(self, given: list[str] | None) -> tuple[str, ...]:
        """Names from the manifest, held to its folder (manifest.NAME_RULE); or the caller's
        own list, which may use any scheme the caller chooses, pipe: included."""
        shards = self.manifest["shards"]
        if given is None:
            return tuple(shard_url(self.where, s["name"]) for s in shards)
        if len(given) != len(shards) or not all(isinstance(u, str) for u in given):
            raise ValueError(f"shard_urls: {len(given)} entries, but {self.where} lists "
                             f"{len(shards)} shards; give one URL per shard, in manifest order")
        return tuple(given)

    @staticmethod
    def _select_cameras(spec: SampleSpec, cameras: list[str] | None) -> SampleSpec:
        if cameras is None:
            return spec
        missing = [c for c in cameras if c not in spec.cameras]
        if missing:
            raise ValueError(f"cameras {missing} are not in the shards; they hold "
                             f"{list(spec.cameras)}")
        return SampleSpec(tuple(cameras), spec.pred_len, spec.image_format)

    def __len__(self) -> int:
        return self._len

    @property
    def camera_names(self) -> list[str]:
        return list(self.spec.cameras)

    @property
    def pred_len(self) -> int:
        return self.spec.pred_len

    def set_epoch(self, epoch: int, global_step: int | None = None) -> None:
        """Select the epoch (its shard order and shuffle) and the step the augmenter ramps from.

        global_step defaults to epoch * len(self). Setting the current epoch again keeps a
        resume position loaded with load_state_dict.
        """
        if epoch != self.epoch:
            self.consumed = 0
        self.epoch = epoch
        self.step_at_epoch_start = epoch * self._len if global_step is None else global_step

    def _epoch(self, ring: BatchRing | None = None, live: _PassState | None = None) -> _Epoch:
        return _Epoch(self.shards, self.verify, self.remote, self.spec,
                      image_sizes_of(self.manifest, self.spec.cameras), self.image_size, self.batch_size, self.mode, self.num_workers,
                      self.seed, self.epoch, self.rank, self.world_size, self.consumed,
                      self.batches_per_epoch, self.shuffle_buffer, self.augment,
                      self.per_camera_augment, self.step_at_epoch_start, self.cache_dir,
                      self.on_error, ring, live)

    def _lend_ring(self) -> BatchRing | None:
        """The image ring for this pass's workers: the spare one, or a new one while an
        earlier pass still holds it (an iterator kept half-consumed)."""
        if not self.num_workers or self._mp.get_start_method() != "fork":
            return None   # then each batch gets a shared-memory block of its own
        shape = (self.batch_size, len(self.spec.cameras), *self.image_size, 3)
        ring, self._spare_ring = self._spare_ring, None
        if ring is None or ring.shape != shape:
            # per worker: the batch in use, prefetch_factor queued, and the one being
            # decoded; only slots ever written cost memory (ring.py)
            return BatchRing(self.num_workers * (self.prefetch_factor + 2), shape, self._mp)
        return ring

    def __iter__(self) -> Iterator[CARLABatch]:
        if self.consumed >= self._len or self.mode == "eval":
            # A finished epoch restarts, like DistributedSampler; eval always runs whole, so an
            # interrupted pass (Lightning's sanity check) never hides samples from the next.
            self.consumed = 0
        expected = self._len - self.consumed
        loader, epoch = self._loader()
        produced, batches, workers_gone = 0, iter(loader), False
        closes = self._closes   # close() during this pass: its workers are not kept
        try:
            for batch in batches:
                if isinstance(batch, RingItem):
                    batch = epoch.ring.take(batch, self.pin_memory)
                elif epoch.ring is not None:
                    self.stats["batches_outside_ring"] += 1   # every slot was still held
                produced += 1
                self.consumed += 1
                self.stats["batches"] += 1
                self.stats["skipped_samples"] += len(batch.errors)
                yield batch
            workers_gone = True
        except GeneratorExit:   # the caller stopped: early (break), or at len() (Lightning)
            workers_gone = True
            raise
        finally:
            del batches
            # Persistent workers are kept after a whole pass only: an early stop leaves
            # batches prefetched in their ring slots.
            if (self.persistent_workers and workers_gone and produced == expected
                    and closes == self._closes):
                self._idle = (loader, epoch)
            else:
                del loader   # the DataLoader iterator joins its workers when released
                self._keep_ring(epoch.ring, workers_gone)
        if produced != expected:
            raise RuntimeError(f"rank {self.rank} produced {produced} batches, planned "
                               f"{expected}; this is a carla-wds bug, please report it")

    def _loader(self) -> tuple[DataLoader, _Epoch]:
        """This pass's DataLoader and _Epoch: the persistent one kept from the last whole
        pass, told this pass's epoch and position, or a new one."""
        loader, kept = self._idle or (None, None)
        self._idle = None
        if kept is not None and _PassState.fixed(self._epoch()) != _PassState.fixed(kept):
            loader = None   # a setting changed since those workers forked: they are joined
            self._keep_ring(kept.ring, True)
        if loader is not None:
            epoch = self._epoch(kept.ring, kept.live)
        else:
            epoch = self._epoch(self._lend_ring(),
                                _PassState(self._mp) if self.persistent_workers else None)
            loader = DataLoader(
                _EpochStream(epoch), batch_size=None, num_workers=self.num_workers,
                pin_memory=self.pin_memory, persistent_workers=self.persistent_workers,
                multiprocessing_context=self._mp if self.num_workers else None,
                prefetch_factor=self.prefetch_factor if self.num_workers else None,
                # Its own generator: building a loader must not draw from the global torch
                # RNG, or a resumed run's RNG stream would shift.
                generator=torch.Generator().manual_seed(
                    derive_seed(self.seed, self.epoch, self.rank) % 2**63))
        if epoch.live is not None:
            epoch.live.publish(epoch)
        return loader, epoch

    def close(self) -> None:
        """Shut down persistent workers now rather than when this object is collected; those
        of a pass still running are not kept when it ends."""
        self._idle, self._closes = None, self._closes + 1

    def _keep_ring(self, ring: BatchRing | None, workers_gone: bool) -> None:
        """Keep a pass's ring for the next pass once its workers are joined. After an error,
        a traceback can keep the DataLoader, and so its workers, alive a while longer: that
        ring is dropped rather than shared with new workers."""
        if ring is not None and workers_gone and ring.reclaim():
            self._spare_ring = ring

    def state_dict(self) -> dict[str, Any]:
        """Where this rank is in the epoch; load it into a fresh loader to continue exactly."""
        return {"manifest": self.manifest_id, "mode": self.mode, "seed": self.seed,
                "batch_size": self.batch_size, "world_size": self.world_size,
                "num_workers": self.num_workers, "batches_per_epoch": self.batches_per_epoch,
                "epoch": self.epoch, "consumed": self.consumed,
                "step_at_epoch_start": self.step_at_epoch_start}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        mine = self.state_dict()
        for name in STATE_FIELDS:
            if state.get(name) != mine[name]:
                raise ValueError(f"cannot resume: {name} was {state.get(name)!r} when the state "
                                 f"was saved, but is {mine[name]!r} now. Use the same {name}")
        self.epoch, self.consumed = int(state["epoch"]), int(state["consumed"])
        self.step_at_epoch_start = int(state["step_at_epoch_start"])

    def config(self) -> dict[str, Any]:
        return {"source": self.where, "batch_size": self.batch_size, "mode": self.mode,
                "num_workers": self.num_workers, "world_size": self.world_size,
                "rank": self.rank, "spec": asdict(self.spec), "len": self._len}
