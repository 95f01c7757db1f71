#!/usr/bin/env python
"""Loader samples/s from a local S3 server against the same shards on local disk, side by side
in one run (docs/benchmarks.md has the figures).

The server is moto's ThreadedMotoServer on 127.0.0.1, run in this tool's own process
(whose main thread only waits for the cells, so the CPU time it uses is the server's). The
shards are uploaded once; then each cell is one eval epoch of `CARLAWebData` in a fresh
process, samples/s timed over the epoch and the open (the manifest's read) timed apart:

  local          the pack's folder on local disk (page cache warmed by an untimed epoch)
  local again    the local cell once more: its per-repeat ratio to local is pure noise
  s3             s3://.../manifest.json, no cache: every shard streamed in ranged GETs
  s3 cold cache  cache_dir emptied before each repeat: each shard downloaded, checked, cached
  s3 warm cache  a cache_dir filled beforehand by one epoch, then read as local files

at each --workers-list count, with cache_limit_bytes (twice the pack) where CARLAWebData has
it. The cells are interleaved, every other repeat in reverse (ABBA), so that this VM's drift
hits each case alike; medians are reported. The warm cache is judged against the noise: local
disk's spread across its repeats, and local again / local per repeat. Then the pieces of one
shard's fetch are timed alone (ranged GETs of objstore.BLOCK bytes to moto over plain HTTP and
through s3fs, sha256, the copy into the cache), and one epoch from local disk and one from
s3:// without cache are profiled (cProfile).

    .venv/bin/python tools/bench_s3.py --workdir /tmp/bench_s3 [--episodes 6 --frames 100
                                       --max-samples 80 --repeats 9 --workers-list 0,2]
"""
from __future__ import annotations

import argparse
import cProfile
import hashlib
import inspect
import json
import logging
import os
import resource
import shutil
import sys
import time
from pathlib import Path

import cells
from bench_s3_pieces import _copy, _http_blocks, _mid, _timed
from proc_stats import children_cpu, cpu_seconds, steal_seconds

BUCKET, PREFIX, BATCH = "bench", "pack", 16
# "local again" is the same cell as "local" a moment later: its ratio to local, repeat by
# repeat, is the noise of a pair of cells that do identical work
CASES = ("local", "local again", "s3", "s3 cold cache", "s3 warm cache")
CREDS = {"key": "testing", "secret": "testing"}


def make_data(work: Path, episodes: int, frames: int, max_samples: int,
              size: tuple[int, int] | None) -> Path:
    """The tcp layout (one 900x256 PNG camera, ~350 KB a frame), PNGs passed through."""
    from carla_wds.pack.packer import PackOptions, pack
    from carla_wds.pack.synth import synth_dataset
    raw, shards = work / "raw", work / "shards"
    if not raw.is_dir():
        synth_dataset(raw, "tcp", episodes=episodes, frames=frames, seed=0, image_size=size)
    if not (shards / "manifest.json").exists():
        pack(raw, shards, PackOptions(layout="tcp", max_samples=max_samples, overwrite=True,
                                      progress=False, fsync=False))
    return shards


def options(endpoint: str) -> dict:
    """s3fs storage_options that reach the server (dummy credentials: moto accepts any)."""
    return {**CREDS, "endpoint_url": endpoint, "client_kwargs": {"region_name": "us-east-1"}}


def client(endpoint: str):
    import boto3
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                        aws_access_key_id="testing", aws_secret_access_key="testing")


def start_server(shards: Path):
    """(server, endpoint, manifest URL): a fresh moto server holding every file of the pack."""
    from moto.server import ThreadedMotoServer
    logging.getLogger("werkzeug").setLevel(logging.ERROR)   # no line per request
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{server._server.server_port}"
    s3 = client(endpoint)
    s3.create_bucket(Bucket=BUCKET)
    for path in sorted(shards.iterdir()):
        s3.put_object(Bucket=BUCKET, Key=f"{PREFIX}/{path.name}", Body=path.read_bytes())
    return server, endpoint, f"s3://{BUCKET}/{PREFIX}/manifest.json"


def loader_kwargs(args: argparse.Namespace) -> dict:
    """CARLAWebData's object-store arguments for this cell (none for local disk)."""
    from carla_wds.load import CARLAWebData
    from carla_wds.remote import RemoteOptions
    if not args.source.startswith("s3://"):
        return {}
    kw = {"storage_options": options(args.endpoint), "remote": RemoteOptions()}
    if args.cache_dir:
        kw["cache_dir"] = args.cache_dir
        if "cache_limit_bytes" in inspect.signature(CARLAWebData.__init__).parameters:
            kw["cache_limit_bytes"] = args.cache_limit
    return kw


