#!/usr/bin/env python
"""This tree against an earlier commit, side by side in one run: loader epochs and packs.

The machine is noisy, so a figure from another day says little about a change; this runs the
same cell for a baseline commit (checked out in a git worktree) and for the working tree,
alternating ABBA, each in a fresh process, on the same shards, and prints medians and ratios.

    .venv/bin/python tools/bench_ab.py --ref 246d6b5 --workdir /tmp/ab [--frames 100]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

LOADER = """
import sys, time
from carla_wds import CARLAWebData
fields = sys.argv[3].split(",") if len(sys.argv) > 3 and sys.argv[3] else None
data = CARLAWebData(sys.argv[1], batch_size=32, image_size=(256, 512), shuffle_buffer=256,
                    num_workers=int(sys.argv[2]), fields=fields)
t0 = time.perf_counter()
n = sum(len(b) for b in data)
print(n / (time.perf_counter() - t0))
"""

PACK = """
import shutil, sys, time
from carla_wds.pack import PackOptions, pack
shutil.rmtree(sys.argv[2], ignore_errors=True)
t0 = time.perf_counter()
opts = {"layout": "transfuser4", **eval(sys.argv[3])}
pack(sys.argv[1], sys.argv[2], PackOptions(max_samples=100, progress=False, fsync=False, **opts))
print(time.perf_counter() - t0)
"""


def run(tree: Path, code: str, *args: str) -> float:
    check = f"import carla_wds; assert carla_wds.__file__.startswith({str(tree)!r})\n"
    out = subprocess.run([sys.executable, "-c", check + code, *args], cwd=tree, check=True,
                         capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(tree)})
    return float(out.stdout.strip().splitlines()[-1])


def prepare(args: argparse.Namespace) -> tuple[Path, Path, dict[str, Path]]:
    work = Path(args.workdir)
    base = work / "baseline"
    if not base.exists():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(base),
                        args.ref], check=True, capture_output=True)
    raw = work / "raw"
    if not raw.exists():
        subprocess.run([sys.executable, "-m", "carla_wds.cli", "synth", str(raw), "--layout",
                        "transfuser4", "--episodes", str(args.episodes), "--frames",
                        str(args.frames), "--image-size", "300x400", "--seed", "0"], check=True, cwd=ROOT)
    shards = {}
    if args.garage:   # extras: depth, semantics, BEV (PNG headers), LiDAR points, boxes, record
        garage = work / "raw_garage"
        if not garage.exists():
            subprocess.run([sys.executable, "-m", "carla_wds.cli", "synth", str(garage),
                            "--layout", "garage", "--episodes", "2", "--frames",
                            str(args.frames), "--seed", "0"], check=True, cwd=ROOT)
        shards["garage"] = work / "shards_garage"
        if not shards["garage"].exists():   # packed by the baseline: both trees read it
            run(base, PACK, str(garage), str(shards["garage"]), repr(GARAGE))
    for fmt in args.formats.split(","):
        shards[fmt] = work / f"shards_{fmt}"
        if not shards[fmt].exists():
            opts = {} if fmt == "png" else {"image_format": "jpg"}
            run(ROOT, PACK, str(raw), str(shards[fmt]), repr(opts))
    return base, raw, shards


GARAGE = {"layout": "garage", "pred_len": 4}
GARAGE_FIELDS = "depth,semantics,bev,lidar,boxes,measurements"


def measure(tree: Path, cell: tuple[str, str, str], args: argparse.Namespace, raw: Path,
            shards: dict[str, Path]) -> float:
    """One cell in a fresh process of `tree`: samples/s of a loader pass, or a pack's seconds."""
    kind, fmt, w = cell
    if kind == "loader":
        return run(tree, LOADER, str(shards[fmt]), w, GARAGE_FIELDS if fmt == "garage" else "")
    out = str(Path(args.workdir) / f"out_{tree.name}")
    if fmt == "garage":
        return run(tree, PACK, str(Path(args.workdir) / "raw_garage"), out, repr(GARAGE))
    return run(tree, PACK, str(raw), out, repr({} if fmt == "png" else {"image_format": "jpg"}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ref", required=True, help="baseline commit")
    ap.add_argument("--workdir", default="/tmp/bench_ab")
    ap.add_argument("--episodes", type=int, default=4)
    ap.add_argument("--frames", type=int, default=100)
    ap.add_argument("--workers-list", default="0,2")
    ap.add_argument("--formats", default="png,jpg")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--garage", action="store_true",
                    help="also a garage pack (every extra field) and its loader")
    args = ap.parse_args()
    base, raw, shards = prepare(args)
    trees = {"baseline": base, "current": ROOT}
    cells = [("loader", fmt, w) for fmt in shards for w in args.workers_list.split(",")]
    cells += [("pack", "png", "-"), ("pack", "jpg", "-")]
    cells += [("pack", "garage", "-")] if args.garage else []
    results: dict[tuple, dict[str, list[float]]] = {c: {"baseline": [], "current": []}
                                                    for c in cells}
    for i in range(args.repeats):
        order = ["baseline", "current"] if i % 2 == 0 else ["current", "baseline"]
        for cell in cells:
            for name in order:
                value = measure(trees[name], cell, args, raw, shards)
                results[cell][name].append(value)
    print(f"| cell | baseline {args.ref} | current | current / baseline |")
    print("|---|---|---|---|")
    for (kind, fmt, w), r in results.items():
        b, c = statistics.median(r["baseline"]), statistics.median(r["current"])
        unit = "samples/s" if kind == "loader" else "s"
        ratio = c / b if kind == "loader" else b / c   # > 1: current is faster
        label = f"{kind} {fmt}" + (f" {w} workers" if kind == "loader" else "")
        print(f"| {label} | {b:.1f} {unit} | {c:.1f} {unit} | {ratio:.2f}x |")
    print(json.dumps({f"{k[0]}-{k[1]}-{k[2]}": v for k, v in results.items()}))


if __name__ == "__main__":
    main()
