"""`sample_transform=`: a function of yours on each decoded sample, run in the loader's workers.

    def mine(sample: dict, rng: numpy.random.Generator) -> dict: ...
    data = CARLAWebData(shards, batch_size=8, sample_transform=mine)
    for batch in data:     # a plain dict: default_collate of your dicts, plus "valid", "key"

`sample` holds one sample as the loader decoded it (numpy, worker side): "key", "mode"
("train" or "eval"), "augment" (the caller's augment=True, in train mode) and
"augment_iteration" (the loader augmenter's ramp position for this sample: it follows the
trainer's global step, set_epoch(..., global_step=)), "images" (n_cameras, H, W, 3) uint8 HWC RGB (after the loader's own
augmentation, if any), the core labels ("speed", "target_point", "command", "waypoints",
"waypoints_diff"), every selected field under its CARLABatch name ("depth", "lidar",
"measurements" as a dict, ...) and "fields". `rng` is seeded per (seed, epoch, key), so a
draw is the same in every run, worker count and resume. Each batch is torch's default_collate
of the returned dicts (lists stay lists, as in a DataLoader), then "valid" (B,) bool and "key"
(a list of str, "" for padding).

Padding (eval's tail and on_error="skip" samples) must run through the user's model unchanged,
so a padding row is a copy of a real sample of the same batch (else of the worker's last real
one, else of the first sample of the first shard) with valid False: mask by batch["valid"].
The images of such a batch are decoded into private memory in the worker (not the image ring),
since what crosses to the main process is your dict's tensors: collated into a reused
shared-memory slot (dictring.py), whose views the batch's tensors are.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field, fields as dc_fields
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import torch
from torch.utils.data import default_collate

from ..rng import derive_seed, numpy_rng
from . import shardio, stages
from .batch import CARLABatch

SampleTransform = Callable[[dict[str, Any], np.random.Generator], dict[str, Any]]
CORE = ("speed", "target_point", "command", "waypoints", "waypoints_diff")
ADDED_KEYS = ("valid", "key")   # what every transformed batch carries beside the user's keys
_SKIP = frozenset(("images", "keys", "valid", "errors", "fields", "measurements", *CORE))


@dataclass
class ModelBatch:
    """A transformed batch on its way from a worker: the dict, and why rows were skipped."""
    data: dict[str, Any]
    errors: list[str] = field(default_factory=list)

    def pin_memory(self) -> "ModelBatch":
        # DataLoader(pin_memory=True) calls this on custom batch types
        return ModelBatch(_pinned(self.data), self.errors)


def _pinned(value: Any) -> Any:
    """Pinned copies of every tensor, through the containers collate makes (dicts of their
    type, lists, tuples, namedtuples): the dict ring frees a pinned batch's slot at once."""
    if isinstance(value, torch.Tensor):
        return value.pin_memory()
    if isinstance(value, dict):
        return type(value)((k, _pinned(v)) for k, v in value.items())
    if isinstance(value, list):
        return [_pinned(v) for v in value]
    if isinstance(value, tuple):
        items = [_pinned(v) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    return value


def _row(value: Any, i: int) -> Any:
    """Row i of a batched field (numpy view), recursively through dicts; lists by index."""
    if isinstance(value, torch.Tensor):
        return value[i].numpy()
    if isinstance(value, dict):
        return {k: _row(v, i) for k, v in value.items()}
    if isinstance(value, list):
        return value[i]
    return value


def sample_of(batch: CARLABatch, i: int, mode: str, augment: bool = False,
              iteration: int = 0) -> dict[str, Any]:
    """Row i of a decoded batch as the dict a sample_transform gets (module docstring)."""
    out: dict[str, Any] = {"key": batch.keys[i], "mode": mode, "augment": augment,
                           "augment_iteration": iteration,
                           # (n, 3, H, W) is a view of (n, H, W, 3) memory: the HWC view back
                           "images": batch.images[i].permute(0, 2, 3, 1).numpy()}
    out.update({name: _row(getattr(batch, name), i) for name in CORE})
    out["speed"] = float(out["speed"])
    out["measurements"] = _row(batch.measurements or {}, i)
    out["fields"] = _row(batch.fields, i)
    for f in dc_fields(batch):
        value = getattr(batch, f.name)
        if f.name not in _SKIP and value is not None:
            out[f.name] = _row(value, i)
    return out


def sample_rng(seed: int, epoch: int, key: str) -> np.random.Generator:
    """The generator a sample_transform gets: a function of (seed, epoch, key) only."""
    return numpy_rng(derive_seed(seed, epoch, key, "sample_transform"))


class Transformer:
    """Applies one sample_transform to a worker's decoded batches (see the module docstring).
    `template`: decodes and transforms a real sample for a batch with none (called at most
    once per worker pass). `collate`: default_collate, or one that writes the same batch
    elsewhere (dictring.py)."""

    def __init__(self, fn: SampleTransform, *, seed: int, epoch: int, mode: str,
                 template: Callable[[], dict[str, Any]], augment: bool = False,
                 first_position: int = 0, iteration_of: Callable[[int], int] | None = None,
                 collate: Callable[[list], Any] | None = None,
                 overlays: tuple[str, ...] = ()) -> None:
        self.fn, self.seed, self.epoch, self.mode = fn, seed, epoch, mode
        # overlay kinds whose batch.fields lists go into the dict's "overlays" (overlay.py):
        # added after collation, since entries may be None or JSON that default_collate rejects
        self.overlays = overlays
        self.added = ADDED_KEYS + (("overlays",) if overlays else ())
        # default_collate, or the worker's dict ring's (the same batch, written in its slot)
        self.collate = collate or default_collate
        self.augment = augment and mode == "train"
        # the stream position of the next row, for the augmenter's ramp (as the loader's own)
        self.position, self.iteration_of = first_position, iteration_of
        self.template = template
        self.last_real: dict[str, Any] | None = None

    def one(self, batch: CARLABatch, i: int) -> dict[str, Any]:
        key = batch.keys[i]
        ramp = self.iteration_of(self.position + i) if self.iteration_of and self.augment else 0
        return self.fn(sample_of(batch, i, self.mode, self.augment, ramp),
                       sample_rng(self.seed, self.epoch, key))

    def __call__(self, batches: Iterable[CARLABatch]) -> Iterator[ModelBatch]:
        for batch in batches:
            valid = batch.valid.tolist()
            rows: list[dict[str, Any] | None] = [self.one(batch, i) if v else None
                                                 for i, v in enumerate(valid)]
            real = next((r for r in rows if r is not None), None)
            if real is None:
                if self.last_real is None:
                    self.last_real = self.template()
                real = self.last_real
            else:   # kept as a copy: a row may view the batch's images, whose block is reused
                self.last_real = copy.deepcopy(real)
            rows = [r if r is not None else copy.deepcopy(real) for r in rows]
            data = self.collate(rows)
            if not isinstance(data, dict):
                raise TypeError(f"sample_transform returned {type(rows[0]).__name__}; "
                                "expected a dict (str -> value)")
            clash = sorted(set(data) & set(self.added))
            if clash:
                raise ValueError(f"adapter/sample_transform returned keys {clash}, which the "
                                 "loader adds itself (\"overlays\" with overlays=); rename them")
            self.position += len(valid)
            data["valid"] = torch.tensor(valid, dtype=torch.bool)
            data["key"] = [k if v else "" for k, v in zip(batch.keys, valid)]
            if self.overlays:   # one entry per row, None for padding (OverlayJoin.tapped)
                data["overlays"] = {k: list(batch.fields[k]) for k in self.overlays}
            yield ModelBatch(data, list(batch.errors))


@dataclass(frozen=True)
class Transform:
    """Worker stage (pipeline.py): decoded batches -> ModelBatches of `fn`'s dicts, collated
    into a slot of the worker's dict ring where it has one. `overlays`: the overlay kinds
    the dicts carry under "overlays"."""
    fn: SampleTransform
    overlays: tuple[str, ...] = ()

    def __call__(self, batches: Iterable[CARLABatch], at: Any) -> Iterator[ModelBatch]:
        e, ring = at.e, at.ring
        return Transformer(self.fn, seed=e.seed, epoch=e.epoch, mode=e.mode,
                           template=lambda: self.template(at), augment=e.transform_augment,
                           first_position=at.skipped, overlays=self.overlays,
                           iteration_of=at.iteration_of(),
                           collate=ring.collate if ring is not None else None)(batches)

    def template(self, at: Any) -> dict[str, Any]:
        """The transformed first sample of the first shard: what a worker's padding rows copy
        when it has no real sample (eval, fewer samples than ranks and workers)."""
        e = at.e
        raw = shardio.read_segments([(0, 0, 1)], list(e.shards), "raise", e.cache_dir,
                                    e.verify, e.remote, e.cache_limit_bytes)
        batch = next(stages.decode_batches(stages.group(raw, 1, 1), e.spec, e.image_size,
                                           sizes=e.image_sizes, field_opts=at.field_opts()))
        batch.fields.update({k: [None] for k in self.overlays})   # as a row without
        return Transformer(self.fn, seed=e.seed, epoch=e.epoch, mode=e.mode,
                           template=dict).one(batch, 0)
