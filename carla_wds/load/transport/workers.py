"""CARLAWebData's workers: what each DataLoader worker runs for one pass (EpochStream, told by
an Epoch), and, in the main process, those workers and their image ring from pass to pass
(Workers).

At the end of each pass Workers decides what outlives it:
- persistent workers are kept after a whole pass only (every planned batch delivered, no
  error, no close() meanwhile): an early stop leaves batches prefetched in their ring slots;
- otherwise the DataLoader is released, which joins its workers, and the ring is lent to the
  next pass only once those processes are seen to have exited. A worker still alive (a
  traceback can keep a failed DataLoader, and its workers, alive a while) could still write
  a slot that the next pass's workers use.

A forked worker can hang inside fork itself, before it runs any Python: CPython 3.11 (3.11.7
here) copies the interpreter's thread-state lock into the child while another thread holds
it (gh-112275), and under DDP gloo's threads take it at any time. So freshly forked workers
must report that they started (worker_init_fn) within START_WAIT; a pass whose workers do
not is shut down (the stuck ones killed) and forked again. Nothing was delivered meanwhile,
so the batches are the same.
"""
from __future__ import annotations

import functools
import logging
import multiprocessing
import time
from dataclasses import dataclass, replace
from multiprocessing.process import BaseProcess
from typing import Any, Iterator

import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from ... import limits
from ...limits import DEFAULT as DEFAULT_LIMITS
from ...limits import Limits
from ...remote import RemoteOptions
from ...rng import derive_seed
from ...schema import SampleSpec
from ...shardread import ShardRef
from . import pinning, rings
from ..decode.batch import CARLABatch
from ..decode.fields import FieldOptions
from ..stream.pipeline import At, fold
from .ring import RingItem
from .rings import Ring

Context = multiprocessing.context.BaseContext
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Epoch:
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
    field_opts: FieldOptions = FieldOptions()
    cache_limit_bytes: int | None = None   # the cache_dir's bound (shardcache.py)
    limits: Limits = DEFAULT_LIMITS        # what one member may make a decoder allocate
    ring: Ring | None = None   # lent by Workers for one pass (or kept workers' own): rings.py
    # the sample_transform (decode/transform.py): batches become dicts (typed Any here, so
    # that transport does not import the transform feature)
    sample_transform: Any = None
    transform_augment: bool = False   # sample["augment"]: the caller's augment=True
    # history windows (history.py): K earlier frames, every `history_stride` samples of a
    # route; `chains`: the shards a route links
    history: int = 0
    history_stride: int = 1
    chains: tuple[tuple[int, ...], ...] | None = None
    # the epoch's plan: plan.EpochPlanner, a mix's (mix.py) or the rest of an epoch resumed
    # in another split (reshape.py): worker_plan(counts, **where) -> plan.WorkerPlan
    planner: Any = None
    # the front door's stages (pipeline.py, front.stream_stages): on one stream of encoded
    # samples (served.served), and on the worker's whole stream
    encoded: tuple = ()
    stages: tuple = ()
    live: "PassState | None" = None      # persistent workers read the per-pass fields here

    @property
    def context(self) -> int:
        """Samples a history window reaches back (plan.context_before)."""
        return self.history * self.history_stride


class PassState:
    """The fields of Epoch that change between passes, in a mapping shared with persistent
    workers, which forked with the first pass's Epoch. The main process publishes them before
    it starts a pass; torch then sends each worker its `_ResumeIteration` through a queue, so
    the worker's next pass reads them after the write."""
    NAMES = ("epoch", "resume_batches", "step_at_epoch_start")

    def __init__(self, context: Context) -> None:
        # inherited by forked workers; spawned ones get the shared block itself, pickled
        self._values = context.RawArray("q", len(self.NAMES))

    def publish(self, e: Epoch) -> None:
        self._values[:] = [getattr(e, name) for name in self.NAMES]

    def current(self, e: Epoch) -> Epoch:
        return replace(e, **{name: int(v) for name, v in zip(self.NAMES, self._values)})

    @classmethod
    def fixed(cls, e: Epoch) -> Epoch:
        """e without what changes between passes: kept workers serve only equal ones."""
        return replace(e, ring=None, live=None, **{name: 0 for name in cls.NAMES})


