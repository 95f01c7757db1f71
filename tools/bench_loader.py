#!/usr/bin/env python
"""Loader throughput and peak RSS, side by side on the same shards:

  (a) seed   - the seed post's recipe: WebDataset(resampled, shardshuffle).shuffle(S).decode("rgb")
               .to_tuple(...).map_tuple(ToTensor + Resize((256, 512)) + Normalize).batched(64)
               -> WebLoader(batch_size=None).unbatched().shuffle(S).batched(32).with_epoch(n)
  (b) ours   - CARLAWebData(batch_size=32, image_size=(256, 512), shuffle_buffer=S), uint8 batches
               (normalisation happens on the GPU in training, see CARLABatch.normalized_images)
  (c) floor  - one process: read the tar, decode the four images and resize to uint8, nothing else
  (d) persistent - ours with persistent_workers=True, timed over epochs 2 and 3 only: a
               training run's later epochs, without the fork and the first write of ring slots
  (e) mix    - ours through a mix (issue 29, `--kinds ...,mix`): CARLAWebData(mix=...) of two
               entries over the same shards, split by a bucket (speed: stopped and slow
               against the rest), weighted as their sizes, so it serves as many samples as (b)

for num_workers 0, 1, 2 and for PNG and JPEG shards. When 2 workers are measured, so is the
floor in 2 forked processes, each over half the shards: how far this machine's 2 cores scale
work that shares nothing, the ceiling for "2 workers against 1". Each measurement runs in a
fresh process, timed from after its imports to the last batch (worker start-up and buffer
filling included); peak RSS is the largest sum over that process and its worker processes,
sampled every 50 ms (a page shared by several processes counts once in each).

The scaling table also splits each ratio in two, from each cell's CPU time (getrusage of the
process and its reaped workers) and the host's steal time (/proc/stat): how busy the decoding
processes kept the cores (CPU seconds / wall seconds / processes), and how much more CPU one
sample cost at 2 than at 1. 2w/1w = busy(2) x 2 / busy(1) / cost ratio, so a shortfall shows
either idle workers (the loader's fault) or dearer CPU seconds when both cores run (the VM's).

    .venv/bin/python tools/bench_loader.py --workdir /tmp/bench_loader [--episodes 4 --frames 60]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

import cells
from proc_stats import PeakRSS, children_cpu, cpu_seconds, steal_seconds

BATCH, SIZE = 32, (256, 512)
MEMBERS = ("front", "rear", "left", "right")


def seed_recipe(shards: Path, workers: int, shuffle: int, n_batches: int, fmt: str) -> int:
    import torchvision.transforms as T
    import webdataset as wds
    manifest = json.loads((shards / "manifest.json").read_text())
    urls = [str(shards / s["name"]) for s in manifest["shards"]]
    tf = T.Compose([T.ToTensor(), T.Resize(SIZE),
                    T.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])])
    ident = lambda x: x  # noqa: E731
    ds = (wds.WebDataset(urls, resampled=True, shardshuffle=True,
                         nodesplitter=wds.shardlists.single_node_only)
          .shuffle(shuffle).decode("rgb")
          .to_tuple(*(f"{m}.{fmt}" for m in MEMBERS), "speed.json", "target_point.npy",
                    "target_command.npy", "waypoints.npy", "waypoints_diff.npy")
          .map_tuple(tf, tf, tf, tf, ident, ident, ident, ident, ident))
    loader = wds.WebLoader(ds.batched(64), batch_size=None, collate_fn=ident,
                           num_workers=workers)
    loader = loader.unbatched().shuffle(shuffle).batched(BATCH).with_epoch(n_batches)
    return sum(len(b[0]) for b in loader)


def ours(shards: Path, workers: int, shuffle: int, persistent: bool = False):
    from carla_wds import CARLAWebData
    return CARLAWebData(str(shards), batch_size=BATCH, num_workers=workers, image_size=SIZE,
                        shuffle_buffer=shuffle, persistent_workers=persistent)


def ours_mix(shards: Path, workers: int, shuffle: int):
    """(e): the pack through a two-entry mix of the same size."""
    from carla_wds import CARLAWebData
    sizes = json.loads((shards / "manifest.json").read_text())["buckets"]["sizes"]["speed"]
    low = ["stopped", "slow"]
    n_low = sum(n for v, n in sizes.items() if v in low)
    rest = [v for v in sizes if v not in low]
    mix = {"entries": [{"source": str(shards), "where": {"speed": low}, "weight": n_low},
                       {"source": str(shards), "where": {"speed": rest},
                        "weight": sum(sizes.values()) - n_low}]}
    return CARLAWebData(mix=mix, batch_size=BATCH, num_workers=workers, image_size=SIZE,
                        shuffle_buffer=shuffle)


def epochs(data, numbers: tuple[int, ...] = (0,)) -> int:
    """Samples of these epochs, checked against len(data): exactly its full batches."""
    n = 0
    for epoch in numbers:
        data.set_epoch(epoch)
        n += sum(len(b) for b in data)
    if n != len(numbers) * len(data) * BATCH:
        raise SystemExit(f"ours: {n} samples, expected {len(numbers)} x len(data) x {BATCH}")
    return n


def floor(shards: Path, fmt: str, procs: int = 1) -> int:
    import multiprocessing
    names = [s["name"] for s in json.loads((shards / "manifest.json").read_text())["shards"]]
    if procs == 1:
        return _floor_part(shards, fmt, names)
    with multiprocessing.get_context("fork").Pool(procs) as pool:
        return sum(pool.starmap(_floor_part, [(shards, fmt, names[i::procs])
                                              for i in range(procs)]))


def _floor_part(shards: Path, fmt: str, names: list[str]) -> int:
    import tarfile

    from carla_wds.load.decode.stages import decode_image
    n = 0
    for name in names:
        with tarfile.open(shards / name) as tar:
            for m in tar:
                if m.name.endswith("." + fmt):
                    decode_image(tar.extractfile(m).read(), SIZE, fmt)
                    n += 1
    return n // len(MEMBERS)


def _import_for(kind: str) -> None:
    """Import what a pipeline needs before the clock starts: library import time (torch,
    torchvision, cv2: 1.5-8 s here) is not loader throughput, and it would hide how a
    pipeline scales with workers."""
    if kind == "seed":
        import torchvision.transforms  # noqa: F401
        import webdataset  # noqa: F401
    else:
        import carla_wds.load.dataset  # noqa: F401
        import carla_wds.load.decode.stages  # noqa: F401


def child(args: argparse.Namespace) -> None:
    shards = Path(args.workdir) / f"shards_{args.fmt}"
    total = json.loads((shards / "manifest.json").read_text())["total_samples"]
    _import_for(args.child)
    if args.child == "persistent":   # its first epoch, untimed, forks the workers
        warm = ours(shards, args.workers, args.shuffle, persistent=True)
        epochs(warm)
    cpu0 = [cpu_seconds(resource.RUSAGE_SELF), children_cpu()]
    steal0 = steal_seconds()
    with PeakRSS() as rss:
        t0 = time.perf_counter()
        if args.child == "seed":
            n = seed_recipe(shards, args.workers, args.shuffle, total // BATCH, args.fmt)
        elif args.child == "ours":
            n = epochs(ours(shards, args.workers, args.shuffle))
        elif args.child == "persistent":
            n = epochs(warm, (1, 2))
        elif args.child == "mix":
            n = epochs(ours_mix(shards, args.workers, args.shuffle))
        else:
            n = floor(shards, args.fmt, 2 if args.child == "floor2" else 1)
        seconds = time.perf_counter() - t0
    # fresh workers are reaped by now (getrusage); persistent ones are read live (/proc)
    main_cpu = cpu_seconds(resource.RUSAGE_SELF) - cpu0[0]
    workers_cpu = children_cpu() - cpu0[1]
    steal = steal_seconds() - steal0
    # A rate is only worth reporting over the right count: the floor reads every sample, the
    # loaders exactly their full batches (ours checks len() itself, in `epochs`).
    expected = total if args.child.startswith("floor") else total // BATCH * BATCH
    if args.child not in ("ours", "persistent", "mix") and n != expected:
        raise SystemExit(f"{args.child}: {n} samples, expected {expected}")
    print(json.dumps({"samples": n, "seconds": seconds, "peak_rss_mb": rss.peak,
                      "main_cpu": main_cpu, "workers_cpu": workers_cpu, "steal": steal}))


def prepare(workdir: Path, episodes: int, frames: int) -> None:
    from carla_wds.pack.packer import PackOptions, pack
    from carla_wds.pack.synth import synth_dataset
    raw = workdir / "raw"
    if not raw.exists():
        synth_dataset(raw, "transfuser4", episodes=episodes, frames=frames, seed=0)
    for fmt in ("png", "jpg"):
        out = workdir / f"shards_{fmt}"
        if not (out / "manifest.json").exists():
            pack(raw, out, PackOptions(layout="transfuser4", max_samples=32, overwrite=True,
                                       image_format=None if fmt == "png" else "jpg", quality=95))


def measure(workdir: Path, kind: str, fmt: str, workers: int, shuffle: int) -> dict:
    cmd = [sys.executable, __file__, "--child", kind, "--fmt", fmt, "--workers", str(workers),
           "--shuffle", str(shuffle), "--workdir", str(workdir)]
    out = cells.run(cmd, check=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    result["rate"] = result["samples"] / result["seconds"]
    result["procs"] = 2 if kind == "floor2" else workers
    return result


def len_timing(workdir: Path) -> tuple[float, float]:
    """Construction and len() of a CARLAWebData over a 1000-shard manifest (no shard is read)."""
    from carla_wds import CARLAWebData
    folder = workdir / "manifest_1000"
    folder.mkdir(exist_ok=True)
    shards = [{"name": f"shard-{i:06d}.tar", "samples": 1000, "bytes": 1, "sha256": "0" * 64}
              for i in range(1000)]
    (folder / "manifest.json").write_text(json.dumps({
        "schema_version": 1, "cameras": list(MEMBERS), "pred_len": 4, "image_format": "png",
        "layout": "transfuser4", "total_samples": 10**6, "shards": shards}))
    t0 = time.perf_counter()
    data = CARLAWebData(str(folder), batch_size=32, rank=3, world_size=8)
    t1 = time.perf_counter()
    for _ in range(1000):
        len(data)
    return (t1 - t0) * 1e3, (time.perf_counter() - t1) * 1e3 / 1000


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workdir", default="/tmp/bench_loader")
    p.add_argument("--episodes", type=int, default=4)
    p.add_argument("--frames", type=int, default=60)
    p.add_argument("--shuffle", type=int, default=256)
    p.add_argument("--workers-list", default="0,1,2")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--formats", default="png,jpg")
    p.add_argument("--kinds", default="seed,ours,persistent",
                   help="pipelines besides the floor (persistent: ours, epochs 2-3)")
    p.add_argument("--seed-repeats", type=int, default=None,
                   help="repeats of the seed's cells (default: --repeats); it is 10-25x slower")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--fmt", default="png", help=argparse.SUPPRESS)
    p.add_argument("--workers", type=int, default=0, help=argparse.SUPPRESS)
    return p


def _format_runs(args: argparse.Namespace, workdir: Path, fmt: str, workers_list: list[int],
                 kinds: list[str], seed_repeats: int) -> dict[tuple, list[dict]]:
    """Every cell of one format, args.repeats times: results by (kind, workers)."""
    runs: dict[tuple, list[dict]] = {}
    for r in range(args.repeats):
        # Interleaved, and every other repeat in reverse order (ABBA): this VM's speed
        # drifts by +-10% over minutes, and a drift then hits each cell alike.
        cells = [("floor", 0)] + [("floor2", 0)] * (2 in workers_list) + \
            [(kind, w) for kind in kinds for w in workers_list
             if (kind != "seed" or r < seed_repeats) and (kind, w) != ("persistent", 0)]
        for kind, workers in cells if r % 2 == 0 else cells[::-1]:
            runs.setdefault((kind, workers), []).append(
                measure(workdir, kind, fmt, workers, args.shuffle))
    return runs


def _print_rates(fmt: str, runs: dict, workers_list: list[int], kinds: list[str], fl: dict) -> None:
    """The main table's rows of one format: seed, ours and the floor per worker count."""
    none = {"rate": float("nan"), "peak_rss_mb": float("nan")}
    for workers in workers_list:
        seed = _median(runs[("seed", workers)]) if "seed" in kinds else none
        mine = _median(runs[("ours", workers)]) if "ours" in kinds else none
        print(f"| {fmt} | {workers} | {seed['rate']:.1f} | {mine['rate']:.1f} | "
              f"{fl['rate']:.1f} | {mine['rate'] / seed['rate']:.2f}x | "
              f"{mine['rate'] / fl['rate']:.2f} | {seed['peak_rss_mb']:.0f} | "
              f"{mine['peak_rss_mb']:.0f} |", flush=True)


