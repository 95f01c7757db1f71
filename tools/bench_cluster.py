#!/usr/bin/env python
"""Packing on a cluster (issue 31), measured; docs/benchmarks.md has the figures.

  parallel  one `carla-wds pack` of synthetic Bench2Drive archives (1600x900, as
            tools/bench_b2d.py) against the same input as a plan of --parts P packed by
            --procs processes at once (xargs -P, as `carla-wds slurm-script --xargs`'s runner),
            and by one process part after part; wall seconds, MB/s of archive, peak RSS of each
            process (ru_maxrss from wait4), median of --repeats.
  spread    max/mean bytes per part: the plan's greedy split against `--part i/N`'s slices,
            on lognormal clip sizes (Bench2Drive Full's 13,638 clips at its mean of 312 MB;
            the spread of real clip sizes is an assumption, so two sigmas are shown).
  merge     `merge --in-place` over a 1,000-part plan (one small real shard a part, hard
            links of one packed part): seconds and bytes written, with and without --deep,
            against the copying merge of the same parts.

    .venv/bin/python tools/bench_cluster.py --workdir /tmp/bench_cluster [--clips 8]
        [--frames 40] [--procs 2] [--parts 4] [--repeats 3] [--what parallel,spread,merge]
"""
from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import numpy as np

EXE = str(Path(sys.executable).parent / "carla-wds")


