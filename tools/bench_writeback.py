#!/usr/bin/env python
"""Early writeback (sync_file_range every 32 MB) on and off, side by side, fsync on.

Same input as tools/bench_pack.py (synthetic transfuser4 routes, page cache warmed first).
Each repeat runs `pack(workers=1)` once with `shards.WRITEBACK_BYTES = 32 MB` (the default) and
once with None, in alternating order, and times the whole pack and its final wait: the call to
ShardSink.close(), which finishes the last shard and waits for its fsync, rename and journal
line (the wait early writeback is meant to bound). Prints a Markdown table of medians.

    .venv/bin/python tools/bench_writeback.py --episodes 4 --frames 150 --copies 3 --repeats 7
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_pack import fresh, input_stats, machine, make_input, warm_up  # noqa: E402

from carla_wds.pack import shards  # noqa: E402
from carla_wds.pack.packer import PackOptions, pack  # noqa: E402

VARIANTS = {"writeback 32 MB": 32 << 20, "no writeback": None}


def timed_close(waits: list[float]):
    """ShardSink.close wrapped to record how long the final wait took."""
    close = shards.ShardSink.close

    def wrapper(self):
        t0 = time.perf_counter()
        try:
            return close(self)
        finally:
            waits.append(time.perf_counter() - t0)
    return close, wrapper


def run_once(raw: Path, out: Path, writeback: int | None, max_samples: int) -> tuple[float, float]:
    waits: list[float] = []
    original, wrapper = timed_close(waits)
    shards.WRITEBACK_BYTES, shards.ShardSink.close = writeback, wrapper
    fresh(out)
    try:
        t0 = time.perf_counter()
        pack(raw, out, PackOptions(layout="transfuser4", workers=1, max_samples=max_samples,
                                   progress=False, fsync=True))
        wall = time.perf_counter() - t0
    finally:
        shards.WRITEBACK_BYTES, shards.ShardSink.close = 32 << 20, original
        fresh(out)
    return wall, waits[-1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=4)
    ap.add_argument("--frames", type=int, default=150)
    ap.add_argument("--copies", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--max-samples", type=int, default=1000)
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench_wb_"))
    raw = make_input(work, args.episodes, args.frames, args.copies, 0)
    n_files, n_bytes = input_stats(raw)
    warm_up(raw)
    walls = {v: [] for v in VARIANTS}
    waits = {v: [] for v in VARIANTS}
    for rep in range(args.repeats):
        order = list(VARIANTS) if rep % 2 == 0 else list(VARIANTS)[::-1]
        for name in order:
            wall, wait = run_once(raw, work / "out", VARIANTS[name], args.max_samples)
            walls[name].append(wall)
            waits[name].append(wait)
            print(f"run {rep + 1} {name}: {wall:.2f} s, final wait {wait:.2f} s", file=sys.stderr)
    print(f"Measured on {machine()}; input {n_files} files, {n_bytes / 1e6:.0f} MB, "
          f"--max-samples {args.max_samples}, fsync on; load average at the end "
          f"{os.getloadavg()[0]:.2f}.\n")
    print("| variant | median wall s | wall runs (s) | median final wait s | final waits (s) |")
    print("|---|---:|---|---:|---|")
    for name in VARIANTS:
        print(f"| {name} | {statistics.median(walls[name]):.2f} | "
              f"{', '.join(f'{t:.2f}' for t in walls[name])} | "
              f"{statistics.median(waits[name]):.2f} | "
              f"{', '.join(f'{t:.2f}' for t in waits[name])} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