def child(args: argparse.Namespace) -> None:
    """One eval epoch; prints samples, the open's and the epoch's seconds, and the epoch's CPU
    seconds (this process and its workers). The libraries are imported before the clock
    starts, as in bench_loader.py (import time is not loader throughput); the open (manifest
    read, and for s3:// the first S3 session) is timed apart from the epoch."""
    from carla_wds.load import CARLAWebData
    if args.source.startswith("s3://"):
        import s3fs  # noqa: F401
    kw = loader_kwargs(args)
    size = tuple(int(v) for v in args.out_size.split("x"))   # HxW
    prof = cProfile.Profile() if args.profile_out else None
    t0 = time.perf_counter()
    data = CARLAWebData(args.source, batch_size=BATCH, num_workers=args.workers,
                        image_size=size, mode="eval", **kw)
    t1 = time.perf_counter()
    cpu0 = cpu_seconds(resource.RUSAGE_SELF) + children_cpu()
    if prof:
        prof.enable()
    n = sum(int(batch.valid.sum()) for batch in data)
    if prof:
        prof.disable()
        prof.dump_stats(args.profile_out)
    seconds = time.perf_counter() - t1
    cpu = cpu_seconds(resource.RUSAGE_SELF) + children_cpu() - cpu0
    if n != data.manifest.total_samples:
        raise SystemExit(f"{args.source}: {n} samples, the manifest has "
                         f"{data.manifest.total_samples}")
    print(json.dumps({"samples": n, "seconds": seconds, "open": t1 - t0, "cpu": cpu,
                      "limit": "cache_limit_bytes" in kw}))


