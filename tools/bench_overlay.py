#!/usr/bin/env python
"""The loader with a label overlay against without (issue 30), side by side on one pack:

  (a) base     - CARLAWebData(BASE, batch_size=B, image_size=(H, W))
  (b) overlay  - the same with overlays=[a simlingo_commentary overlay of BASE] (entries on
                 about `--coverage` of the samples, null on the rest): the overlay's shards
                 read in step, each entry parsed and put in batch.fields
  (c) required - (b) with overlay_required=True: only the samples with an entry (fewer
                 samples, so compared per sample, not per epoch)

for each num_workers in --workers-list. Each measurement runs in a fresh process, timed from
after its imports to the last batch of --epochs epochs (worker start-up included), and the
kinds alternate within each repeat, each one first in turn (a b c, b c a, c a b, ...), so
that drift and a cold first run on a shared machine hit them alike; the table gives the
median samples/s of the repeats and the ratios to (a).

    .venv/bin/python tools/bench_overlay.py --workdir /tmp/bench_overlay [--episodes 4 --frames 60]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import cells

KINDS = ("base", "overlay", "required")


def prepare(workdir: Path, episodes: int, frames: int, size: tuple[int, int],
            coverage: float) -> None:
    """The garage pack (packed from <workdir>/data, as SimLingo's tree) and its overlay."""
    if (workdir / "overlay" / "manifest.json").is_file():
        return
    from carla_wds.pack import PackOptions, pack
    from carla_wds.pack.overlay import pack_overlay
    from carla_wds.pack.synth import synth_dataset
    from carla_wds.pack.synth.overlays import synth_overlay
    routes = synth_dataset(workdir / "data", "garage", episodes=episodes, frames=frames,
                           image_size=size, progress=False)
    pack(workdir / "data", workdir / "shards", PackOptions.of(
        layout="garage", max_samples=max(8, episodes * frames // 8), all_frames=True,
        progress=False))
    synth_overlay(workdir / "commentary", "simlingo_commentary", routes, workdir / "data",
                  coverage=coverage)
    print(pack_overlay(workdir / "commentary", workdir / "shards", workdir / "overlay",
                       "simlingo_commentary").line()[:200], flush=True)


def child(args: argparse.Namespace) -> None:
    """One measurement: --epochs epochs of one kind; prints {"samples", "seconds"}."""
    from carla_wds import CARLAWebData
    workdir = Path(args.workdir)
    extra = {} if args.child == "base" else {"overlays": [str(workdir / "overlay")],
                                             "overlay_required": args.child == "required"}
    t0 = time.perf_counter()
    data = CARLAWebData(str(workdir / "shards"), batch_size=args.batch_size,
                        num_workers=args.workers, image_size=tuple(args.image_size), **extra)
    samples = 0
    for epoch in range(args.epochs):
        data.set_epoch(epoch)
        for batch in data:
            samples += int(batch.valid.sum())
            if args.child != "base":   # the text is there, as a training step would read it
                assert len(batch.fields["simlingo_commentary"]) == len(batch)
    print(json.dumps({"samples": samples, "seconds": time.perf_counter() - t0}))


def measure(args: argparse.Namespace, kind: str, workers: int) -> float:
    out = cells.run([sys.executable, __file__, "--child", kind, "--workers", str(workers),
                     "--workdir", args.workdir, "--batch-size", str(args.batch_size),
                     "--epochs", str(args.epochs), "--image-size", *map(str, args.image_size)],
                    check=True)
    run = json.loads(out.stdout.strip().splitlines()[-1])
    return run["samples"] / run["seconds"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workdir", default="/tmp/bench_overlay")
    p.add_argument("--episodes", type=int, default=4)
    p.add_argument("--frames", type=int, default=60)
    p.add_argument("--image-size", type=int, nargs=2, default=(256, 512), metavar=("H", "W"),
                   help="the cameras' size as synthesised and as loaded")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--coverage", type=float, default=0.5)
    p.add_argument("--epochs", type=int, default=3, help="epochs per measurement")
    p.add_argument("--workers-list", default="0,2")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--workers", type=int, default=0, help=argparse.SUPPRESS)
    return p


def main() -> None:
    args = _parser().parse_args()
    if args.child:
        child(args)
        return
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    prepare(workdir, args.episodes, args.frames, tuple(args.image_size), args.coverage)
    workers_list = [int(w) for w in args.workers_list.split(",")]
    rates = {(k, w): [] for k in KINDS for w in workers_list}
    for r in range(args.repeats):
        for w in workers_list:
            for kind in KINDS[r % 3:] + KINDS[:r % 3]:   # each kind first in turn
                rates[kind, w].append(measure(args, kind, w))
    print(f"\nsamples/s, median of {args.repeats} ({args.epochs} epochs each, fresh process)")
    print("| workers | base | overlay | required | overlay / base | required / base |")
    print("|---|---|---|---|---|---|")
    for w in workers_list:
        med = {k: statistics.median(rates[k, w]) for k in KINDS}
        print(f"| {w} | {med['base']:.1f} | {med['overlay']:.1f} | {med['required']:.1f} | "
              f"{med['overlay'] / med['base']:.2f}x | {med['required'] / med['base']:.2f}x |")


if __name__ == "__main__":
    main()
