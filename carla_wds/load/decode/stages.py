"""The loader's pipeline: small generator stages in webdataset's style.

Each stage takes an iterator and yields the next shape of data; they run inside one DataLoader
worker, on plain lists in tests. Everything before `decode_samples` handles encoded bytes only,
so shuffling and resume-skipping never decode an image.
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Iterable, Iterator

import cv2
import numpy as np

from ... import limits
from ...codecs import ImageCodec, ImageHeaderError, codec_named
from ...rng import draw_key
from ...schema import SampleSpec, SchemaError, check_members, check_recorded_sizes
from .augment import augment_cameras
from .batch import Alloc, BatchBuffer, CARLABatch, CARLASample, private_block
from .fields import FieldOptions, sample_fields
from .jpeg import decode_reduced

log = logging.getLogger(__name__)
Raw = dict[str, Any]
Sizes = "tuple[tuple[int, int] | None, ...] | None"   # per camera (H, W) as packed

# cv2's thread pool does not survive fork(): a DataLoader worker forked from a process whose pool
# is running deadlocks in its first parallel cv2 call. Decoding parallelises across workers, so
# cv2 runs sequentially in every process that imports the loader.
cv2.setNumThreads(0)


# stage: raw samples -> the same samples in a buffered random order (deterministic per rng)
def shuffle(samples: Iterable[Raw], bufsize: int, rng: np.random.Generator) -> Iterator[Raw]:
    if bufsize <= 1:
        yield from samples
        return
    buf: list[Raw] = []
    for sample in samples:
        buf.append(sample)
        if len(buf) >= bufsize:
            k = int(rng.integers(len(buf)))
            buf[k], buf[-1] = buf[-1], buf[k]
            yield buf.pop()
    while buf:
        k = int(rng.integers(len(buf)))
        buf[k], buf[-1] = buf[-1], buf[k]
        yield buf.pop()


# stage: samples -> the samples after the first n (resume; nothing decoded)
def skip(samples: Iterable[Raw], n: int) -> Iterator[Raw]:
    it = iter(samples)
    for _ in range(n):
        if next(it, None) is None:
            return
    yield from it


# stage: samples -> at most n samples
def take(samples: Iterable[Any], n: int) -> Iterator[Any]:
    for i, sample in enumerate(samples):
        if i >= n:
            return
        yield sample


def decode_image(data: bytes, image_size: tuple[int, int], fmt: str | ImageCodec,
                 out: np.ndarray | None = None, packed: tuple[int, int] | None = None,
                 reduced: bool = False) -> np.ndarray:
    """Encoded bytes -> uint8 HWC RGB at image_size (H, W); never through float.

    `fmt`: the member's image codec, or its registered name. With `out` (a contiguous
    (H, W, 3) uint8 slot), the resize writes straight into it. The header's size must be
    `packed` (the manifest's record) before a decoder allocates memory. `reduced`: a JPEG is
    decoded at a reduced DCT scale when image_size allows (load/decode/jpeg.py), then resized.
    """
    codec = codec_named(fmt) if isinstance(fmt, str) else fmt
    try:
        source = codec.check_size(data, packed, limits.active().image_pixels)
    except ImageHeaderError as exc:
        raise SchemaError(f"image refused before decoding: {exc}") from None
    img = decode_reduced(data, source, image_size) if reduced and codec.name == "jpg" else None
    if img is None:   # a raw member's pixels are a view of `data` (no decode, no copy)
        img = codec.pixels(data) if out is not None else codec.decode(data)
    h, w = image_size
    if img.shape[:2] != (h, w):
        return cv2.resize(img, (w, h), dst=out, interpolation=cv2.INTER_LINEAR)
    if out is not None:
        np.copyto(out, img)
        return out
    return img


def _decode_into(raw: Raw, spec: SampleSpec, image_size: tuple[int, int], hwc: np.ndarray,
                 augment: Callable[[str, list[np.ndarray]], list[np.ndarray]] | None,
                 sizes: Sizes = None, field_opts: FieldOptions | None = None) -> dict[str, Any]:
    """Decode one raw sample's cameras into `hwc` (n, H, W, 3) and return its labels (with
    the selected extra fields under "fields")."""
    where = f"shard {raw.get('__shard__')} sample {raw.get('__key__')!r}"
    check_members(spec, raw, where)
    if field_opts is not None and field_opts.extra_sizes:
        check_recorded_sizes(raw, dict(field_opts.extra_sizes), where)
    raw, labels = sample_fields(raw, spec, image_size, field_opts or FieldOptions(), where,
                                sizes)
    reduced = not (field_opts is not None and field_opts.exact_resize)
    try:
        for i, member in enumerate(spec.image_members):
            decode_image(raw[member], image_size, spec.codec(member), out=hwc[i],
                         packed=sizes[i] if sizes else None, reduced=reduced)
    except SchemaError as exc:
        raise SchemaError(f"{where}: {member}: {exc}") from None
    if augment is not None:
        for i, img in enumerate(augment(draw_key(raw), list(hwc))):
            hwc[i] = img
    return labels


def decode_sample(raw: Raw, spec: SampleSpec, image_size: tuple[int, int],
                  augment: Callable[[str, list[np.ndarray]], list[np.ndarray]] | None = None,
                  sizes: Sizes = None) -> CARLASample:
    """One raw sample -> CARLASample, for pipelines of your own (the loader decodes batches).
    `sizes`: each camera's packed (H, W), from Manifest.sizes_of."""
    hwc = np.empty((len(spec.image_members), *image_size, 3), np.uint8)
    labels = _decode_into(raw, spec, image_size, hwc, augment, sizes)
    return CARLASample(raw["__key__"], hwc.transpose(0, 3, 1, 2), labels["speed"],
                       labels["target_point"], labels["target_command"], labels["waypoints"],
                       labels["waypoints_diff"], labels["meta"])


