"""The shard reader's pipeline stages: cut planned segments out of shards (opened by
shardread), and give back the mapped pages of samples once they are decoded. The reader maps
them, so the reader releases them; the decode stage knows nothing of pages."""
from __future__ import annotations

import logging
import mmap
from typing import Any, Iterable, Iterator

import numpy as np

from ...cachecheck import DiskFullError
from ...remote import RemoteError, RemoteOptions
from ...shardread import ShardRef, open_shard, samples_of
from ...tario import ShardError

log = logging.getLogger(__name__)
Raw = dict[str, Any]


def error_marker(msg: str) -> Raw:
    """Stands for one sample that could not be used (on_error="skip"); becomes valid=False."""
    return {"__error__": msg}


_PAGE = mmap.PAGESIZE


def release_pages(raw: Raw) -> None:
    """Unmap the pages of a decoded sample's memory-mapped members (MappedShard).

    A window stays mapped while any sample read from it waits in the shuffle buffer, and the
    pages decoding touched would count in the worker's RSS until then (about four times the
    buffer's bytes). MADV_DONTNEED drops them from this process only: the page cache and the
    file keep the data, and a view used again faults it back in unchanged.
    """
    if not hasattr(mmap, "MADV_DONTNEED"):   # Windows: no madvise
        return
    for value in raw.values():
        if isinstance(value, memoryview) and isinstance(value.obj, mmap.mmap):
            window = value.obj
            offset = (np.frombuffer(value, np.uint8).ctypes.data
                      - np.frombuffer(window, np.uint8).ctypes.data)
            start = -(-offset // _PAGE) * _PAGE
            end = (offset + value.nbytes) // _PAGE * _PAGE
            if end > start:
                window.madvise(mmap.MADV_DONTNEED, start, end - start)


# stage: groups of raw samples -> the same groups; each group's mapped pages are released when
# the next group is asked for, which the stage after (stages.decode_batches) does only once it
# has decoded the group: a worker's RSS holds one batch's members, not the shuffle buffer's
def released(groups: Iterable[list[Raw | None]]) -> Iterator[list[Raw | None]]:
    for group in groups:
        yield group
        for raw in group:
            if raw is not None:
                release_pages(raw)


# stage: segments [(shard, start, stop)] -> raw samples (dicts of member bytes), or error markers
def read_segments(segments: Iterable[tuple[int, int, int]], shards: list[ShardRef],
                  on_error: str = "raise", cache_dir: str | None = None,
                  verify: bool = False, remote: RemoteOptions | None = None,
                  cache_limit_bytes: int | None = None) -> Iterator[Raw]:
    cache = (cache_dir, cache_limit_bytes)
    for shard, start, stop in segments:
        ref, state = shards[shard], {"last": None, "given": 0}
        try:
            yield from _segment(ref, start, stop, cache, verify, remote, state)
        except DiskFullError:   # the machine's disk, not the shard: never skipped as bad
            raise
        except (ShardError, RemoteError) as exc:   # these name the shard and the fix
            msg = f"{exc} (read up to sample {state['last']!r}; `carla-wds verify` checks a pack)"
        except Exception as exc:  # noqa: BLE001 - tar, HTTP and OS errors alike
            msg = (f"shard {ref.url}: cannot read past sample {state['last']!r} ({exc}). Fix: "
                   "check the shards with `carla-wds verify` and re-pack or re-download this "
                   "shard")
        else:
            continue
        if state["given"]:   # a stream: what came before the failure was used
            msg += (f"; {state['given']} of its samples were used before it failed (cache_dir "
                    "or verify=True check a remote shard before any sample is used)")
        if on_error == "raise":
            raise ShardError(msg) from None
        log.warning("skipping the rest of a shard: %s", msg)
        for _ in range(stop - start - state["given"]):   # one marker per lost sample
            yield error_marker(msg)


def _segment(ref: ShardRef, start: int, stop: int, cache: tuple[str | None, int | None],
             verify: bool, remote: RemoteOptions | None, state: dict) -> Iterator[Raw]:
    """Samples start..stop-1 of one shard. A segment that ends where the shard should end
    reads one header further: a shard with more samples than the manifest says is an error
    (they would be dropped without a word), and a stream is then read to its end and checked.
    The stream is closed however the segment ends (its end, an error, or the consumer's
    close()), which gives a cached shard back to the cache's eviction.

    Such a segment holds its last sample back until that check passed: a stream's samples
    reach the model before its sha256 can fail (a shard replaced on the store after its
    manifest), and this way the failure is at least one skipped sample whose error names the
    shard, not a silence. (cache_dir or verify=True check a shard before any sample is used.)"""
    cache_dir, cache_limit_bytes = cache
    stream = open_shard(ref.url, cache_dir, ref.sha256, ref.bytes, verify, remote,
                        cache_limit_bytes=cache_limit_bytes)
    seen, held = 0, None
    try:
        for sample in samples_of(stream, ref):   # closed at a break: no end check then
            if seen >= stop:
                if stop == ref.samples:
                    raise ShardError(f"shard {ref.url}: holds more than the {ref.samples} "
                                     "samples the manifest declares (the manifest is wrong or "
                                     "was edited). Fix: re-pack, or restore its manifest")
                break
            seen += 1
            state["last"] = sample["__key__"]
            if seen > start:
                sample["__shard__"] = ref.url
                if seen == stop == ref.samples:
                    held = sample   # given once the stream's end checks passed
                    continue
                state["given"] += 1
                yield sample
        if seen < stop:
            raise ShardError(f"shard {ref.url}: ended after {seen} samples, the manifest "
                             f"promises {stop}. Fix: re-download or re-pack it")
    finally:
        stream.close()
    if held is not None:
        state["given"] += 1
        yield held


# stage: reads [(shard, lo, start, stop)] -> raw samples lo..stop-1 of each, those before
# `start` marked "__context__" (history windows look back at them; they are never served);
# a context sample that cannot be read is left out, and its window steps are then invalid
def read_with_context(reads: Iterable[tuple[int, int, int, int]], shards: list[ShardRef],
                      on_error: str = "raise", cache_dir: str | None = None,
                      verify: bool = False, remote: RemoteOptions | None = None,
                      cache_limit_bytes: int | None = None) -> Iterator[Raw]:
    for shard, lo, start, stop in reads:
        samples = read_segments([(shard, lo, stop)], shards, on_error, cache_dir, verify,
                                remote, cache_limit_bytes)
        for pos, raw in enumerate(samples, lo):
            if pos >= start:
                yield raw
            elif "__error__" not in raw:
                raw["__context__"] = True
                yield raw