class EpochStream(IterableDataset):
    """Yields one worker's CARLABatches of one epoch: its plan (e.planner), then e.stages,
    which the front door built (pipeline.py), folded."""

    def __init__(self, e: Epoch) -> None:
        self.e = e

    def __iter__(self) -> Iterator[CARLABatch | RingItem]:
        e = self.e if self.e.live is None else self.e.live.current(self.e)
        yield from limits.scoped(self._stream(e), e.limits)

    @staticmethod
    def _stream(e: Epoch) -> Iterator[CARLABatch | RingItem]:
        info = get_worker_info()
        chains = [list(c) for c in e.chains or ()] or None
        plan = e.planner.worker_plan(
            [s.samples for s in e.shards], chains=chains, context=e.context, rank=e.rank,
            world_size=e.world_size, worker=info.id if info else 0, num_workers=e.num_workers,
            batch_size=e.batch_size, seed=e.seed, epoch=e.epoch, resume_batches=e.resume_batches)
        # the ring this process writes into: a worker's, or the in-process dict ring
        ring = e.ring if info is not None or getattr(e.ring, "in_process", False) else None
        yield from fold(None, e.stages, At(e, plan, info is not None, ring))


def _mark_started(started, worker_id: int) -> None:
    """worker_init_fn: this worker got through fork into Python."""
    started[worker_id] = 1


@dataclass
class _Pass:
    """One DataLoader, what its workers were told, and their processes once started."""
    loader: DataLoader | None
    epoch: Epoch
    started: object = None   # a shared byte per worker, set once it runs (_mark_started)
    procs: tuple[BaseProcess, ...] = ()


