"""The loader's pipeline: small generator stages in webdataset's style.

Each stage takes an iterator and yields the next shape of data; they run inside one DataLoader
worker, on plain lists in tests. Everything before `decode_samples` handles encoded bytes only,
so shuffling and resume-skipping never decode an image.
"""
from __future__ import annotations

import hashlib
import io
import os
import logging
from typing import Any, Callable, Iterable, Iterator

import cv2
import numpy as np
import webdataset as wds
from webdataset.tariterators import group_by_keys, tar_file_iterator

from .augment import augment_cameras
from .batch import CARLABatch, CARLASample, collate, empty_sample
from .schema import SampleSpec, SchemaError, check_members, decode_labels

log = logging.getLogger(__name__)
Raw = dict[str, Any]

# cv2's thread pool does not survive fork(): a DataLoader worker forked from a process whose pool
# is running deadlocks in its first parallel cv2 call. Decoding parallelises across workers, so
# cv2 runs sequentially in every process that imports the loader.
cv2.setNumThreads(0)

try:  # pyspng decodes PNG faster than cv2 here; optional ([fast] extra)
    import pyspng
except ImportError:  # pragma: no cover - depends on the environment
    pyspng = None


class ShardError(RuntimeError):
    """A shard that cannot be read as the manifest describes; names the shard and sample."""


def _error(msg: str) -> Raw:
    return {"__error__": msg}


def _cache_name(url: str) -> str:
    # webdataset's default keeps only the basename: two servers' shard-000000.tar would collide.
    return f"{hashlib.sha1(url.encode()).hexdigest()[:12]}-{os.path.basename(url)}"


def open_shard(url: str, cache_dir: str | None, sha256: str | None) -> io.BufferedIOBase:
    """A readable stream for a shard: local path, http(s)://, or pipe:, optionally cached."""
    if cache_dir is not None and "://" in url:
        from webdataset.cache import FileCache
        os.makedirs(cache_dir, exist_ok=True)
        stream = open(FileCache(cache_dir, url_to_name=_cache_name).get_file(url), "rb")
    else:
        stream = wds.gopen(url, "rb")
    if sha256 is None:
        return stream
    data = stream.read()
    stream.close()
    found = hashlib.sha256(data).hexdigest()
    if found != sha256:
        raise ShardError(f"shard {url}: sha256 {found} differs from the manifest's {sha256}; "
                         "the file is corrupt or was changed. Fix: re-download or re-pack it")
    return io.BytesIO(data)


# stage: segments [(shard, start, stop)] -> raw samples (dicts of member bytes), or error markers
def read_segments(segments: Iterable[tuple[int, int, int]], urls: list[str],
                  on_error: str = "raise", cache_dir: str | None = None,
                  checksums: list[str] | None = None) -> Iterator[Raw]:
    for shard, start, stop in segments:
        url, last_key, index = urls[shard], None, 0
        try:
            stream = open_shard(url, cache_dir, checksums[shard] if checksums else None)
            try:
                members = ({**m, "__url__": url} for m in tar_file_iterator(stream))
                for index, sample in enumerate(group_by_keys(members)):
                    if index >= stop:
                        break
                    last_key = sample["__key__"]
                    if index >= start:
                        sample["__shard__"] = url
                        yield sample
                else:
                    if index + 1 < stop:
                        raise ShardError(f"ended after {index + 1} samples, the manifest "
                                         f"promises at least {stop}")
            finally:
                stream.close()
        except Exception as exc:  # noqa: BLE001 - tarfile and gopen raise many types
            msg = (f"shard {url}: cannot read past sample {last_key!r} ({exc}). Fix: verify the "
                   "shards with `carla-wds verify` and re-pack or re-download this shard")
            if on_error == "raise":
                raise ShardError(msg) from None
            log.warning("skipping the rest of a shard: %s", msg)
            yield _error(msg)


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


