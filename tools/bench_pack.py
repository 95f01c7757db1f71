#!/usr/bin/env python
"""Pack throughput against `tar cf` of the same raw route files, side by side.

Writes synthetic transfuser4 routes (four 400x300 PNG cameras, the real sensor size) with
`carla_wds.pack.synth.synth_dataset`, reads every file once to warm the page cache, then times,
interleaved and repeated:
  - `tar cf OUT -C INPUT .`                           (the floor: one sequential copy)
  - `tar cf` followed by an fsync of its output (what the default pack's durability costs tar)
  - `carla_wds.pack.packer.pack` with workers=1 and workers=2 (PNG passthrough, progress off), with
    its default fsync per shard and with fsync=False (`--no-fsync`)
and prints a Markdown table of median MB/s (input bytes / wall seconds), the pack/tar ratio,
and the ratio against the tar run of the same durability ("like for like").

    .venv/bin/python tools/bench_pack.py --episodes 4 --frames 200 --copies 3 --repeats 3 \
        --out docs/benchmarks.md
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from carla_wds.pack.packer import PackOptions, pack
from carla_wds.pack.synth import synth_dataset

LAYOUT = "transfuser4"


def make_input(root: Path, episodes: int, frames: int, copies: int, seed: int) -> Path:
    """Synthetic routes, plus `copies - 1` real byte copies of them (not links) under new names.

    Reused from an earlier `--workdir ... --keep` run made with the same arguments."""
    raw = root / "raw"
    stamp = root / "input.json"
    wanted = json.dumps({"episodes": episodes, "frames": frames, "copies": copies, "seed": seed})
    if stamp.is_file() and stamp.read_text() == wanted:
        return raw
    fresh(raw)
    stamp.unlink(missing_ok=True)
    synth_dataset(raw / "c0", LAYOUT, episodes=episodes, frames=frames, seed=seed,
                  progress=False)
    for k in range(1, copies):
        shutil.copytree(raw / "c0", raw / f"c{k}")
    stamp.write_text(wanted)
    return raw


def input_stats(raw: Path) -> tuple[int, int]:
    files = [p for p in raw.rglob("*") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


def warm_up(raw: Path) -> float:
    """Read every file once so all timed runs read from the page cache."""
    t0 = time.perf_counter()
    for p in sorted(raw.rglob("*")):
        if p.is_file():
            with open(p, "rb") as f:
                while f.read(1 << 20):
                    pass
    return time.perf_counter() - t0


def fresh(path: Path) -> Path:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()
    return path


def cpu_seconds() -> float:
    """user + sys CPU of this process, its threads and its finished children (tar, workers)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def time_tar(raw: Path, out: Path, fsync: bool) -> tuple[float, float]:
    fresh(out)
    c0, t0 = cpu_seconds(), time.perf_counter()
    subprocess.run(["tar", "cf", str(out), "-C", str(raw), "."], check=True)
    if fsync:   # pack fsyncs every shard; this variant makes tar pay the same
        fd = os.open(out, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
    seconds, cpu = time.perf_counter() - t0, cpu_seconds() - c0
    fresh(out)
    return seconds, cpu


def time_pack(raw: Path, out: Path, workers: int, max_samples: int,
              fsync: bool = True) -> tuple[float, float]:
    fresh(out)
    c0, t0 = cpu_seconds(), time.perf_counter()
    pack(raw, out, PackOptions(layout=LAYOUT, workers=workers, max_samples=max_samples,
                               progress=False, fsync=fsync))
    seconds, cpu = time.perf_counter() - t0, cpu_seconds() - c0
    fresh(out)
    return seconds, cpu


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    mem = ""
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f", {kb / 2**20:.0f} GiB RAM"
    except (OSError, ValueError, IndexError):
        pass
    return (f"{cores} cores ({cpu}){mem}, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}")


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=4, help="synthetic routes to render")
    ap.add_argument("--frames", type=int, default=200, help="frames per route")
    ap.add_argument("--copies", type=int, default=3,
                    help="real copies of the rendered routes (more data, no extra rendering)")
    ap.add_argument("--repeats", type=int, default=3, help="timed runs of each variant")
    ap.add_argument("--max-samples", type=int, default=1000, help="pack --max-samples")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workdir", default=None, help="scratch folder (default: a temp folder)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch folder")
    ap.add_argument("--out", default=None, help="append the Markdown result to this file")
    return ap


