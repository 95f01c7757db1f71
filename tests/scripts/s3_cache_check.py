"""Processes that share one shard cache of s3:// shards, for tests/test_shardcache.py and
tests/load/test_dataset_s3_ddp.py. The S3 endpoint and credentials come from the AWS
environment (tests/s3server.env).

    s3_cache_check.py fill MANIFEST CACHE LIMIT OUT [--reverse] [--go FILE] [--block BYTES]
        every shard through the cache (LIMIT 0: unbounded), after FILE exists; OUT (JSON):
        shard name -> {sha256 of the bytes read, how: downloaded, reused or uncached}
    s3_cache_check.py hold MANIFEST CACHE LIMIT INDEX
        open shard INDEX through the cache, print "held", keep it open until stdin closes
    torchrun ... s3_cache_check.py ddp MANIFEST LOCAL CACHE LIMIT OUT
        each rank: train and eval batches over s3:// with the cache and over the local
        folder; OUT/rank<r>.json
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

from carla_wds import objstore, shardcache
from carla_wds.manifest import read_manifest
from carla_wds.shardcache import ShardCache, remote_reader
from carla_wds.shardread import open_shard


def _shards(manifest_url: str) -> list[tuple[str, str, int, str]]:
    """(name, url, bytes, sha256) of every shard in manifest order."""
    m = read_manifest(manifest_url)
    return [(os.path.basename(u), u, s.bytes, s.sha256) for u, s in zip(m.shard_urls(), m.shards)]


def fill(a: argparse.Namespace) -> None:
    if a.block:   # small ranged reads, each written at once: a fill's file grows as it goes
        objstore.BLOCK = shardcache.CHUNK = a.block
    shards = _shards(a.manifest)
    while a.go and not os.path.exists(a.go):   # every process starts its fills together
        time.sleep(0.01)
    cache, out = ShardCache(a.cache, a.limit or None), {}
    for name, url, size, sha256 in (reversed(shards) if a.reverse else shards):
        held = cache.open(url, size, sha256, None)
        if held is None:   # no room beside the shards in use: read as the loader would
            data, how = remote_reader(url, size, None).read(), "uncached"
        else:
            data, how = held.file.read(), "downloaded" if held.fresh else "reused"
            held.close()
        out[name] = {"sha256": hashlib.sha256(data).hexdigest(), "how": how}
    Path(a.out + ".part").write_text(json.dumps(out))
    os.replace(a.out + ".part", a.out)


def hold(a: argparse.Namespace) -> None:
    name, url, size, sha256 = _shards(a.manifest)[a.index]
    stream = open_shard(url, a.cache, sha256, size, cache_limit_bytes=a.limit or None)
    print("held", flush=True)
    sys.stdin.read()   # until the test closes the pipe
    stream.close()


def ddp(a: argparse.Namespace) -> None:
    import torch
    import torch.distributed as tdist

    from carla_wds import CARLAWebData
    tdist.init_process_group("gloo")
    rank, out = tdist.get_rank(), {}
    for name, source, cache in (("s3", a.manifest, a.cache), ("local", a.local, None)):
        kw = {"num_workers": 2, "image_size": (16, 24), "cache_dir": cache,
              "cache_limit_bytes": a.limit if cache else None}
        train = CARLAWebData(source, batch_size=3, seed=7, **kw)
        val = CARLAWebData(source, batch_size=4, mode="eval", **kw)
        tb, vb = list(train), list(val)
        out[name] = {"train": [b.keys for b in tb], "eval_batches": len(vb),
                     "eval_len": len(val), "train_len": len(train),
                     "eval": [k for b in vb for k, v in zip(b.keys, b.valid.tolist()) if v],
                     "images": hashlib.sha256(b"".join(
                         b.images.contiguous().numpy().tobytes() for b in tb + vb)).hexdigest(),
                     "waypoints": torch.cat([b.waypoints for b in tb + vb]).tolist()}
    tdist.barrier()
    Path(a.out, f"rank{rank}.json").write_text(json.dumps({"world": tdist.get_world_size(),
                                                           **out}))
    tdist.barrier()   # leave together (see carla_wds.dist.cleanup)
    tdist.destroy_process_group()


def main() -> None:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="mode", required=True)
    f = sub.add_parser("fill")
    h = sub.add_parser("hold")
    d = sub.add_parser("ddp")
    for s in (f, h, d):
        s.add_argument("manifest")
    d.add_argument("local")
    for s in (f, h, d):
        s.add_argument("cache")
        s.add_argument("limit", type=int)
    f.add_argument("out")
    f.add_argument("--reverse", action="store_true")
    f.add_argument("--go")
    f.add_argument("--block", type=int, default=0)
    h.add_argument("index", type=int)
    d.add_argument("out")
    a = p.parse_args()
    {"fill": fill, "hold": hold, "ddp": ddp}[a.mode](a)


if __name__ == "__main__":
    main()