def decode_image(data: bytes, image_size: tuple[int, int], fmt: str,
                 out: np.ndarray | None = None) -> np.ndarray:
    """Encoded bytes -> uint8 HWC RGB at image_size (H, W); never through float.

    With `out` (a contiguous (H, W, 3) uint8 slot), the resize writes straight into it.
    """
    img = None
    if fmt == "png" and pyspng is not None:
        try:
            img = pyspng.load(data)
        except Exception:  # noqa: BLE001 - pyspng raises plain Exception on bad data
            img = None
        if img is not None and (img.ndim != 3 or img.shape[2] != 3):
            img = None   # gray or RGBA: let cv2 normalise channels
    if img is None:
        bgr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
        if bgr is None:
            raise SchemaError("image bytes do not decode")
        img = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
    h, w = image_size
    if img.shape[:2] != (h, w):
        return cv2.resize(img, (w, h), dst=out, interpolation=cv2.INTER_LINEAR)
    if out is not None:
        np.copyto(out, img)
        return out
    return img


def decode_sample(raw: Raw, spec: SampleSpec, image_size: tuple[int, int],
                  augment: Callable[[str, list[np.ndarray]], list[np.ndarray]] | None = None
                  ) -> CARLASample:
    where = f"shard {raw.get('__shard__')} sample {raw.get('__key__')!r}"
    check_members(spec, raw, where)
    labels = decode_labels(spec, raw, where)
    # Cameras are decoded into one HWC block: no transpose copy here, and collate stacks
    # contiguous memory; the (n, 3, H, W) shape is a view (channels-last, as convs want it).
    hwc = np.empty((len(spec.image_members), *image_size, 3), np.uint8)
    try:
        for i, member in enumerate(spec.image_members):
            decode_image(raw[member], image_size, spec.image_format, out=hwc[i])
    except SchemaError as exc:
        raise SchemaError(f"{where}: {exc}") from None
    if augment is not None:
        for i, img in enumerate(augment(raw["__key__"], list(hwc))):
            hwc[i] = img
    return CARLASample(raw["__key__"], hwc.transpose(0, 3, 1, 2), labels["speed"],
                       labels["target_point"],
                       labels["target_command"], labels["waypoints"],
                       labels["waypoints_diff"], labels["meta"])


# stage: raw samples -> CARLASample, or error markers for samples that fail (on_error="skip")
def decode_samples(samples: Iterable[Raw], spec: SampleSpec, image_size: tuple[int, int],
                   on_error: str = "raise", augment_at: Callable[[int], Any] | None = None,
                   first_position: int = 0) -> Iterator[CARLASample | Raw]:
    for pos, raw in enumerate(samples, start=first_position):
        if "__error__" in raw:
            yield raw
            continue
        try:
            yield decode_sample(raw, spec, image_size, augment_at(pos) if augment_at else None)
        except (SchemaError, ValueError, KeyError) as exc:
            if on_error == "raise":
                raise
            log.warning("skipping sample: %s", exc)
            yield _error(str(exc))


# stage: samples -> exactly n_batches CARLABatch of batch_size, padded with valid=False
def batch_exact(samples: Iterable[CARLASample | Raw], batch_size: int, n_batches: int,
                pad: CARLASample) -> Iterator[CARLABatch]:
    it = iter(samples)
    for _ in range(n_batches):
        items, errors = [], []
        for _ in range(batch_size):
            item = next(it, None)
            if isinstance(item, dict):
                errors.append(item["__error__"])
                item = None
            items.append(pad if item is None else item)
        yield collate(items, errors)


def augmenter(seed: int, epoch: int, per_camera: bool,
              iteration_of: Callable[[int], int]) -> Callable[[int], Callable]:
    """position -> (key, images) -> augmented images, with the ramp of that position's step."""
    def at(pos: int):
        it = iteration_of(pos)
        return lambda key, images: augment_cameras(images, seed=seed, epoch=epoch, key=key,
                                                   iteration=it, per_camera=per_camera)
    return at


def padding(spec: SampleSpec, image_size: tuple[int, int]) -> CARLASample:
    return empty_sample(len(spec.cameras), image_size, spec.pred_len)
