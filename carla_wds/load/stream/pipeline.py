"""A worker's stream as a list of stages (issue 40): the front door (front.stream_stages)
builds them once, at construction, and every worker folds them, with no per-feature `if`.

A stage is a small picklable object (it travels in workers.Epoch to forked or spawned
workers, and kept workers compare it from pass to pass) with one method,
`stage(stream, at) -> stream`, in webdataset's style of generator stages; `at` is the worker's
pass (At): its Epoch, plan, ring and what one stage leaves for a later one. Each feature's
stages live beside the feature: the sources in served.py and strata.py, history windows'
in history.py, overlays' in overlay.py, a sample_transform's in transform.py; the core ones
(cut, release, decode, deliver) here.

Two folds: `Epoch.encoded`, the stages on one stream of still-encoded samples (read, windows,
shuffle: served.served, once per mix entry with stratified batches), and `Epoch.stages`, the
worker's whole stream from its plan to what it yields.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Iterator, Protocol

from . import shardio
from ..decode import stages
from ..decode.augment import ramp
from ..decode.batch import Alloc, ReusedBlock, private_block, shared_block
from ..decode.fields import FieldOptions
from ..plan.epoch import WorkerPlan


class Stage(Protocol):
    def __call__(self, stream: Any, at: "At") -> Any: ...


@dataclass
class At:
    """One worker's pass: what its stages are told beside the stream."""
    e: Any                    # workers.Epoch, with this pass's live fields
    plan: WorkerPlan
    in_worker: bool           # in a DataLoader worker (not the main process)
    ring: Any = None          # the ring this process writes into (None: torch's way)
    notes: dict[str, Any] = field(default_factory=dict)   # a stage's word to a later one

    @property
    def worker(self) -> int:
        return self.plan.logical_worker

    @property
    def skipped(self) -> int:
        """Samples consumed before a resume (the stream's first position)."""
        return self.plan.skip_batches * self.e.batch_size

    def field_opts(self) -> FieldOptions:
        """The adapters' draws are per (seed, epoch, key), and in train mode only."""
        e = self.e
        if e.mode != "train":
            return replace(e.field_opts, train=False)
        return replace(e.field_opts, seed=e.seed, epoch=e.epoch)

    def iteration_of(self) -> Callable[[int], int]:
        """position -> the augmenter's ramp iteration (augment.ramp)."""
        e = self.e
        return ramp(e.step_at_epoch_start, e.batch_size, e.world_size, e.num_workers,
                    self.worker)


def fold(stream: Any, chain: Iterable[Stage], at: Any) -> Any:
    """Each stage of `chain` on the stream the one before gave."""
    for stage in chain:
        stream = stage(stream, at)
    return stream


@dataclass(frozen=True)
class Cut:
    """Encoded samples -> this worker's remaining batches as lists of batch_size samples
    (None pads the end): its real samples only, less those consumed before a resume (still
    encoded)."""
    def __call__(self, raw: Iterable, at: At) -> Iterator[list]:
        raw = stages.skip(stages.take(raw, at.plan.n_real), at.skipped)
        return stages.group(raw, at.e.batch_size, at.plan.n_batches - at.plan.skip_batches)


@dataclass(frozen=True)
class Release:
    """The reader gives each group's mapped pages back once it is decoded (shardio)."""
    def __call__(self, groups: Iterable[list], at: At) -> Iterator[list]:
        return shardio.released(groups)


@dataclass(frozen=True)
class DecodeBatches:
    """Groups -> CARLABatches, each group of `steps` frames per sample (history windows:
    K + 1) decoded as one flat batch. `reuse`: one private block reused batch after batch
    (a sample_transform's images never leave the worker); else a ring slot or shared memory
    in a worker, private memory without."""
    steps: int = 1
    reuse: bool = False

    def __call__(self, groups: Iterable[list], at: At) -> Iterator[Any]:
        e = at.e
        return stages.decode_batches(groups, e.spec, e.image_size, e.on_error,
                                     self._augmenter(at), first_position=at.skipped * self.steps,
                                     alloc=ReusedBlock() if self.reuse else self._alloc(at),
                                     sizes=e.image_sizes, field_opts=at.field_opts())

    @staticmethod
    def _alloc(at: At) -> Alloc:
        if at.in_worker and at.ring is not None:
            return at.ring.alloc
        # a worker's batch goes to the main process: shared memory from the start
        return shared_block if at.in_worker else private_block

    def _augmenter(self, at: At) -> Callable[[int], Callable] | None:
        e, steps = at.e, self.steps
        if not (e.augment and e.mode == "train"):
            return None
        aug = stages.augmenter(e.seed, e.epoch, e.per_camera_augment, at.iteration_of())
        # positions count frames: a window's all ramp as its own sample would
        return aug if steps == 1 else lambda pos: aug(pos // steps)


@dataclass(frozen=True)
class Deliver:
    """A batch in a ring slot travels as the ring's item (the images or arrays stay there)."""
    def __call__(self, batches: Iterable[Any], at: At) -> Iterator[Any]:
        return iter(batches) if at.ring is None else map(at.ring.item, batches)
