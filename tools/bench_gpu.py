#!/usr/bin/env python
"""GPU training throughput: ~200 steps of the shipped tcp config (resnet34, bf16, channels_last)
on full-size synthetic TCP shards (900x256 PNG), for several DataLoader worker counts.

    .venv/bin/python tools/bench_gpu.py --workdir /tmp/bench_gpu --steps 200 --workers 4,8,16

Prints samples/s, step time and the share of wall time spent waiting for data, from the
trainer's own metrics.jsonl (the first log window, which includes warm-up, is left out).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from multiprocessing import Pool
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _synth_one(args: tuple[str, int, int]) -> None:
    from carla_wds.pack.synth import synth_dataset
    out, episode, frames = args
    synth_dataset(Path(out) / f"part{episode:03d}", "tcp", episodes=1, frames=frames,
                  seed=episode, progress=False)


def prepare(workdir: Path, episodes: int, frames: int) -> None:
    from carla_wds.pack.packer import PackOptions, pack
    for split, n in (("train", episodes), ("val", 2)):
        raw = workdir / "raw" / split
        if not raw.exists():
            with Pool() as pool:   # one process per episode: full-size PNG encoding is slow
                pool.map(_synth_one, [(str(raw), e + (0 if split == "train" else 1000), frames)
                                      for e in range(n)])
        out = workdir / "shards" / split
        if not (out / "manifest.json").exists():
            pack(raw, out, PackOptions(layout="tcp", max_samples=256, overwrite=True))


def run(workdir: Path, workers: int, steps: int, extra: list[str]) -> dict:
    run_dir = workdir / f"run_w{workers}"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1",
           "-m", "carla_wds.train", "--config", "tcp",
           f"run_dir={run_dir}", "resume=none", f"max_steps={steps}", "epochs=1000",
           "eval_every=1000", "log_every=20", "show_samples=2", f"data.num_workers={workers}",
           f"data.train={workdir / 'shards/train'}", f"data.val={workdir / 'shards/val'}", *extra]
    subprocess.run(cmd, check=True)
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    windows = [x for x in lines if x["kind"] == "train"][1:]
    steps_per = [w["window_s"] / w["steps"] for w in windows]
    return {"samples_per_s": statistics.median(w["samples_per_s"] for w in windows),
            "step_s": statistics.median(steps_per),
            "wait_share": sum(w["data_wait_s"] for w in windows) / sum(w["window_s"] for w in windows)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workdir", default="/tmp/bench_gpu")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--workers", default="4,8,16")
    p.add_argument("--episodes", type=int, default=16)
    p.add_argument("--frames", type=int, default=104)
    p.add_argument("extra", nargs="*", help="more key=value overrides for the trainer")
    args = p.parse_args()
    workdir = Path(args.workdir)
    prepare(workdir, args.episodes, args.frames)
    print("| num_workers | samples/s | step time s | share waiting for data |")
    print("|---:|---:|---:|---:|")
    for w in (int(x) for x in args.workers.split(",")):
        r = run(workdir, w, args.steps, args.extra)
        print(f"| {w} | {r['samples_per_s']:.0f} | {r['step_s']:.3f} | "
              f"{100 * r['wait_share']:.0f}% |", flush=True)


if __name__ == "__main__":
    main()
