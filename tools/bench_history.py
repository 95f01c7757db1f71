#!/usr/bin/env python
"""History windows (issue 27): what a window costs the loader, side by side in one run.

  (a) h0   - CARLAWebData(history=0): one frame per sample, the baseline
  (b) h3   - CARLAWebData(history=3): each sample with its 3 earlier frames (4 decoded per
             sample, fewer at a route's start, whose padding steps are zeros, not decodes)
  (c) clip - CARLAWebData(history=31): LMDrive-style clips of 32 frames, at --clip-batch
             windows per batch (32 frames x cameras x H x W per window)

for num_workers 0, 1, 2, on the same shards (transfuser4's four cameras, routes that cross
shard boundaries, train mode with the shuffle buffer). A window decodes K + 1 frames, so the
fair comparison is per decoded frame: h3's decoded frames/s against h0's samples/s (the
issue's target: >= 0.8x). Decoded frames are the window steps that are real frames
(frame_valid), counted from the batches themselves. A second ratio leaves out everything
before the first batch (fork, plan, the shuffle buffer's filling), which a short epoch
otherwise spreads over few samples.

Each cell runs in a fresh process (imports done before the clock starts), one full train
epoch, checked against len() x batch; the cells alternate ABBA over --repeats (this VM's speed
drifts over minutes, and a drift then hits every cell alike); the tables give medians and the
range over repeats. Peak RSS is the largest sum over the cell's process and its worker
processes, sampled every 50 ms (proc_stats.PeakRSS; a page shared by several processes counts
once in each).

    .venv/bin/python tools/bench_history.py --workdir /tmp/bench_history [--repeats 3]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import cells
from proc_stats import PeakRSS

KINDS = {"h0": 0, "h3": 3, "clip": 31}


def prepare(workdir: Path, args: argparse.Namespace) -> Path:
    from carla_wds.pack.packer import PackOptions, pack
    from carla_wds.pack.synth import synth_dataset
    raw, out, fmt = workdir / "raw", workdir / f"shards_{args.fmt}", args.fmt
    if not raw.exists():
        synth_dataset(raw, "transfuser4", episodes=args.episodes, frames=args.frames, seed=0,
                      image_size=tuple(args.raw_size), progress=False)
    if not (out / "manifest.json").exists():
        pack(raw, out, PackOptions(layout="transfuser4", max_samples=args.shard_samples,
                                   overwrite=True, progress=False, all_frames=True,
                                   image_format=None if fmt == "png" else "jpg", quality=95))
    return out


def child(args: argparse.Namespace) -> None:
    import carla_wds.load.dataset  # noqa: F401 - imports are not loader time
    import carla_wds.load.decode.stages  # noqa: F401
    from carla_wds import CARLAWebData
    history = KINDS[args.child]
    batch = args.clip_batch if args.child == "clip" else args.batch
    data = CARLAWebData(str(Path(args.workdir) / f"shards_{args.fmt}"), batch_size=batch,
                        num_workers=args.workers, image_size=tuple(args.size),
                        shuffle_buffer=args.shuffle, history=history, mode="train")
    samples = decoded = 0
    first: dict = {}   # the clock, samples and frames at the first batch: start-up's share
    with PeakRSS() as rss:
        t0 = time.perf_counter()
        for b in data:
            samples += len(b)
            decoded += int(b.frame_valid.sum()) if history else int(b.valid.sum())
            first = first or {"first_s": time.perf_counter() - t0, "first_samples": samples,
                              "first_decoded": decoded}
        seconds = time.perf_counter() - t0
    data.close()
    if samples != len(data) * batch:
        raise SystemExit(f"{args.child}: {samples} samples, expected len() x batch = "
                         f"{len(data)} x {batch}")
    print(json.dumps({"samples": samples, "decoded": decoded, "seconds": seconds,
                      "peak_rss_mb": rss.peak, **first}))


def measure(args: argparse.Namespace, kind: str, workers: int) -> dict:
    cmd = [sys.executable, __file__, "--child", kind, "--workers", str(workers),
           "--workdir", args.workdir, "--fmt", args.fmt, "--batch", str(args.batch),
           "--clip-batch", str(args.clip_batch), "--shuffle", str(args.shuffle),
           "--size", *map(str, args.size)]
    out = cells.run(cmd, check=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    result["rate"] = result["samples"] / result["seconds"]
    result["frame_rate"] = result["decoded"] / result["seconds"]
    # after the first batch: the fork, the plan and the shuffle buffer's filling left out,
    # which a short epoch's rate would otherwise spread over few samples
    after = max(result["seconds"] - result["first_s"], 1e-9)   # one batch: a rate of 0
    result["steady_rate"] = (result["samples"] - result["first_samples"]) / after
    result["steady_frame_rate"] = (result["decoded"] - result["first_decoded"]) / after
    return result


def run_cells(args: argparse.Namespace, kinds: list[str], workers_list: list[int]
              ) -> dict[tuple[str, int], list[dict]]:
    cells = [(kind, w) for w in workers_list for kind in kinds]
    runs: dict[tuple[str, int], list[dict]] = {c: [] for c in cells}
    for r in range(args.repeats):
        for cell in cells if r % 2 == 0 else cells[::-1]:   # ABBA
            runs[cell].append(measure(args, *cell))
    return runs


def _mid(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"


def _ratio(num: list[dict], den: list[dict], key: str, den_key: str = "rate") -> str:
    """The ratio of medians, and the range of the per-repeat ratios (same repeat, same drift)."""
    each = [a[key] / b[den_key] for a, b in zip(num, den)]
    med = statistics.median(a[key] for a in num) / statistics.median(b[den_key] for b in den)
    return f"{med:.2f}x ({min(each):.2f}-{max(each):.2f})"


def report(runs: dict, kinds: list[str], workers_list: list[int]) -> None:
    print("| workers | h0 samples/s | h3 samples/s | h3 decoded frames/s | h3 per decoded frame "
          "/ h0 | the same after the first batch | h3 samples / h0 | h0 peak RSS MB | "
          "h3 peak RSS MB |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for w in workers_list:
        h0, h3 = runs[("h0", w)], runs[("h3", w)]
        print(f"| {w} | {_mid([r['rate'] for r in h0])} | {_mid([r['rate'] for r in h3])} | "
              f"{_mid([r['frame_rate'] for r in h3])} | {_ratio(h3, h0, 'frame_rate')} | "
              f"{_ratio(h3, h0, 'steady_frame_rate', 'steady_rate')} | "
              f"{_ratio(h3, h0, 'rate')} | {max(r['peak_rss_mb'] for r in h0):.0f} | "
              f"{max(r['peak_rss_mb'] for r in h3):.0f} |")
    if "clip" not in kinds:
        return
    print("\nClips (history=31, 32 frames per window):\n")
    print("| workers | clip samples/s | clip decoded frames/s | per decoded frame / h0 | "
          "the same after the first batch | decoded frames per clip | peak RSS MB |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for w in workers_list:
        clip = runs[("clip", w)]
        per = clip[0]["decoded"] / clip[0]["samples"]
        print(f"| {w} | {_mid([r['rate'] for r in clip])} | "
              f"{_mid([r['frame_rate'] for r in clip])} | "
              f"{_ratio(clip, runs[('h0', w)], 'frame_rate')} | "
              f"{_ratio(clip, runs[('h0', w)], 'steady_frame_rate', 'steady_rate')} | {per:.1f} | "
              f"{max(r['peak_rss_mb'] for r in clip):.0f} |")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workdir", default="/tmp/bench_history")
    p.add_argument("--episodes", type=int, default=4)
    p.add_argument("--frames", type=int, default=60)
    p.add_argument("--shard-samples", type=int, default=32, help="samples per shard")
    p.add_argument("--raw-size", type=int, nargs=2, default=[300, 400],
                   help="H W of the synthetic cameras")
    p.add_argument("--fmt", default="jpg", choices=("png", "jpg"))
    p.add_argument("--size", type=int, nargs=2, default=[128, 256], help="H W as loaded")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--clip-batch", type=int, default=4, help="windows per batch for clips")
    p.add_argument("--shuffle", type=int, default=64)
    p.add_argument("--workers-list", default="0,1,2")
    p.add_argument("--kinds", default="h0,h3,clip")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--workers", type=int, default=0, help=argparse.SUPPRESS)
    return p


def main() -> None:
    args = _parser().parse_args()
    if args.child:
        return child(args)
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    shards = prepare(workdir, args)
    total = json.loads((shards / "manifest.json").read_text())["total_samples"]
    kinds = [k for k in args.kinds.split(",") if k]
    if not {"h0", "h3"} <= set(kinds):
        raise SystemExit("--kinds must hold h0 and h3 (the tables compare against h0)")
    workers_list = [int(w) for w in args.workers_list.split(",")]
    print(f"transfuser4 synth at {args.raw_size[0]}x{args.raw_size[1]}, {args.episodes} routes"
          f" x {args.frames} frames, {total} samples "
          f"in shards of {args.shard_samples} ({args.fmt}); output {args.size[0]}x{args.size[1]}"
          f", 4 cameras; batch {args.batch} (clips {args.clip_batch}); shuffle buffer "
          f"{args.shuffle}; {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at "
          f"the start; medians (ranges) of {args.repeats} ABBA repeats\n", flush=True)
    runs = run_cells(args, kinds, workers_list)
    report(runs, kinds, workers_list)
    print(f"\nload average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