def _spawn(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen([EXE, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


CPU: list[float] = []   # CPU seconds (user + system) of every process reaped, in order


def _reap(proc: subprocess.Popen) -> float:
    """Wait for the process; its peak RSS in MB (Linux ru_maxrss is in KB). Its CPU seconds
    go to CPU: on a machine other jobs share, CPU seconds per MB is the steadier figure."""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"{proc.args} failed ({proc.returncode})")
    CPU.append(usage.ru_utime + usage.ru_stime)
    return usage.ru_maxrss / 1024


def _run_parts(archives: Path, out: Path, parts: int, procs: int) -> list[float]:
    """Every part of out's plan, `procs` processes at a time; each process's peak RSS."""
    todo, running, rss = list(range(parts)), [], []
    while todo or running:
        while todo and len(running) < procs:
            running.append(_spawn(["pack", str(archives), str(out), "--layout", "bench2drive",
                                   "--plan", str(out / "plan.json"), "--part",
                                   str(todo.pop(0))]))
        rss.append(_reap(running.pop(0)))
    return rss


def bench_parallel(work: Path, clips: int, frames: int, parts: int, procs: int,
                   repeats: int, image_size: tuple[int, int] | None = None) -> list[str]:
    from carla_wds.pack.synth import synth_dataset
    raw = work / "raw"
    if not (raw / "archives").is_dir():
        sized = {"image_size": image_size} if image_size else {}
        synth_dataset(raw, "bench2drive", episodes=clips, frames=frames, seed=0, progress=False,
                      **sized)
    archives = raw / "archives"
    size = sum(p.stat().st_size for p in archives.iterdir())
    times: dict[str, list[float]] = {}
    rss: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    cells = {"one process, whole input": None, f"{parts} parts, 1 process": 1,
             f"{parts} parts, {procs} processes": procs}
    for _ in range(repeats):
        for name, n in cells.items():
            out = work / "out"
            shutil.rmtree(out, ignore_errors=True)
            t0, before = time.perf_counter(), len(CPU)
            if n is None:
                got = [_reap(_spawn(["pack", str(archives), str(out), "--layout",
                                     "bench2drive"]))]
            else:
                subprocess.run([EXE, "plan", str(archives), str(out), "--layout", "bench2drive",
                                "--parts", str(parts)], check=True, capture_output=True)
                got = _run_parts(archives, out, parts, n)
            times.setdefault(name, []).append(time.perf_counter() - t0)
            rss.setdefault(name, []).extend(got)
            cpu.setdefault(name, []).append(sum(CPU[before:]))
    # what a part's process costs beyond its data: start, imports, plan read, a done check
    t0 = time.perf_counter()
    _reap(_spawn(["pack", str(archives), str(work / "out"), "--layout", "bench2drive",
                  "--plan", str(work / "out" / "plan.json"), "--part", "0"]))
    fixed = time.perf_counter() - t0
    one = statistics.median(times["one process, whole input"])
    rows = [f"{clips} clips, {size / 1e6:.0f} MB of .tar.gz; median of {repeats} "
            "(plan included in the parts' time)",
            "| run | wall s | MB/s of archive | speed vs one process | CPU s | MB per CPU s | "
            "peak RSS per process MB |", "|---|---|---|---|---|---|---|"]
    for name, ts in times.items():
        m, c = statistics.median(ts), statistics.median(cpu[name])
        rows.append(f"| {name} | {m:.2f} | {size / 1e6 / m:.1f} | {one / m:.2f}x | {c:.2f} | "
                    f"{size / 1e6 / c:.1f} | {min(rss[name]):.0f}-{max(rss[name]):.0f} |")
    rows.append(f"a part's process with nothing to do (start, imports, plan): {fixed:.2f} s "
                f"wall, {CPU[-1]:.2f} CPU s; load average {os.getloadavg()[0]:.1f} on "
                f"{os.cpu_count()} CPUs")
    return rows


def bench_spread(clips: int = 13638) -> list[str]:
    from carla_wds.pack.plan_parts import greedy_parts
    from carla_wds.pack.routes import select_part
    rows = ["| sigma | clips | P | --part i/N max/mean | plan max/mean | plan min/mean |",
            "|---|---|---|---|---|---|"]
    for sigma in (0.5, 1.0):
        rng = np.random.default_rng(0)
        raw = rng.lognormal(0, sigma, clips)
        sizes = {f"clip{i:05d}": int(s) for i, s in enumerate(raw * 312e6 / raw.mean())}
        names = sorted(sizes)
        for parts in (64, 256, 1024):
            mean = sum(sizes.values()) / parts
            sliced = [sum(sizes[n] for n in select_part(names, (i, parts)))
                      for i in range(parts)]
            planned = [sum(sizes[n] for n in p) for p in greedy_parts(sizes, parts)]
            rows.append(f"| {sigma} | {len(sizes)} | {parts} | {max(sliced) / mean:.3f} | "
                        f"{max(planned) / mean:.4f} | {min(planned) / mean:.4f} |")
    return rows


def _thousand_parts(work: Path, parts: int) -> Path:
    """OUT of a `parts`-part plan: each part a copy of one real packed part under other
    route names."""
    from carla_wds.pack.plan_parts import FORMAT, part_dir
    from carla_wds.pack.synth import synth_dataset
    out = work / "merge_out"
    shutil.rmtree(out, ignore_errors=True)
    raw, seed_out = work / "merge_raw", work / "merge_seed"
    if not raw.is_dir():
        synth_dataset(raw, "tcp", episodes=1, frames=12, seed=0, image_size=(24, 32),
                      progress=False)
    shutil.rmtree(seed_out, ignore_errors=True)
    subprocess.run([EXE, "pack", str(raw), str(seed_out), "--max-samples", "4"], check=True,
                   capture_output=True)
    seed = json.loads((seed_out / "manifest.json").read_text())
    for i in range(parts):
        folder = out / part_dir(i, parts)
        folder.mkdir(parents=True)
        shards = [_renamed(seed_out / s["name"], folder / s["name"], s, f"p{i:05d}")
                  for s in seed["shards"]]
        doc = {**seed, "shards": shards, "pack_args": {**seed["pack_args"], "part": [i, parts]}}
        (folder / "manifest.json").write_text(json.dumps(doc))
    plan = {"format": FORMAT, "layout": "tcp", "input": str(raw), "dataset_options": {},
            "parts": parts, "episodes": parts, "bytes": 0, "fingerprint": "", "names": "",
            "part_list": [{"part": i, "dir": part_dir(i, parts), "bytes": 0, "episodes": {}}
                          for i in range(parts)]}
    (out / "plan.json").write_text(json.dumps(plan))
    return out


def _renamed(src: Path, dst: Path, record: dict, tag: str) -> dict:
    """A copy of a seed shard whose samples are another route's (the route name + tag): merge
    refuses one sample in two parts, so each part holds its own bytes and keys."""
    def rename(name: str) -> str:
        town, route, rest = name.split("__", 2)
        return f"{town}__{route}{tag}__{rest}"
    with tarfile.open(src) as tin, tarfile.open(dst, "w", format=tarfile.USTAR_FORMAT) as tout:
        for member in tin:
            data = tin.extractfile(member).read()
            member.name = rename(member.name)
            tout.addfile(member, io.BytesIO(data))
    digest = hashlib.sha256(dst.read_bytes()).hexdigest()
    return {**record, "first_key": rename(record["first_key"]),
            "last_key": rename(record["last_key"]), "bytes": dst.stat().st_size,
            "sha256": digest}


def bench_merge(work: Path, parts: int, repeats: int) -> list[str]:
    from carla_wds.pack.inplace import merge_in_place
    from carla_wds.pack.merge import merge
    out = _thousand_parts(work, parts)
    shard_bytes = sum(p.stat().st_size for p in out.rglob("*.tar"))
    rows = [f"{parts} parts, {sum(1 for _ in out.rglob('*.tar'))} shards, "
            f"{shard_bytes / 1e6:.1f} MB of shards; median of {repeats}",
            "| merge | s | manifest bytes written | files written |", "|---|---|---|---|"]
    runs = {"--in-place": lambda: merge_in_place(str(out)),
            "--in-place --deep": lambda: merge_in_place(str(out), deep=True),
            "copying merge --out (hard links here; hashes every shard)":
                lambda: merge([str(out / f"parts/{i:05d}") for i in range(parts)],
                              work / "merged_copy")}
    for name, call in runs.items():
        ts = []
        for _ in range(repeats):
            shutil.rmtree(work / "merged_copy", ignore_errors=True)
            (out / "manifest.json").unlink(missing_ok=True)
            os.sync()
            t0 = time.perf_counter()
            doc = call()
            ts.append(time.perf_counter() - t0)
        where = work / "merged_copy" if "copying" in name else out
        files = len(list(where.glob("*"))) if "copying" in name else 1
        rows.append(f"| {name} | {statistics.median(ts):.2f} | "
                    f"{(where / 'manifest.json').stat().st_size:,} | {files} |")
        assert doc["total_samples"] > 0
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", type=Path, required=True)
    ap.add_argument("--clips", type=int, default=8)
    ap.add_argument("--frames", type=int, default=40)
    ap.add_argument("--parts", type=int, default=4)
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--merge-parts", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--what", default="parallel,spread,merge")
    # Bench2Drive's base set has 13,638 clips; --part i/N is O(clips) a part, so a smaller
    # count keeps the smoke run (the docs test) short
    ap.add_argument("--spread-clips", type=int, default=13638)
    # the synthesised clips' camera size, HxW (default: Bench2Drive's 900x1600); the smoke
    # run's small images synthesise in seconds, not a minute and a half
    ap.add_argument("--image-size", type=lambda v: tuple(int(x) for x in v.split("x")),
                    default=None)
    a = ap.parse_args()
    a.workdir.mkdir(parents=True, exist_ok=True)
    what = a.what.split(",")
    if "spread" in what:
        print("\n".join(bench_spread(a.spread_clips)), flush=True)
    if "merge" in what:
        print("\n".join(bench_merge(a.workdir, a.merge_parts, a.repeats)), flush=True)
    if "parallel" in what:
        print("\n".join(bench_parallel(a.workdir, a.clips, a.frames, a.parts, a.procs,
                                       a.repeats, a.image_size)), flush=True)


if __name__ == "__main__":
    main()
