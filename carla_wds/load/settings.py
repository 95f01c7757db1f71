"""What CARLAWebData checks and derives from its arguments before any worker starts: the
shard URLs, argument checks, the cache bound, the epoch's batch count (dataset.py)."""
from __future__ import annotations

from ..manifest import Manifest
from ..shardcache import check_limit
from ..shardread import ShardRef, is_remote
from .plan.epoch import batches_per_rank


def shard_urls(manifest: Manifest, given: list[str] | None) -> tuple[str, ...]:
    """Names from the manifest, held to its folder (manifest.NAME_RULE); or the caller's own
    list, which may use any scheme the caller chooses, pipe: included."""
    if given is None:
        return manifest.shard_urls()
    if len(given) != len(manifest.shards) or not all(isinstance(u, str) for u in given):
        raise ValueError(f"shard_urls: {len(given)} entries, but {manifest.where} lists "
                         f"{len(manifest.shards)} shards; give one URL per shard, in manifest "
                         "order")
    return tuple(given)


def check_args(mode: str, on_error: str, batch_size: int, num_workers: int,
                batches_per_epoch: int | None) -> None:
    if mode not in ("train", "eval"):
        raise ValueError(f"mode {mode!r}; expected 'train' or 'eval'")
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error {on_error!r}; expected 'raise' or 'skip'")
    if batch_size < 1 or num_workers < 0:
        raise ValueError(f"batch_size {batch_size} must be >= 1, num_workers {num_workers} >= 0")
    if batches_per_epoch is not None and mode != "train":
        raise ValueError("batches_per_epoch (sampling with replacement) is for mode='train'")


def cache_limit(limit: int | None, cache_dir: str | None, shards: tuple[ShardRef, ...]
                 ) -> int | None:
    """The cache's bound, checked before any worker starts: a shard larger than it could
    never be cached, which is a setting to fix, not a surprise mid-epoch."""
    limit = check_limit(limit)
    if limit is not None and cache_dir is None:
        raise ValueError(f"cache_limit_bytes {limit} bounds the shard cache, but cache_dir is "
                         "None. Fix: pass cache_dir= too, or leave cache_limit_bytes out")
    big = next((s for s in shards if limit is not None and is_remote(s.url)
                and (s.bytes or 0) > limit), None)
    if big is not None:
        raise ValueError(f"shard {big.url}: {big.bytes} bytes, more than cache_limit_bytes "
                         f"{limit}. Fix: raise cache_limit_bytes to at least a few shards "
                         "(one per reading worker and rank, and one more)")
    return limit


def batches(where: str, counts: tuple[int, ...], batch_size: int, world_size: int, mode: str,
             batches_per_epoch: int | None) -> int:
    """Batches per rank per epoch; none at all is an error naming the fix."""
    n = batches_per_rank(list(counts), batch_size, world_size, mode, batches_per_epoch)
    if n < 1:
        raise ValueError(
            f"{where}: {sum(counts)} samples give no full batch of {batch_size} on "
            f"each of {world_size} ranks. Fix: lower batch_size, use fewer ranks, or "
            "pack more data")
    return n


def extra_sizes(manifest: Manifest) -> tuple[tuple[str, tuple[int, int]], ...]:
    """The pack's recorded (H, W) of each extra image member (none in older packs)."""
    recorded = manifest.doc.get("extra_sizes") or {}
    return tuple(sorted((m, tuple(hw)) for m, hw in recorded.items() if hw))