def _measure(args: argparse.Namespace, work: Path) -> tuple[int, int, float, dict, dict]:
    """Input written and warmed, then every variant args.repeats times, interleaved:
    (input files, input bytes, warm-up s, wall s by variant, CPU s by variant)."""
    print(f"load average before: {os.getloadavg()[0]:.2f}", file=sys.stderr)
    t0 = time.perf_counter()
    raw = make_input(work, args.episodes, args.frames, args.copies, args.seed)
    n_files, n_bytes = input_stats(raw)
    print(f"input: {n_files} files, {n_bytes / 1e6:.0f} MB "
          f"(written in {time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    warm = warm_up(raw)
    print(f"warm-up read of all files: {warm:.1f} s", file=sys.stderr)

    out, n = work / "out", args.max_samples
    variants = {"tar cf": lambda: time_tar(raw, work / "out.tar", fsync=False),
                "tar cf + fsync": lambda: time_tar(raw, work / "out.tar", fsync=True),
                "pack workers=1": lambda: time_pack(raw, out, 1, n),
                "pack workers=2": lambda: time_pack(raw, out, 2, n),
                "pack --no-fsync workers=1": lambda: time_pack(raw, out, 1, n, fsync=False),
                "pack --no-fsync workers=2": lambda: time_pack(raw, out, 2, n, fsync=False)}
    times: dict[str, list[float]] = {name: [] for name in variants}
    cpus: dict[str, list[float]] = {name: [] for name in variants}
    for rep in range(args.repeats):          # interleaved: drift hits every variant alike
        for name, run in variants.items():
            wall, cpu = run()
            times[name].append(wall)
            cpus[name].append(cpu)
            print(f"run {rep + 1}/{args.repeats} {name}: {wall:.2f} s wall, {cpu:.2f} s CPU",
                  file=sys.stderr)
    return n_files, n_bytes, warm, times, cpus


def _report(args: argparse.Namespace, argv: list[str] | None, n_files: int, n_bytes: int,
            warm: float, times: dict[str, list[float]], cpus: dict[str, list[float]]) -> str:
    """The Markdown result: how it was measured, then one table row per variant."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    med = {name: statistics.median(ts) for name, ts in times.items()}
    tar, tar_best = med["tar cf"], min(times["tar cf"])
    frames = args.episodes * args.frames * args.copies
    command = "python tools/bench_pack.py " + " ".join(argv if argv is not None else sys.argv[1:])
    lines = [
        f"Measured {dt.date.today().isoformat()} on {machine()}.",
        f"Command: `{command}`",
        f"Input: {LAYOUT} layout, {frames} frames ({args.episodes} rendered routes x "
        f"{args.frames} frames x {args.copies} copies), 4 cameras of 400x300 PNG, "
        f"{n_files} files, {n_bytes / 1e6:.0f} MB. One warm-up read of all files first "
        f"({warm:.1f} s), so every run reads from the page cache. Median of {args.repeats} "
        f"interleaved runs; MB/s = input MB / median wall seconds; best = the fastest run (the "
        "least disturbed by other load); CPU = user + sys seconds of all processes and threads "
        "involved (median). pack: PNG passthrough, "
        f"--max-samples {args.max_samples}, progress off; by default one fsync per shard, none "
        "with --no-fsync; plain `tar cf` does not fsync. \"like for like\" compares each variant "
        "with the tar run of the same durability (fsync or not), medians. Load average at the "
        f"end: {load:.2f}.",
        "",
        "| variant | median s | runs (s) | MB/s | vs tar cf (median) | vs tar cf (best) | "
        "like for like | CPU s |",
        "|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    for name, m in med.items():
        runs = ", ".join(f"{t:.2f}" for t in times[name])
        best = min(times[name])
        peer = med["tar cf"] if "no-fsync" in name or name == "tar cf" else med["tar cf + fsync"]
        lines.append(f"| {name} | {m:.2f} | {runs} | {n_bytes / 1e6 / m:.0f} | {tar / m:.2f}x | "
                     f"{tar_best / best:.2f}x | {peer / m:.2f}x | "
                     f"{statistics.median(cpus[name]):.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench_pack_"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        measured = _measure(args, work)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    text = _report(args, argv, *measured)
    print(text)
    if args.out:
        with open(args.out, "a") as f:
            f.write("\n" + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
