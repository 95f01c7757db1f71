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

With history windows (`history=K`) each frame of a window is transformed alone (its own
sample, `rng` and `augment_iteration` the window's), and the collated values get a time axis:
tensors (B, K + 1, ...), per-sample lists B lists of K + 1, oldest frame first, plus
"frame_valid" and "frame_keys"; a frame the window lacks is the next real one's copy
(docs/loading.md, "History windows").
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field, fields as dc_fields, replace
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import torch
from torch.utils.data import default_collate

from ...rng import derive_seed, numpy_rng
from ..stream import shardio
from . import stages
from .batch import CARLABatch
from .model_batch import ModelBatch

SampleTransform = Callable[[dict[str, Any], np.random.Generator], dict[str, Any]]
CORE = ("speed", "target_point", "command", "waypoints", "waypoints_diff")
ADDED_KEYS = ("valid", "key")   # what every transformed batch carries beside the user's keys
WINDOW_KEYS = ("frame_valid", "frame_keys")   # and with history windows
_SKIP = frozenset(("images", "keys", "valid", "errors", "fields", "measurements", *CORE))


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
    elsewhere (dictring.py). `steps`: frames per sample (history windows: K + 1, decoded as
    one flat batch, history.flatten), each transformed alone, then given a time axis."""

    def __init__(self, fn: SampleTransform, *, seed: int, epoch: int, mode: str,
                 template: Callable[[], dict[str, Any]], augment: bool = False,
                 first_position: int = 0, iteration_of: Callable[[int], int] | None = None,
                 collate: Callable[[list], Any] | None = None,
                 overlays: tuple[str, ...] = (), steps: int = 1) -> None:
        self.fn, self.seed, self.epoch, self.mode = fn, seed, epoch, mode
        # overlay kinds whose batch.fields lists go into the dict's "overlays" (overlay.py):
        # added after collation, since entries may be None or JSON that default_collate rejects
        self.overlays, self.steps = overlays, steps
        self.added = ADDED_KEYS + (WINDOW_KEYS if steps > 1 else ()) + \
            (("overlays",) if overlays else ())
        # default_collate, or the worker's dict ring's (the same batch, written in its slot)
        self.collate = collate or default_collate
        self.augment = augment and mode == "train"
        # the stream position of the next row, for the augmenter's ramp (as the loader's own)
        self.position, self.iteration_of = first_position, iteration_of
        self.template = template
        self.last_real: list[dict[str, Any]] | None = None   # a row's frames

    def one(self, batch: CARLABatch, i: int, row: int | None = None) -> dict[str, Any]:
        """Frame i of the batch through fn. `row`: the sample (window) it belongs to, whose
        own frame's key seeds the rng and whose position ramps (i itself without windows)."""
        row = i if row is None else row
        key = batch.keys[(row + 1) * self.steps - 1]
        ramp = self.iteration_of(self.position + row) if self.iteration_of and self.augment \
            else 0
        return self.fn(sample_of(batch, i, self.mode, self.augment, ramp),
                       sample_rng(self.seed, self.epoch, key))

    def _frames(self, batch: CARLABatch, row: int, valid: list[bool]) -> list[dict[str, Any]]:
        """A real row's frames, oldest first; a frame the window lacks (padding, or a frame
        skipped by on_error="skip") is the next real frame after it (its own at the latest)."""
        first = row * self.steps
        frames = [self.one(batch, i, row) if valid[i] else None
                  for i in range(first, first + self.steps)]
        for t in range(self.steps - 2, -1, -1):
            frames[t] = frames[t + 1] if frames[t] is None else frames[t]
        return frames

    def __call__(self, batches: Iterable[CARLABatch]) -> Iterator[ModelBatch]:
        for batch in batches:
            valid, steps = batch.valid.tolist(), self.steps
            own = valid[steps - 1::steps]   # each row's own frame
            frames = windowed_fields(batch, self.overlays, steps)
            rows = [self._frames(frames, r, valid) if v else None for r, v in enumerate(own)]
            real = next((r for r in rows if r is not None), None)
            if real is None:
                if self.last_real is None:
                    self.last_real = [self.template()] * steps
                real = self.last_real
            else:   # kept as a copy: a row may view the batch's images, whose block is reused
                self.last_real = copy.deepcopy(real)
            flat = [f for r in rows for f in (r if r is not None else copy.deepcopy(real))]
            yield ModelBatch(self._batch(self.collate(flat), batch, own, flat[0]),
                             list(batch.errors))

    def _batch(self, data: Any, batch: CARLABatch, own: list[bool], first: Any
               ) -> dict[str, Any]:
        """The collated dict, checked, each value with its time axis with windows, and the
        keys the loader adds."""
        if not isinstance(data, dict):
            raise TypeError(f"sample_transform returned {type(first).__name__}; "
                            "expected a dict (str -> value)")
        clash = sorted(set(data) & set(self.added))
        if clash:
            raise ValueError(f"adapter/sample_transform returned keys {clash}, which the "
                             "loader adds itself (\"overlays\" with overlays=); rename them")
        n, steps = len(own), self.steps
        self.position += n
        keys = batch.keys[steps - 1::steps]
        if steps > 1:   # (B * (K + 1), ...) -> (B, K + 1, ...), the frames oldest first
            data = by_window(data, n, steps)
            data["frame_valid"] = batch.valid.view(n, steps).clone()
            data["frame_keys"] = [[k if v else "" for k, v in zip(
                batch.keys[r * steps:(r + 1) * steps], batch.valid[r * steps:(r + 1) * steps]
                .tolist())] for r in range(n)]
        data["valid"] = torch.tensor(own, dtype=torch.bool)
        data["key"] = [k if v else "" for k, v in zip(keys, own)]
        if self.overlays:   # one entry per row, None for padding (OverlayJoin.tapped)
            data["overlays"] = {k: list(batch.fields[k]) for k in self.overlays}
        return data


def windowed_fields(batch: CARLABatch, overlays: tuple[str, ...], steps: int) -> CARLABatch:
    """With windows, the batch a frame's sample is read from: the overlay entries (one per
    window, its own frame's) per frame, the window's own frame's entry at its own frame and
    None at the earlier ones."""
    if steps == 1 or not overlays:
        return batch
    fields = dict(batch.fields)
    for k in overlays:
        per_frame: list[Any] = [None] * (len(fields[k]) * steps)
        per_frame[steps - 1::steps] = fields[k]
        fields[k] = per_frame
    return replace(batch, fields=fields)


def by_window(value: Any, n: int, steps: int) -> Any:
    """A collated value of n * steps frames -> n windows of steps: a tensor's first axis
    (n * steps, ...) -> (n, steps, ...), a list of n * steps values -> n lists of steps,
    through dicts, and lists or tuples of collated values."""
    if isinstance(value, torch.Tensor):
        return value.unflatten(0, (n, steps)) if value.dim() and value.shape[0] == n * steps \
            else value
    if isinstance(value, dict):
        return type(value)((k, by_window(v, n, steps)) for k, v in value.items())
    if isinstance(value, (list, tuple)) and value and all(
            isinstance(v, (torch.Tensor, dict, list, tuple)) for v in value):
        items = [by_window(v, n, steps) for v in value]   # collate's per-position values
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
    if isinstance(value, list) and len(value) == n * steps:
        return [value[r * steps:(r + 1) * steps] for r in range(n)]
    return value


@dataclass(frozen=True)
class Transform:
    """Worker stage (pipeline.py): decoded batches -> ModelBatches of `fn`'s dicts, collated
    into a slot of the worker's dict ring where it has one. `overlays`: the overlay kinds
    the dicts carry under "overlays"."""
    fn: SampleTransform
    overlays: tuple[str, ...] = ()
    steps: int = 1   # frames per sample: history windows' K + 1

    def __call__(self, batches: Iterable[CARLABatch], at: Any) -> Iterator[ModelBatch]:
        e, ring = at.e, at.ring
        return Transformer(self.fn, seed=e.seed, epoch=e.epoch, mode=e.mode,
                           template=lambda: self.template(at), augment=e.transform_augment,
                           first_position=at.skipped, overlays=self.overlays,
                           iteration_of=at.iteration_of(), steps=self.steps,
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
