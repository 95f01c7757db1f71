"""The main job on built-in data: synth -> pack -> verify -> inspect -> DDP train -> report.

    python tools/demo.py [--out runs/demo] [--nproc 2] [--episodes 12] [--frames 60]

Everything lands in OUT: raw routes, shards, and the run directory with metrics.jsonl,
checkpoint.pt, curves.png, predictions.png and summary.json.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def step(title: str, cmd: list[str]) -> None:
    print(f"\n== {title}\n$ {' '.join(cmd)}", flush=True)
    t0 = time.time()
    subprocess.run(cmd, check=True)
    print(f"   ({time.time() - t0:.1f} s)", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="runs/demo")
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--episodes", type=int, default=12)
    p.add_argument("--frames", type=int, default=60)
    p.add_argument("--image-size", default="150x200", help="synthetic camera HxW")
    args = p.parse_args()
    out = Path(args.out)
    if out.exists():
        shutil.rmtree(out)
    cli = [sys.executable, "-m", "carla_wds.cli"]
    started = time.time()
    for split, episodes, seed in (("train", args.episodes, 0), ("val", max(2, args.episodes // 4), 1)):
        step(f"synthesise {split} routes", [*cli, "synth", str(out / "raw" / split), "--layout",
             "transfuser4", "--episodes", str(episodes), "--frames", str(args.frames),
             "--seed", str(seed), "--image-size", args.image_size])
        step(f"pack {split}", [*cli, "pack", str(out / "raw" / split), str(out / "shards" / split),
             "--layout", "transfuser4", "--max-samples", "64", "--workers", "2"])
    step("verify (deep)", [*cli, "verify", "--deep", str(out / "shards" / "train")])
    step("inspect", [*cli, "inspect", str(out / "shards" / "train")])
    run_dir = out / "run"
    step(f"train tiny.yaml with torchrun x{args.nproc} (CPU, gloo)",
         [sys.executable, "-m", "torch.distributed.run", "--standalone",
          f"--nproc_per_node={args.nproc}", "-m", "carla_wds.train", "--config",
          "tiny", f"run_dir={run_dir}",
          f"data.train={out / 'shards' / 'train'}", f"data.val={out / 'shards' / 'val'}"])
    summary = json.loads((run_dir / "summary.json").read_text())
    val = summary["val"]
    print("\n== summary")
    print(f"run directory: {run_dir} (metrics.jsonl, checkpoint.pt, curves.png, predictions.png)")
    print(f"{summary['step']} steps on {summary['world_size']} ranks, "
          f"{summary['train_batches_per_rank']} batches per rank per epoch; steps per rank "
          f"{[r['steps'] for r in summary['ranks']]}")
    print(f"val ({val['n']} samples): model ADE {val['ade']:.3f} m, FDE {val['fde']:.3f} m | "
          f"straight-line baseline ADE {val['baseline_ade']:.3f} m, FDE {val['baseline_fde']:.3f} m")
    if "steer_mae" in val:
        print("TCP's PID controller vs the expert, MAE model (baseline): " + ", ".join(
            f"{c} {val[c + '_mae']:.3f} ({val['baseline_' + c + '_mae']:.3f})"
            for c in ("steer", "throttle", "brake")))
    from carla_wds.train.evaluate import baseline_verdict
    better = val["ade"] < val["baseline_ade"]
    print(f"model {baseline_verdict(val['ade'], val['baseline_ade'])}: ADE "
          f"{val['ade'] / val['baseline_ade']:.3f}x the baseline's; total "
          f"{time.time() - started:.0f} s")
    sys.exit(0 if better else 1)


if __name__ == "__main__":
    main()
