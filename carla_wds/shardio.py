"""Reading shards: opening local, http(s):// and pipe: URLs (optionally cached and checked),
and the first pipeline stage, which cuts planned segments out of them."""
from __future__ import annotations

import hashlib
import io
import logging
import os
from typing import Any, Iterable, Iterator

import webdataset as wds
from webdataset.tariterators import group_by_keys, tar_file_iterator

log = logging.getLogger(__name__)
Raw = dict[str, Any]


class ShardError(RuntimeError):
    """A shard that cannot be read as the manifest describes; names the shard and sample."""


def error_marker(msg: str) -> Raw:
    """Stands for one sample that could not be used (on_error="skip"); becomes valid=False."""
    return {"__error__": msg}


def _cache_name(url: str) -> str:
    # webdataset's default keeps only the basename: two servers' shard-000000.tar would collide.
    return f"{hashlib.sha1(url.encode()).hexdigest()[:12]}-{os.path.basename(url)}"


def open_shard(url: str, cache_dir: str | None, sha256: str | None) -> io.BufferedIOBase:
    """A readable stream for a shard: local path, http(s)://, or pipe:, optionally cached."""
    cached = None
    if cache_dir is not None and "://" in url:
        from webdataset.cache import FileCache
        os.makedirs(cache_dir, exist_ok=True)
        cached = FileCache(cache_dir, url_to_name=_cache_name).get_file(url)
        stream = open(cached, "rb")
    else:
        stream = wds.gopen(url, "rb")
    if sha256 is None:
        return stream
    data = stream.read()
    stream.close()
    found = hashlib.sha256(data).hexdigest()
    if found != sha256:
        if cached:
            os.remove(cached)   # so the next attempt downloads it again
        raise ShardError(f"shard {url}: sha256 {found} differs from the manifest's {sha256}; "
                         "the file is corrupt or was changed. Fix: re-download or re-pack it")
    return io.BytesIO(data)


# stage: segments [(shard, start, stop)] -> raw samples (dicts of member bytes), or error markers
def read_segments(segments: Iterable[tuple[int, int, int]], urls: list[str],
                  on_error: str = "raise", cache_dir: str | None = None,
                  checksums: list[str] | None = None) -> Iterator[Raw]:
    for shard, start, stop in segments:
        url, last_key, seen, given = urls[shard], None, 0, 0
        try:
            stream = open_shard(url, cache_dir, checksums[shard] if checksums else None)
            try:
                members = ({**m, "__url__": url} for m in tar_file_iterator(stream))
                for sample in group_by_keys(members):
                    if seen >= stop:
                        break
                    seen += 1
                    last_key = sample["__key__"]
                    if seen > start:
                        sample["__shard__"] = url
                        given += 1
                        yield sample
                if seen < stop:
                    raise ShardError(f"ended after {seen} samples, the manifest promises at "
                                     f"least {stop}")
            finally:
                stream.close()
        except Exception as exc:  # noqa: BLE001 - tarfile and gopen raise many types
            msg = (f"shard {url}: cannot read past sample {last_key!r} ({exc}). Fix: verify the "
                   "shards with `carla-wds verify` and re-pack or re-download this shard")
            if on_error == "raise":
                raise ShardError(msg) from None
            log.warning("skipping the rest of a shard: %s", msg)
            for _ in range(stop - start - given):   # one marker per lost sample: exact stats
                yield error_marker(msg)