def _print_later_tables(later: list[str], scaling: list[str]) -> None:
    _print_table("Persistent workers (ours, persistent_workers=True), epochs 2-3 after an "
                 "untimed first epoch, against one epoch with fresh workers. Per core: "
                 "samples/s / floor / workers",
                 ["format", "workers", "fresh samples/s", "persistent samples/s",
                  "persistent/fresh", "persistent/floor per core"], later)
    _print_table("2 workers against 1 (ours), and 2 floor processes against 1 (this machine's "
                 "ceiling). busy: decoding CPU s / wall s / processes; CPU/sample: its ratio, 2 "
                 "against 1; steal: seconds taken by the host during the 2-process cell",
                 ["format", "pipeline", "2 vs 1", "per repeat", "busy at 1", "busy at 2",
                  "CPU/sample 2 vs 1", "steal s"], scaling)


def main() -> None:
    args = _parser().parse_args()
    if args.child:
        return child(args)
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    prepare(workdir, args.episodes, args.frames)
    build_ms, len_ms = len_timing(workdir)
    print(f"1000-shard manifest: construction {build_ms:.2f} ms, len() {len_ms * 1e3:.2f} us\n")
    print(f"shuffle buffer {args.shuffle} (both of the seed's buffers, and ours); batch {BATCH}; "
          f"output {SIZE[0]}x{SIZE[1]}; {os.cpu_count()} cores\n")
    seed_repeats = args.repeats if args.seed_repeats is None else args.seed_repeats
    print(f"median of {args.repeats} interleaved runs per cell ({seed_repeats} for the seed)\n")
    print("| format | workers | seed samples/s | ours samples/s | floor samples/s | ours/seed | "
          "ours/floor | seed peak RSS MB | ours peak RSS MB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    workers_list = [int(w) for w in args.workers_list.split(",")]
    kinds = args.kinds.split(",")
    scaling: list[str] = []
    later: list[str] = []
    mixed: list[str] = []
    for fmt in args.formats.split(","):
        runs = _format_runs(args, workdir, fmt, workers_list, kinds, seed_repeats)
        fl = _median(runs[("floor", 0)])
        _print_rates(fmt, runs, workers_list, kinds, fl)
        if "mix" in kinds and "ours" in kinds:   # (e) against (b), cell by cell
            for w in workers_list:
                mix, mine = _median(runs[("mix", w)]), _median(runs[("ours", w)])
                mixed.append(f"| {fmt} | {w} | {mine['rate']:.1f} | {mix['rate']:.1f} | "
                             f"{mix['rate'] / mine['rate']:.2f}x |")
        later += _later_epochs(fmt, runs, workers_list, kinds, fl)
        scaling += _scaling(fmt, runs, workers_list, kinds)
    _print_later_tables(later, scaling)
    if mixed:
        _print_table("A two-entry mix (e) against the pack alone (b), samples/s",
                     ["format", "workers", "one pack", "mix", "mix/one"], mixed)


def _later_epochs(fmt: str, runs: dict, workers_list: list[int], kinds: list[str],
                  fl: dict) -> list[str]:
    """Table rows: ours with persistent workers over epochs 2-3, against one fresh epoch."""
    if "persistent" not in kinds:
        return []
    rows = []
    for w in [w for w in workers_list if w]:   # no workers, nothing persists
        later = _median(runs[("persistent", w)])
        fresh = _median(runs[("ours", w)])["rate"] if "ours" in kinds else float("nan")
        rows.append(f"| {fmt} | {w} | {fresh:.1f} | {later['rate']:.1f} | "
                    f"{later['rate'] / fresh:.2f}x | {later['rate'] / fl['rate'] / w:.2f} |")
    return rows


def _print_table(title: str, columns: list[str], rows: list[str]) -> None:
    """A markdown table after its title; nothing when there are no rows. Text columns first."""
    if rows:
        print(f"\n{title}:\n")
        print("| " + " | ".join(columns) + " |")
        print("|" + "|".join("---" if c in ("format", "pipeline") else "---:" for c in columns)
              + "|")
        print("\n".join(rows), flush=True)


def _scaling(fmt: str, runs: dict, workers_list: list[int], kinds: list[str]) -> list[str]:
    """Table rows: ours at 2 workers against 1, and the floor at 2 processes against 1, as a
    ratio of medians, the range of per-repeat ratios, and the two factors behind it."""
    if not ({1, 2} <= set(workers_list) and "ours" in kinds):
        return []
    pairs = {"ours": (runs[("ours", 1)], runs[("ours", 2)]),
             "floor": (runs[("floor", 0)], runs[("floor2", 0)])}
    if "persistent" in kinds:
        pairs["persistent"] = (runs[("persistent", 1)], runs[("persistent", 2)])
    rows = []
    for name, (one, two) in pairs.items():
        each = sorted(b["rate"] / a["rate"] for a, b in zip(one, two))
        cost = _mid([_cpu_per_sample(b) / _cpu_per_sample(a) for a, b in zip(one, two)])
        rows.append(f"| {fmt} | {name} | {_median(two)['rate'] / _median(one)['rate']:.2f}x | "
                    f"{each[0]:.2f}-{each[-1]:.2f}x | {_mid([_busy(r) for r in one]):.3f} | "
                    f"{_mid([_busy(r) for r in two]):.3f} | {cost:.3f} | "
                    f"{_mid([r['steal'] for r in two]):.2f} |")
    return rows


def _decoders(r: dict) -> tuple[float, int]:
    """CPU seconds of the processes that decode, and how many there are: the workers, or the
    floor's one process (itself) or two (its pool)."""
    return (r["workers_cpu"], r["procs"]) if r["procs"] else (r["main_cpu"], 1)


def _busy(r: dict) -> float:
    cpu, procs = _decoders(r)
    return cpu / r["seconds"] / procs


def _cpu_per_sample(r: dict) -> float:
    return _decoders(r)[0] / r["samples"]


def _mid(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def _median(results: list[dict]) -> dict:
    return {"rate": _mid([r["rate"] for r in results]),
            "peak_rss_mb": max(r["peak_rss_mb"] for r in results)}


if __name__ == "__main__":
    main()
