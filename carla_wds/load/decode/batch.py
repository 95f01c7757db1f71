"""Typed samples and batches: named fields instead of the seed's positional tuples."""
from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np
import torch

from .places import attribute_names

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


@dataclass
class CARLASample:
    """One decoded frame, as numpy arrays: what a `sample_transform` gets and returns, and
    what `collate` stacks into a `CARLABatch` (whose docstring gives each label's meaning).

    Attributes:
        key: the sample key, `<route>__<frame>`.
        images: (n_cameras, 3, H, W) uint8 RGB, a view of (n_cameras, H, W, 3) memory.
        speed: m/s.
        target_point: (2,) float32, metres, label frame.
        command: (6,) float32 one-hot, CARLABatch.command's columns.
        waypoints: (pred_len, 2) float32, metres, label frame.
        waypoints_diff: (pred_len, 2) float32, metres: each waypoint minus the one before.
        meta: the sample's meta.json, as parsed.
        valid: False for a padding sample.
    """
    key: str
    images: np.ndarray
    speed: float
    target_point: np.ndarray
    command: np.ndarray
    waypoints: np.ndarray
    waypoints_diff: np.ndarray
    meta: dict = field(default_factory=dict)
    valid: bool = True


@dataclass
class CARLABatch:
    """One batch of a pack: the cameras and labels of B samples as tensors, by name.

    B is the batch size (padding rows included: `len(batch)`), n_cameras the cameras served
    (`CARLAWebData(cameras=...)`, in that order), (H, W) the loader's `image_size`, pred_len
    the pack's future waypoints. Positions are metres in the pack's label frame, which the
    manifest records in `spec.frames` (`tcp`: x right, y backward; `garage`: x forward, y
    right; docs/coordinates.md). A row whose `valid` is False holds zeros. With
    `CARLAWebData(history=K)` every per-frame value has a time axis after B, (B, K + 1, ...),
    oldest first. Every attribute from `depth` on is None unless selected with
    `CARLAWebData(fields=[...])`; docs/batch.md lists where each packed modality lands.

    Attributes:
        images: (B, n_cameras, 3, H, W) uint8 RGB, always. Channels-last in memory (a view
            of (B, n_cameras, H, W, 3)); `normalized_images()` gives ImageNet-normalised floats.
        speed: (B,) float32, m/s: the ego vehicle's speed at the frame. Always.
        target_point: (B, 2) float32, metres, label frame: the route's next target point.
            Always.
        command: (B, 6) float32 one-hot, always: the route's CARLA RoadOption, columns in
            order left, right, straight, follow lane, change left, change right (RoadOption
            1 to 6; VOID counts as follow lane).
        waypoints: (B, pred_len, 2) float32, metres, label frame: the ego's future positions,
            one per step of the pack's sample rate. Always.
        waypoints_diff: (B, pred_len, 2) float32, metres, label frame: each waypoint minus
            the one before it (row 0: the first waypoint itself). Always.
        keys: list of B sample keys `<route>__<frame>`; "" for padding rows. Always.
        valid: (B,) bool, always: False for padding (the end of an eval pass) and for
            samples skipped with `on_error="skip"`.
        errors: list of str, one message per skipped sample saying why; empty otherwise.
        depth: (B, n, H, W) float32, metres, at the camera size; n is 1 for a layout's one
            depth camera, else one per camera. With `fields=["depth"]`.
        semantics: (B, n, H, W) uint8 class ids (nearest resize), n as for depth: the
            project's training classes where the pack records a class table (garage,
            transfuser2022), else CARLA's ids as saved; `fields=["semantics_raw"]` puts the
            saved ids in `fields["semantics_raw"]`. With `fields=["semantic"]`.
        bev: (B, C, Hb, Wb) uint8 bird's-eye planes, as stored. With its field selected.
        lidar: (B, N_max, C) float32 points in the pack's LiDAR frame, zero-padded; or a
            (B, C, H, W) histogram with `lidar_histogram=`. With its field selected.
        lidar_len: (B,) int64, the real points of each row of `lidar` (point lists).
        boxes: (B, K_max, D) float32, one row per box, columns `carla_wds.boxes.BOX_COLUMNS`
            (a layout may add its own), zero-padded. With its field selected.
        boxes_len: (B,) int64, the real rows of each sample's `boxes`.
        route: (B, R, 2) float32, metres, label frame: the route ahead from the measurements
            record, as the project's loader serves it (garage: 20 smoothed points, all real;
            `measurements["route_raw"]` with `route_raw_len` holds the saved one). With the
            measurements field selected, where the record has a route.
        measurements: dict of name -> (B, ...) tensors: the measurements record's values.
            With its field selected (`fields=["measurements"]`).
        camera_set: (B,) int8, on shards with a camera twin: 1 where the sample got the
            augmented twin's cameras, else 0.
        intrinsics: (B, n_cameras, 3, 3) float32: each camera's K for the images as loaded
            (scaled to `image_size`). With `fields=["calibration"]` (Bench2Drive).
        cam2ego: (B, n_cameras, 4, 4) float32: each camera's camera-to-ego transform, as
            stored. With `fields=["calibration"]`.
        fields: dict of every selected field without an attribute of its own, by field name:
            radar (with `radar_len`), instance, the expert's feature, ego poses, raw JSON
            (one parsed value per sample, None for padding), per-camera members selected
            one by one, `<name>_raw` class ids, and overlays' entries. Empty when none.
        frame_valid: (B, K + 1) bool with `history=K`: which steps of each window are real
            frames (the others are zeros). None without history.
        frame_keys: B lists of K + 1 frame keys ("" for padding steps) with `history=K`.
            None without history.
    """
    images: torch.Tensor
    speed: torch.Tensor
    target_point: torch.Tensor
    command: torch.Tensor
    waypoints: torch.Tensor
    waypoints_diff: torch.Tensor
    keys: list[str]
    valid: torch.Tensor
    errors: list[str] = field(default_factory=list)
    depth: torch.Tensor | None = None
    semantics: torch.Tensor | None = None
    bev: torch.Tensor | None = None
    lidar: torch.Tensor | None = None
    lidar_len: torch.Tensor | None = None
    boxes: torch.Tensor | None = None
    boxes_len: torch.Tensor | None = None
    route: torch.Tensor | None = None
    measurements: dict[str, torch.Tensor] | None = None
    camera_set: torch.Tensor | None = None
    intrinsics: torch.Tensor | None = None
    cam2ego: torch.Tensor | None = None
    fields: dict[str, torch.Tensor | list[Any]] = field(default_factory=dict)
    frame_valid: torch.Tensor | None = None
    frame_keys: list[list[str]] | None = None

    def __len__(self) -> int:
        return len(self.keys)

    def __repr__(self) -> str:
        """One line per field set: its shape and dtype, not its values (print(batch))."""
        def show(value: Any) -> str:
            if isinstance(value, torch.Tensor):
                return f"{tuple(value.shape)} {str(value.dtype).replace('torch.', '')}"
            if isinstance(value, dict):
                return "{" + ", ".join(f"{k}: {show(v)}" for k, v in value.items()) + "}"
            return f"list of {len(value)}" if isinstance(value, list) else repr(value)
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        rows = [f"  {name}: {show(v)}" for name, v in values.items()
                if name not in ("keys", "errors") and v is not None and not (
                    isinstance(v, dict) and not v)]
        head = (f"CARLABatch of {len(self)} ({int(self.valid.sum())} valid), keys "
                f"{self.keys[:2]}{' ...' if len(self) > 2 else ''}, {len(self.errors)} errors")
        return "\n".join([head, *rows])

    @property
    def extras(self) -> dict[str, torch.Tensor | list[Any]] | None:
        """Deprecated alias of `fields` (None when it is empty), kept for one release."""
        warnings.warn("CARLABatch.extras is deprecated; read CARLABatch.fields",
                      DeprecationWarning, stacklevel=2)
        return self.fields or None

    def _map(self, fn) -> "CARLABatch":
        def each(value):
            if isinstance(value, torch.Tensor):
                return fn(value)
            if isinstance(value, dict):
                return {k: each(v) for k, v in value.items()}
            return value
        return replace(self, **{f.name: each(getattr(self, f.name))
                                for f in dataclasses.fields(self)
                                if isinstance(getattr(self, f.name), (torch.Tensor, dict))})

    def to(self, device: torch.device | str, non_blocking: bool = True) -> "CARLABatch":
        """A copy with every tensor (those in `measurements` and `fields` too) on `device`."""
        return self._map(lambda t: t.to(device, non_blocking=non_blocking))

    def pin_memory(self) -> "CARLABatch":
        """A copy with every tensor in pinned host memory, for faster copies to the GPU
        (`DataLoader(pin_memory=True)` calls this on custom batch types)."""
        return self._map(lambda t: t.pin_memory())

    def normalized_images(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """ImageNet-normalised float images on this batch's device (the GPU in training)."""
        mean = torch.tensor(IMAGENET_MEAN, device=self.images.device, dtype=dtype).view(3, 1, 1)
        std = torch.tensor(IMAGENET_STD, device=self.images.device, dtype=dtype).view(3, 1, 1)
        return (self.images.to(dtype) / 255.0 - mean) / std


def empty_sample(n_cameras: int, image_size: tuple[int, int], pred_len: int) -> CARLASample:
    """A zero padding sample with valid=False (eval padding, skipped-sample fill)."""
    h, w = image_size
    z2 = np.zeros((pred_len, 2), np.float32)
    return CARLASample("", np.zeros((n_cameras, h, w, 3), np.uint8).transpose(0, 3, 1, 2), 0.0,
                       np.zeros(2, np.float32), np.zeros(6, np.float32), z2, z2.copy(),
                       valid=False)


# shape -> a uint8 block of that shape for one batch's HWC images; whoever builds a
# pipeline chooses where its batches live (ring.BatchRing.alloc in ring workers)
Alloc = Callable[[tuple[int, ...]], torch.Tensor]


def private_block(shape: tuple[int, ...]) -> torch.Tensor:
    """Memory for a batch used in the process that decodes it (num_workers=0, collate).

    numpy asks for transparent huge pages on large arrays: faulting in a batch costs a third
    of what torch.empty's 4 KB pages cost (docs/benchmarks.md)."""
    return torch.from_numpy(np.empty(shape, np.uint8))


class ReusedBlock:
    """An Alloc that hands out one private block again for every batch of its shape: for a
    sample_transform's batches, whose images the transform reads and collate copies before
    the next batch is decoded (transform.py keeps no view of them), so a fresh block's page
    faults (82 MB a batch for Bench2Drive's three cameras at 8) are paid once per worker."""

    def __init__(self) -> None:
        self._block: torch.Tensor | None = None
        self._stacks: dict[str, np.ndarray] = {}

    def __call__(self, shape: tuple[int, ...]) -> torch.Tensor:
        if self._block is None or tuple(self._block.shape) != tuple(shape):
            self._block = private_block(shape)
        return self._block

    def stack(self, name: str, arrays: list[np.ndarray]) -> np.ndarray:
        """np.stack(arrays) for the field `name`, into its block of the last batch when the
        shape and dtype match (fields.collate_fields' `stack`): TransFuser 2022's 15 BEV
        planes are 30 MB a batch of 8."""
        want = (len(arrays), *np.shape(arrays[0]))
        dtype = np.result_type(*arrays)
        buf = self._stacks.get(name)
        if buf is None or buf.shape != want or buf.dtype != dtype:
            buf = self._stacks[name] = np.empty(want, dtype)
        return np.stack(arrays, out=buf)


def shared_block(shape: tuple[int, ...]) -> torch.Tensor:
    """Memory for a batch a DataLoader worker sends without a ring: in shared memory up
    front, so the DataLoader hands it over as is instead of copying it there once more."""
    return torch.empty(shape, dtype=torch.uint8).share_memory_()


class BatchBuffer:
    """One batch being filled in place: HWC camera slots and label arrays, then a CARLABatch.

    Cameras are decoded straight into `hwc[i]`, so a batch's 50 MB of images are written once,
    into the block `alloc` gives.
    """

    def __init__(self, size: int, n_cameras: int, image_size: tuple[int, int],
                 pred_len: int, alloc: Alloc = private_block,
                 row_fields: tuple[str, ...] = ()) -> None:
        self.images = alloc((size, n_cameras, *image_size, 3))
        self.stack = getattr(alloc, "stack", None)   # reused field memory (ReusedBlock)
        self.hwc = self.images.numpy()
        self.labels = {"speed": np.zeros(size, np.float32),
                       "target_point": np.zeros((size, 2), np.float32),
                       "target_command": np.zeros((size, 6), np.float32),
                       "waypoints": np.zeros((size, pred_len, 2), np.float32),
                       "waypoints_diff": np.zeros((size, pred_len, 2), np.float32)}
        self.keys, self.valid, self.errors = [""] * size, np.zeros(size, bool), []
        self.fields: list[dict | None] = [None] * size   # selected extra fields per slot
        self.row_fields = row_fields   # those padded with a <name>_len (fields.row_fields)

    def set(self, i: int, key: str, labels: dict) -> None:
        """Slot i holds a real sample whose images are already in hwc[i]."""
        for name, arr in self.labels.items():
            arr[i] = labels[name]
        self.fields[i] = labels.get("fields")
        self.keys[i], self.valid[i] = key, True

    def put(self, i: int, done: tuple[str, dict] | str | None) -> None:
        """Record slot i's outcome: (key, labels) of a decoded sample, or padding (None) or
        a skipped sample (its error message)."""
        if isinstance(done, tuple):
            self.set(i, *done)
        else:
            self.pad(i, done)

    def pad(self, i: int, error: str | None = None) -> None:
        """Slot i is padding (the end of an eval pass) or a skipped sample (with its error)."""
        self.hwc[i] = 0
        if error is not None:
            self.errors.append(error)

    def batch(self) -> CARLABatch:
        t = {name: torch.from_numpy(arr) for name, arr in self.labels.items()}
        return CARLABatch(images=self.images.permute(0, 1, 4, 2, 3), speed=t["speed"],
                          target_point=t["target_point"], command=t["target_command"],
                          waypoints=t["waypoints"], waypoints_diff=t["waypoints_diff"],
                          keys=self.keys, valid=torch.from_numpy(self.valid),
                          errors=self.errors, **self._fields())

    def _fields(self) -> dict:
        """The selected extra fields, batched (load/decode/fields.py), as CARLABatch keywords."""
        real = next((f for f in self.fields if f is not None), None)
        if real is None:
            return {}
        from .fields import collate_fields
        batched = {k: _tensors(v) for k, v in collate_fields(
            self.fields, tuple(real), self.row_fields, self.stack).items()}
        # by the modality table (load/decode/places.py): an attribute of that name, else `fields`
        attrs = set(attribute_names()) & _ATTRIBUTES
        named = {k: batched.pop(k) for k in list(batched) if k in attrs}
        if "measurements" in named and "route" in named["measurements"]:
            named["route"] = named["measurements"]["route"]
        return {**named, "fields": batched}


# CARLABatch's attributes, and those of selected fields (a batch of padding only has none)
_ATTRIBUTES = frozenset(f.name for f in dataclasses.fields(CARLABatch))


def _field_attrs() -> tuple[str, ...]:
    """The attributes selected fields fill (the table's, and the one mapping)."""
    return (*(a for a in attribute_names() if a in _ATTRIBUTES), "fields")


def field_layout(batch: CARLABatch) -> dict[str, object] | None:
    """The selected fields' per-sample shapes and dtypes of a batch that has them (None when
    it has none): what an all-padding batch needs to look like the others."""
    def layout(value):
        if isinstance(value, torch.Tensor):
            return tuple(value.shape[1:]), value.dtype
        if isinstance(value, dict):
            return {k: layout(v) for k, v in value.items()}
        return None   # raw JSON lists: None per padding sample
    out = {a: layout(getattr(batch, a)) for a in _field_attrs() if _has(batch, a)}
    return out or None


def _has(batch: CARLABatch, attr: str) -> bool:
    """Whether the batch holds that selected-field attribute (`fields`: not empty)."""
    value = getattr(batch, attr)
    return value is not None and (attr != "fields" or bool(value))


def with_padding_fields(batch: CARLABatch, layout: dict[str, object] | None) -> CARLABatch:
    """An all-padding batch (eval's tail, or every sample skipped) decodes no field, so it has
    none; give it zero fields shaped like the pass's others, so that every batch of a rank has
    the same attributes (a rank must not crash, or stall DDP, on `batch.lidar`). Variable
    dimensions (lidar points, boxes) get 0 rows: their `*_len` counts are 0."""
    if layout is None or bool(batch.valid.any()) or any(_has(batch, a) for a in _field_attrs()):
        return batch
    n = len(batch)

    def zeros(name: str, spec):
        if isinstance(spec, dict):
            return {k: zeros(k, v) for k, v in spec.items()}
        if spec is None:
            return [None] * n
        shape, dtype = spec
        if f"{name}_len" in layout:   # padded to the batch's longest: none here
            shape = (0, *shape[1:])
        return torch.zeros((n, *shape), dtype=dtype)
    filled = {a: zeros(a, spec) for a, spec in layout.items()}
    if "measurements" in filled and "route" in filled["measurements"]:
        filled["route"] = filled["measurements"]["route"]
    return replace(batch, **filled)


def _tensors(value):
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value)
    if isinstance(value, dict):
        return {k: _tensors(v) for k, v in value.items()}
    return value


def collate(samples: list[CARLASample], errors: list[str] | None = None) -> CARLABatch:
    """Stack CARLASamples (from a pipeline of your own) into a batch; padding samples
    (valid=False) keep their zeros.

    The images keep HWC memory (a permuted view), so `flatten(0, 1)` of the batch is already
    channels_last for the encoder; call `.contiguous()` where NCHW memory is needed.
    """
    first = samples[0]
    out = BatchBuffer(len(samples), first.images.shape[0], first.images.shape[2:],
                      first.waypoints.shape[0])
    for i, s in enumerate(samples):
        out.hwc[i] = s.images.transpose(0, 2, 3, 1)
        if s.valid:
            out.set(i, s.key, {"speed": s.speed, "target_point": s.target_point,
                               "target_command": s.command, "waypoints": s.waypoints,
                               "waypoints_diff": s.waypoints_diff})
    out.errors = list(errors or [])
    return out.batch()