# stage: raw samples -> exactly n_batches lists of batch_size raw samples (None pads the end)
def group(samples: Iterable[Raw], batch_size: int, n_batches: int) -> Iterator[list[Raw | None]]:
    it = iter(samples)
    for _ in range(n_batches):
        yield [next(it, None) for _ in range(batch_size)]


# stage: lists of raw samples -> CARLABatch, each camera decoded straight into the batch's
# memory (no stacking copy; only sample 0 passes through one reused buffer); None, error
# markers and samples that fail (on_error="skip") become zero padding with valid=False;
# each batch's images live in the block `alloc` gives (batch.py); a group is done with once
# the next one is asked for (shardio.released relies on it)
def decode_batches(groups: Iterable[list[Raw | None]], spec: SampleSpec,
                   image_size: tuple[int, int], on_error: str = "raise",
                   augment_at: Callable[[int], Any] | None = None,
                   first_position: int = 0, alloc: Alloc = private_block,
                   sizes: Sizes = None, field_opts: FieldOptions | None = None
                   ) -> Iterator[CARLABatch]:
    pos, first = first_position, np.empty((len(spec.cameras), *image_size, 3), np.uint8)
    for raws in groups:
        # Sample 0 is decoded into `first`, and the batch's image block taken (alloc) only
        # after it: by then the main process has dropped the batch before, so ring workers
        # cycle through warm slots instead of faulting in a fresh 50 MB one (ring.py).
        done = _decode_row(raws[0], first, spec, image_size, on_error, augment_at, pos, sizes,
                           field_opts)
        out = BatchBuffer(len(raws), len(spec.cameras), image_size, spec.pred_len, alloc,
                          field_opts.row_fields if field_opts else ())
        out.hwc[0] = first
        out.put(0, done)
        for i, raw in enumerate(raws[1:], 1):
            out.put(i, _decode_row(raw, out.hwc[i], spec, image_size, on_error, augment_at,
                                   pos + i, sizes, field_opts))
        pos += len(raws)
        yield out.batch()


def _decode_row(raw: Raw | None, row: np.ndarray, spec: SampleSpec,
                image_size: tuple[int, int], on_error: str,
                augment_at: Callable[[int], Any] | None, pos: int, sizes: Sizes = None,
                field_opts: FieldOptions | None = None) -> tuple[str, dict] | str | None:
    """One grouped sample's cameras into `row`: (key, labels), or why it was skipped (str),
    or None for padding (see BatchBuffer.put)."""
    if raw is None or "__error__" in raw:
        return raw["__error__"] if raw else None
    try:
        return raw["__key__"], _decode_into(raw, spec, image_size, row,
                                            augment_at(pos) if augment_at else None, sizes,
                                            field_opts)
    except (SchemaError, ValueError, KeyError) as exc:
        if on_error == "raise":
            raise
        log.warning("skipping sample: %s", exc)
        return str(exc)


def augmenter(seed: int, epoch: int, per_camera: bool,
              iteration_of: Callable[[int], int]) -> Callable[[int], Callable]:
    """position -> (key, images) -> augmented images, with the ramp of that position's step."""
    def at(pos: int):
        it = iteration_of(pos)
        return lambda key, images: augment_cameras(images, seed=seed, epoch=epoch, key=key,
                                                   iteration=it, per_camera=per_camera)
    return at
