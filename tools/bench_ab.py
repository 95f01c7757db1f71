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
data = CARLAWebData(sys.argv[1], batch_size=32, image_size=(256, 512), shuffle_buffer=256,
                    num_workers=int(sys.argv[2]))
t0 = time.perf_counter()
n = sum(len(b) for b in data)
print(n / (time.perf_counter() - t0))
"""

PACK = """
import shutil, sys, time
from carla_wds.pack import PackOptions, pack
shutil.rmtree(sys.argv[2], ignore_errors=True)
t0 = time.perf_counter()
pack(sys.argv[1], sys.argv[2], PackOptions(layout="transfuser4", max_samples=100,
                                           progress=False, fsync=False, **eval(sys.argv[3])))
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
                        str(args.frames), "--image-size", "400x300", "--seed", "0"], check=True, cwd=ROOT)
    shards = {}
    for fmt in args.formats.split(","):
        shards[fmt] = work / f"shards_{fmt}"
        if not shards[fmt].exists():
            opts = {} if fmt == "png" else {"image_format": "jpg"}
            run(ROOT, PACK, str(raw), str(shards[fmt]), repr(opts))
    return base, raw, shards


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ref", required=True, help="baseline commit")
    ap.add_argument("--workdir", default="/tmp/bench_ab")
    ap.add_argument("--episodes", type=int, default=4)
    ap.add_argument("--frames", type=int, default=100)
    ap.add_argument("--workers-list", default="0,2")
    ap.add_argument("--formats", default="png,jpg")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    base, raw, shards = prepare(args)
    trees = {"baseline": base, "current": ROOT}
    cells = [("loader", fmt, w) for fmt in shards for w in args.workers_list.split(",")]
    cells += [("pack", "png", "-"), ("pack", "jpg", "-")]
    results: dict[tuple, dict[str, list[float]]] = {c: {"baseline": [], "current": []}
                                                    for c in cells}
    for i in range(args.repeats):
        order = ["baseline", "current"] if i % 2 == 0 else ["current", "baseline"]
        for cell in cells:
            for name in order:
                kind, fmt, w = cell
                if kind == "loader":
                    value = run(trees[name], LOADER, str(shards[fmt]), w)
                else:
                    opts = {} if fmt == "png" else {"image_format": "jpg"}
                    value = run(trees[name], PACK, str(raw),
                                str(Path(args.workdir) / f"out_{name}"), repr(opts))
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