class Workers:
    """The DataLoader workers of one CARLAWebData and their image ring, pass after pass."""
    EXIT_WAIT = 1.0   # seconds a pass's end waits for workers that have not exited yet
    START_WAIT = 20.0   # seconds a forked worker has to reach Python (module docstring)
    START_TRIES = 3

    def __init__(self, num_workers: int, *, prefetch_factor: int, pin_memory: bool,
                 persistent: bool, stats: dict[str, int], context: Context | None = None
                 ) -> None:
        self.num_workers, self.prefetch_factor = num_workers, prefetch_factor
        # without CUDA: one warning, and unpinned batches (pinning.py)
        self.pin_memory, self.stats = pinning.usable(pin_memory), stats
        # Workers kept from one whole pass to the next skip the fork and keep their ring slots
        # (each costs a worker 12,800 page faults to write first; ring.py). No workers, no-op.
        self.persistent = persistent and num_workers > 0
        self.context = context or multiprocessing.get_context()   # the ring's and the workers'
        self._kept: _Pass | None = None     # persistent workers, between passes
        self._spare: Ring | None = None   # a ring no live worker can write
        self._closes = 0

    def run(self, e: Epoch, expected: int) -> Iterator[CARLABatch]:
        """One pass: the `expected` batches of e, in order."""
        p, batches = self._begin(e)
        receive = functools.partial(rings.receive, ring=p.epoch.ring, pin_memory=self.pin_memory)
        # pinned with workers: in a thread, a batch ahead of the caller (pinning.py)
        received = pinning.Ahead(batches, receive) if self.pin_memory and self.num_workers \
            else map(receive, batches)
        # clean: no error ended the pass, so kept workers are in a known state
        produced, clean, closes = 0, False, self._closes
        try:
            for batch, outside in received:   # counted as the caller gets them
                produced += 1
                self.stats["batches_outside_ring"] += int(outside)
                yield batch
            clean = True
        except GeneratorExit:   # the caller stopped: early (break), or at len() (Lightning)
            clean = True
            raise
        finally:
            if isinstance(received, pinning.Ahead):
                received.close()   # the thread lets go of the DataLoader's iterator first
            del batches, received
            if self.persistent and clean and produced == expected and closes == self._closes:
                self._kept = p
            else:
                self._finish(p, reuse_ring=clean)
        if produced != expected:
            raise RuntimeError(f"rank {e.rank} produced {produced} batches, planned "
                               f"{expected}; this is a carla-wds bug, please report it")

    def _begin(self, e: Epoch) -> tuple[_Pass, Iterator]:
        """This pass and its DataLoader's iterator, with workers that started: kept ones, or
        ones forked now that reached Python (forked again up to START_TRIES times)."""
        for attempt in range(1, self.START_TRIES + 1):
            p = self._start(e)
            before = None if p.procs else set(multiprocessing.active_children())
            batches = iter(p.loader)   # forks (or resets) the workers
            if before is None:
                return p, batches
            p.procs = tuple(set(multiprocessing.active_children()) - before)
            stuck = self._not_started(p)
            if not stuck:
                return p, batches
            log.warning("rank %d: DataLoader worker(s) %s hung in fork (no Python after "
                        "%.0f s; CPython gh-112275, before 3.12, causes this under DDP); "
                        "forking the pass's workers again (try %d of %d)", e.rank, stuck,
                        self.START_WAIT, attempt, self.START_TRIES)
            del batches
            self._drop_stuck(p)
        raise RuntimeError(f"rank {e.rank}: DataLoader workers hung in fork {self.START_TRIES} "
                           "times (CPython gh-112275). Fix: Python 3.12 or newer, or "
                           "num_workers=0")

    def _drop_stuck(self, p: _Pass) -> None:
        """Shut a pass down whose workers hung in fork. torch's shutdown ends the others, but
        its SIGTERM does not end a stuck one: a handler the parent installed (Lightning's,
        torchrun's) is inherited, and only runs Python code, which that child never reaches.
        So what is still alive then gets SIGKILL."""
        p.loader = None
        for proc in p.procs:
            if proc.is_alive():
                proc.kill()
        self._finish(p)

    def _not_started(self, p: _Pass) -> list[int]:
        """The workers of a freshly forked pass that have not reached Python in START_WAIT
        (a dead one is not waited for: torch reports it)."""
        if p.started is None:
            return []
        deadline = time.monotonic() + self.START_WAIT
        while True:
            waiting = [i for i in range(len(p.started)) if not p.started[i]]
            dead = any(not proc.is_alive() for proc in p.procs)
            if not waiting or dead or time.monotonic() > deadline:
                return [] if dead else waiting
            time.sleep(0.002)

    def close(self) -> None:
        """Join kept workers now; those of a pass still running are not kept when it ends."""
        kept, self._kept, self._closes = self._kept, None, self._closes + 1
        if kept is not None:
            self._finish(kept)

    def _start(self, e: Epoch) -> _Pass:
        """This pass's DataLoader: the persistent one kept from the last whole pass, told
        this pass's epoch and position, or a new one."""
        kept, self._kept = self._kept, None
        if kept is not None and PassState.fixed(e) != PassState.fixed(kept.epoch):
            self._finish(kept)   # a setting changed since those workers forked
            kept = None
        if kept is not None:
            kept.epoch = replace(e, ring=kept.epoch.ring, live=kept.epoch.live)
            p = kept
        else:
            e = replace(e, ring=self._lend_ring(e),
                        live=PassState(self.context) if self.persistent else None)
            started = (self.context.RawArray("b", self.num_workers)
                       if self.num_workers and self.context.get_start_method() == "fork"
                       else None)
            p = _Pass(self._loader(e, started), e, started)
        if p.epoch.live is not None:
            p.epoch.live.publish(p.epoch)
        return p

    def _loader(self, e: Epoch, started) -> DataLoader:
        return DataLoader(
            EpochStream(e), batch_size=None, num_workers=self.num_workers,
            worker_init_fn=None if started is None else functools.partial(_mark_started,
                                                                          started),
            pin_memory=False, persistent_workers=self.persistent,   # rings.receive pins
            multiprocessing_context=self.context if self.num_workers else None,
            prefetch_factor=self.prefetch_factor if self.num_workers else None,
            # Its own generator: building a loader must not draw from the global torch RNG,
            # or a resumed run's RNG stream would shift.
            generator=torch.Generator().manual_seed(derive_seed(e.seed, e.epoch, e.rank) % 2**63))

    def _lend_ring(self, e: Epoch) -> Ring | None:
        """The ring for this pass's workers: the spare one, or a new one (rings.py)."""
        ring, self._spare = rings.lend(self._spare, self.num_workers, self.prefetch_factor,
                                       self.context, e), None
        return ring

    def _finish(self, p: _Pass, reuse_ring: bool = True) -> None:
        """Release a pass's DataLoader, which joins its workers, and keep its ring for the
        next pass if they have exited (ring.reclaim then frees the slots they left taken).
        After an error the ring is dropped, not reused: the error's traceback can keep the
        pass's last batch, and so its slot, alive for an unknown time."""
        p.loader = None   # the last reference: its iterator shuts the workers down
        ring = p.epoch.ring
        if ring is not None and reuse_ring and self._exited(p.procs) and ring.reclaim():
            self._spare = ring

    def _exited(self, procs: tuple[BaseProcess, ...]) -> bool:
        """Whether all of procs have exited. Joined workers have; a killed one may take a
        moment to be reaped, and one a traceback keeps alive costs EXIT_WAIT, on an error
        path only."""
        deadline = time.monotonic() + self.EXIT_WAIT
        for proc in procs:
            proc.join(max(0.0, deadline - time.monotonic()))
        return not any(proc.is_alive() for proc in procs)