def measure(args: argparse.Namespace, source: str, workers: int, cache: Path | None) -> dict:
    """One cell in a fresh process; `server_cpu` is what this process (the server) spent."""
    cmd = [sys.executable, __file__, "--child", "--workdir", args.workdir, "--source", source,
           "--workers", str(workers), "--endpoint", args.endpoint, "--out-size", args.out_size,
           "--cache-limit", str(args.cache_limit)]
    if cache is not None:
        cmd += ["--cache-dir", str(cache)]
    cpu0 = cpu_seconds(resource.RUSAGE_SELF)
    proc = cells.run(cmd)
    if proc.returncode:
        raise SystemExit(f"cell {source} workers={workers} cache={cache} failed:\n"
                         f"{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["server_cpu"] = cpu_seconds(resource.RUSAGE_SELF) - cpu0
    result["rate"] = result["samples"] / result["seconds"]
    return result


def run_cells(args: argparse.Namespace, shards: Path, url: str) -> dict[tuple, list[dict]]:
    """Every (case, workers) cell --repeats times, interleaved ABBA."""
    work = Path(args.workdir)
    cold, warm = work / "cache_cold", work / "cache_warm"
    shutil.rmtree(warm, ignore_errors=True)
    measure(args, url, 0, warm)   # fills the warm cache (untimed)
    measure(args, str(shards), 0, None)   # untimed: the local shards into the page cache
    workers_list = [int(w) for w in args.workers_list.split(",")]
    cells = [(case, w) for w in workers_list for case in CASES]
    runs: dict[tuple, list[dict]] = {}
    for r in range(args.repeats):
        for case, w in cells if r % 2 == 0 else cells[::-1]:
            cache = {"s3 cold cache": cold, "s3 warm cache": warm}.get(case)
            if case == "s3 cold cache":
                shutil.rmtree(cold, ignore_errors=True)
            source = str(shards) if case.startswith("local") else url
            runs.setdefault((case, w), []).append(measure(args, source, w, cache))
    return runs


def table(runs: dict[tuple, list[dict]], workers_list: list[int]) -> list[str]:
    rows = ["| case | workers | samples/s | per repeat | vs local disk | per repeat vs local | "
            "open ms | epoch CPU ms/sample | server CPU s |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for w in workers_list:
        local = runs[("local", w)]
        for case in CASES:
            rs = runs[(case, w)]
            rates = sorted(r["rate"] for r in rs)
            paired = _paired(runs, case, w)
            rows.append(f"| {case} | {w} | {_mid(rates):.1f} | {rates[0]:.1f}-{rates[-1]:.1f} | "
                        f"{_mid(rates) / _mid([r['rate'] for r in local]):.2f}x | "
                        f"{paired[0]:.2f}-{paired[-1]:.2f}x | "
                        f"{_mid([r['open'] for r in rs]) * 1e3:.0f} | "
                        f"{_mid([r['cpu'] / r['samples'] for r in rs]) * 1e3:.2f} | "
                        f"{_mid([r['server_cpu'] for r in rs]):.2f} |")
    return rows


def _paired(runs: dict[tuple, list[dict]], case: str, w: int) -> list[float]:
    """Sorted ratios of `case` to local disk, each within one repeat (cells close in time)."""
    return sorted(a["rate"] / b["rate"] for a, b in zip(runs[(case, w)], runs[("local", w)]))


def noise(runs: dict[tuple, list[dict]], workers_list: list[int]) -> list[str]:
    """Local disk's own spread, and whether the warm cache's ratio to local disk lies inside
    the spread of "local again" / local, repeat by repeat (identical work, so pure noise)."""
    rows = ["| workers | local disk min-max samples/s | spread (max-min)/median | "
            "local again / local, per repeat | warm cache / local, per repeat | "
            "warm / local, median | within noise |", "|---:|---:|---:|---:|---:|---:|---|"]
    for w in workers_list:
        local = sorted(r["rate"] for r in runs[("local", w)])
        same, warm = _paired(runs, "local again", w), _paired(runs, "s3 warm cache", w)
        inside = same[0] <= _mid(warm) <= same[-1]
        rows.append(f"| {w} | {local[0]:.1f}-{local[-1]:.1f} | "
                    f"{(local[-1] - local[0]) / _mid(local) * 100:.1f}% | "
                    f"{same[0]:.2f}-{same[-1]:.2f}x | {warm[0]:.2f}-{warm[-1]:.2f}x | "
                    f"{_mid(warm):.3f}x | {'yes' if inside else 'no'} |")
    return rows


def pieces(args: argparse.Namespace, shards: Path, runs: dict[tuple, list[dict]]) -> list[str]:
    """Per shard (the first): each piece of an object-store read, timed alone; and what the
    loader's epochs at 0 workers spend per shard of the same size."""
    import s3fs
    from carla_wds.objstore import BLOCK
    manifest = json.loads((shards / "manifest.json").read_text())
    name, size = manifest["shards"][0]["name"], manifest["shards"][0]["bytes"]
    total = sum(s["bytes"] for s in manifest["shards"])
    data = (shards / name).read_bytes()
    # as objstore.filesystem sets it up: one attempt per request, the default timeouts
    fs = s3fs.S3FileSystem(**options(args.endpoint), config_kwargs={
        "connect_timeout": 10, "read_timeout": 30, "retries": {"total_max_attempts": 1}})
    path = f"{BUCKET}/{PREFIX}/{name}"
    blocks = range(0, size, BLOCK)
    fs.cat_file(path, start=0, end=min(size, BLOCK))   # session and connection set up
    n = args.repeats
    dest = Path(args.workdir) / "copy.tar"
    signed = client(args.endpoint).generate_presigned_url(
        "get_object", Params={"Bucket": BUCKET, "Key": f"{PREFIX}/{name}"}, ExpiresIn=3600)
    timed = [
        ("moto: ranged GETs over plain HTTP (no S3 client)",
         _timed(lambda: _http_blocks(signed, size, BLOCK), n)),
        ("s3fs cat_file ranged GETs (botocore signing, aiohttp, moto)",
         _timed(lambda: [fs.cat_file(path, start=o, end=min(size, o + BLOCK)) for o in blocks],
                n)),
        ("sha256 of the shard", _timed(lambda: hashlib.sha256(data).hexdigest(), n)),
        ("copy into the cache (write + rename, page cache)", _timed(lambda: _copy(data, dest), n)),
    ]
    dest.unlink(missing_ok=True)
    for case in CASES:
        if (case, 0) in runs and case != "local again":
            epoch = _mid([r["seconds"] for r in runs[(case, 0)]])
            timed.append((f"loader epoch at 0 workers, {case}, scaled to one shard",
                          epoch * size / total))
    rows = [f"shard {name}: {size / 1e6:.1f} MB, {len(blocks)} ranged GETs of "
            f"{BLOCK >> 20} MB; median of {n}", "",
            "| piece | ms per shard | MB/s |", "|---|---:|---:|"]
    rows += [f"| {what} | {s * 1e3:.2f} | {size / 1e6 / s:.0f} |" for what, s in timed]
    return rows


# functions of the loader's thread under cProfile, by what they stand for: the rest is parsing,
# batching and the loader's own Python
PROFILE_GROUPS = {
    "PNG decode (spng)": ("spng_decode_image_bytes",),
    "waiting for s3fs's event-loop thread (lock waits, waking it)": (
        "method 'acquire' of '_thread.lock'", "method 'send' of '_socket.socket'"),
    "sha256 as it is read": ("method 'update' of '_hashlib.HASH'",),
}


def profile(args: argparse.Namespace, sources: dict[str, str]) -> list[str]:
    """cProfile of one epoch at 0 workers per source, own time grouped by PROFILE_GROUPS."""
    import pstats
    groups: dict[str, dict[str, float]] = {}
    for name, source in sources.items():
        out = Path(args.workdir) / f"epoch_{name.replace(' ', '_')}.prof"
        cmd = [sys.executable, __file__, "--child", "--profile-out", str(out), "--workdir",
               args.workdir, "--source", source, "--workers", "0", "--endpoint", args.endpoint,
               "--out-size", args.out_size]
        cells.run(cmd, check=True)
        stats = pstats.Stats(str(out)).stats
        total = sum(own for _, _, own, _, _ in stats.values())
        got = groups.setdefault(name, {})
        for group, marks in PROFILE_GROUPS.items():
            got[group] = sum(st[2] for func, st in stats.items()
                             if any(m in func[2] for m in marks))
        got["everything else (tar parsing, batching, Python)"] = total - sum(got.values())
        got["total (profiled)"] = total
    names = list(sources)
    rows = ["| own time of the loader's thread, s | " + " | ".join(names) + " |",
            "|---|" + "---:|" * len(names)]
    for group in groups[names[0]]:
        rows.append(f"| {group} | " + " | ".join(f"{groups[n][group]:.3f}" for n in names)
                    + " |")
    return rows


def _package_dir() -> str:
    import carla_wds
    return str(Path(carla_wds.__file__).parent)


def report(args: argparse.Namespace, shards: Path, url: str) -> None:
    """Run every cell, then print the tables."""
    manifest = json.loads((shards / "manifest.json").read_text())
    total = sum(s["bytes"] for s in manifest["shards"])
    steal0 = steal_seconds()
    runs = run_cells(args, shards, url)
    steal = steal_seconds() - steal0
    workers_list = [int(w) for w in args.workers_list.split(",")]
    limit = "on (2x the pack)" if runs[("s3 warm cache", workers_list[0])][0]["limit"] \
        else "not passed: CARLAWebData has no cache_limit_bytes yet"
    print(f"{manifest['total_samples']} samples in {len(manifest['shards'])} shards, "
          f"{total / 1e6:.0f} MB; batch {BATCH}, decoded at {args.out_size}; "
          f"{os.cpu_count()} cores; median of {args.repeats} interleaved repeats; "
          f"cache_limit_bytes {limit}; carla_wds from {_package_dir()}; load average "
          f"{os.getloadavg()[0]:.2f} at the end, steal {steal:.1f} s during the cells\n")
    print("\n".join(table(runs, workers_list)))
    print("\nnoise: local disk's spread across its own repeats\n")
    print("\n".join(noise(runs, workers_list)))
    print("\nwhere the time goes: one shard's fetch, piece by piece\n")
    print("\n".join(pieces(args, shards, runs)))
    if not args.no_profile:
        print("\ncProfile of one epoch at 0 workers (cProfile's overhead included)\n")
        print("\n".join(profile(args, {"local": str(shards), "s3 no cache": url})))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workdir", default="/tmp/bench_s3")
    p.add_argument("--episodes", type=int, default=6)
    p.add_argument("--frames", type=int, default=100)
    p.add_argument("--max-samples", type=int, default=80, help="samples per shard")
    p.add_argument("--image-size", default=None, help="HxW of the synthetic camera (smoke "
                   "tests); default tcp's 256x900")
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument("--workers-list", default="0,2")
    p.add_argument("--no-profile", action="store_true", help="skip the cProfile epoch")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--source", default="", help=argparse.SUPPRESS)
    p.add_argument("--workers", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--endpoint", default="", help=argparse.SUPPRESS)
    p.add_argument("--cache-dir", default=None, help=argparse.SUPPRESS)
    p.add_argument("--cache-limit", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--out-size", default="", help=argparse.SUPPRESS)
    p.add_argument("--profile-out", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return child(args)
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    # HxW, as every size option and synth_dataset's image_size
    size = tuple(int(v) for v in args.image_size.split("x")) if args.image_size else None
    shards = make_data(work, args.episodes, args.frames, args.max_samples, size)
    total = sum(s["bytes"] for s in json.loads((shards / "manifest.json").read_text())["shards"])
    args.out_size = args.image_size or "256x900"   # decoded at the camera's own size (HxW)
    args.cache_limit = 2 * total   # room for every shard: the limit is on, never hit
    server, args.endpoint, url = start_server(shards)
    try:
        report(args, shards, url)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
