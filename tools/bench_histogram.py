#!/usr/bin/env python
"""The LiDAR histogram before and after its one-pass rewrite (issue 26), side by side in one run:

  before  the formula up to 12cb398 (carla_wds/modalities/lidar_bev.py there): per plane
          np.histogramdd(xy, bins=preset.edges()) (two binary searches of the edges per point),
          clip, divide, stack, rot90/transpose copy
  after   carla_wds.modalities.lidar_bev.histogram_features: one pass over the points per
          block of them, both planes in one np.bincount, counted straight into the oriented grid

for every preset of carla_wds.datasets.lidar_presets(), on one cloud of --points float32 points
(the dtype the loaders hold: TransFuser 2022's npy, the LAZ codec's decode) spread over 50 m
around the car, most of them inside the grids and around the split heights. The two outputs
are checked equal first. Then --rounds rounds alternate the sides (before first in even
rounds, after first in odd), each side --calls calls in a row; the table gives the median over
the rounds of the ms per call, wall clock and the thread's CPU time (less moved by other
processes on a shared machine), and before / after of each pair of medians.

--block sets the points the after side bins per pass (lidar_bev._CHUNK); one at least --points
gives the whole cloud in one pass, the first version of the rewrite.

    .venv/bin/python tools/bench_histogram.py [--points 30000] [--rounds 15] [--calls 20] \
        [--block 12288]
"""
from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from carla_wds.datasets import lidar_presets  # noqa: E402
from carla_wds.modalities import lidar_bev  # noqa: E402
from carla_wds.modalities.lidar_bev import HistogramPreset, _cut, histogram_features  # noqa: E402


def before(points: np.ndarray, p: HistogramPreset) -> np.ndarray:
    """histogram_features as it was at 12cb398 (lidar_bev.py l.71-95 there)."""
    def splat(xy: np.ndarray) -> np.ndarray:
        hist = np.histogramdd(xy, bins=p.edges())[0]
        return np.minimum(hist, p.max_per_pixel) / p.max_per_pixel

    pts = np.asarray(points)
    if p.negate_y:
        pts = pts[:, :3] * np.array([1, -1, 1], dtype=pts.dtype)
    if p.max_height is not None:
        pts = pts[pts[:, 2] < _cut(p.max_height, pts.dtype, up=True)]
    z = pts[:, 2]
    split = _cut(p.split_height, pts.dtype, up=False)
    planes = {"above": splat(pts[z > split, :2]), "below": splat(pts[z <= split, :2])}
    features = np.stack([planes[name] for name in p.channels]).astype(np.float32)
    if p.orientation == "rot90_cw":
        features = np.rot90(features, -1, axes=(1, 2))
    else:
        features = features.transpose(0, 2, 1)
    return np.ascontiguousarray(features)


def cloud(n: int, p: HistogramPreset, seed: int = 0) -> np.ndarray:
    """n float32 points (x, y, z, intensity): 50 m around the car, z around the split."""
    rng = np.random.default_rng(seed)
    xy = rng.uniform(-50, 50, (n, 2))
    z = rng.normal(p.split_height + 0.5, 1.0, n)
    return np.column_stack([xy, z, rng.random(n)]).astype(np.float32)


def per_call(fn: Callable[[], object], calls: int) -> tuple[float, float]:
    """(wall ms, thread CPU ms) per call, over `calls` calls in a row."""
    wall, cpu = time.perf_counter(), time.thread_time()
    for _ in range(calls):
        fn()
    return ((time.perf_counter() - wall) * 1e3 / calls,
            (time.thread_time() - cpu) * 1e3 / calls)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--points", type=int, default=30000)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--block", type=int, default=lidar_bev._CHUNK)
    args = ap.parse_args()
    lidar_bev._CHUNK = args.block
    print(f"{args.points} float32 points per cloud, after in blocks of {args.block}, "
          f"{args.rounds} rounds x {args.calls} calls per side; numpy {np.__version__}, "
          f"Python {platform.python_version()}\n")
    print("| preset | before ms | after ms | before / after | before CPU ms | after CPU ms "
          "| before / after, CPU |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, p in lidar_presets().items():
        pts = cloud(args.points, p)
        if not np.array_equal(before(pts, p), histogram_features(pts, p)):
            raise SystemExit(f"{name}: before and after differ")
        sides = {"before": lambda: before(pts, p), "after": lambda: histogram_features(pts, p)}
        runs: dict[str, list[tuple[float, float]]] = {"before": [], "after": []}
        for rnd in range(args.rounds):
            for side in (("before", "after") if rnd % 2 == 0 else ("after", "before")):
                runs[side].append(per_call(sides[side], args.calls))
        wall = {s: statistics.median(r[0] for r in v) for s, v in runs.items()}
        cpu = {s: statistics.median(r[1] for r in v) for s, v in runs.items()}
        print(f"| {name} | {wall['before']:.2f} | {wall['after']:.2f} | "
              f"{wall['before'] / wall['after']:.1f}x | {cpu['before']:.2f} | {cpu['after']:.2f} | "
              f"{cpu['before'] / cpu['after']:.1f}x |", flush=True)


if __name__ == "__main__":
    main()
