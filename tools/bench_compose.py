#!/usr/bin/env python
"""Composed options against each alone: does a pair cost more than its parts?

On one pack (tcp_roach synth, the `tcp` adapter's layout), samples/s of

  plain    - CARLAWebData(SHARDS)
  history  - the same with history=K (each sample with its K earlier frames)
  mix      - CARLAWebData(mix=...): two entries over the same shards, split by the speed
             bucket (stopped and slow against the rest), each weighted by its size, so it
             serves as many samples as plain
  hist_mix - the mix with history=K
  adapter  - CARLAWebData(SHARDS, adapter="tcp"): TCP's own batch dict
  adp_hist - adapter="tcp" with history=K

for each num_workers in --workers-list. Each measurement runs in a fresh process, timed from
the loader's construction (after its imports) to the last batch of --epochs epochs, and checked
against len() x batch. The kinds alternate within each repeat, each one first in turn (a b c
..., b c ... a, ...), so drift on a shared machine hits them alike; the tables give medians and
the range over repeats.

The pair's cost is its seconds per sample; "pair / slower part" divides it by the slower
part's (1.00x: the pair costs what its dearer part costs; above 1: more), and "pair / sum of
parts" by plain's plus each part's extra over plain (what the pair would cost if the two
costs simply added; above 1: the pair costs more than its parts together). Ranges are over
the per-repeat ratios (same repeat, same drift).

    .venv/bin/python tools/bench_compose.py --workdir /tmp/bench_compose [--repeats 5]
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

KINDS = ("plain", "history", "mix", "hist_mix", "adapter", "adp_hist")
# pair -> its two parts
PAIRS = {"hist_mix": ("history", "mix"), "adp_hist": ("adapter", "history")}
NAMES = {"hist_mix": "history x mix", "adp_hist": "adapter x history"}


def prepare(workdir: Path, args: argparse.Namespace) -> Path:
    """The tcp_roach routes and their pack, made once in --workdir."""
    from carla_wds.pack import PackOptions, pack
    from carla_wds.pack.synth import synth_dataset
    raw, shards = workdir / "raw", workdir / "shards"
    if not raw.exists():
        synth_dataset(raw, "tcp_roach", episodes=args.episodes, frames=args.frames, seed=0,
                      image_size=tuple(args.image_size), progress=False)
    if not (shards / "manifest.json").exists():
        pack(raw, shards, PackOptions(layout="tcp_roach", max_samples=args.shard_samples,
                                      route_shards=True, allow_pickle_input=True,
                                      overwrite=True, progress=False, fsync=False))
    return shards


def loader(kind: str, shards: Path, args: argparse.Namespace):
    from carla_wds import CARLAWebData
    kw = {"batch_size": args.batch, "num_workers": args.workers, "seed": 0}
    if kind in ("history", "hist_mix", "adp_hist"):
        kw["history"] = args.history
    if kind in ("adapter", "adp_hist"):
        kw["adapter"] = "tcp"
    if kind not in ("mix", "hist_mix"):
        return CARLAWebData(str(shards), **kw)
    sizes = json.loads((shards / "manifest.json").read_text())["buckets"]["sizes"]["speed"]
    low = [v for v in ("stopped", "slow") if v in sizes]
    rest = [v for v in sizes if v not in low]
    n_low = sum(sizes[v] for v in low)
    mix = {"entries": [{"source": str(shards), "where": {"speed": low}, "weight": n_low},
                       {"source": str(shards), "where": {"speed": rest},
                        "weight": sum(sizes.values()) - n_low}]}
    return CARLAWebData(mix=mix, **kw)


def child(args: argparse.Namespace) -> None:
    """One measurement: --epochs epochs of one kind; prints {"samples", "seconds"}."""
    import carla_wds.load.dataset  # noqa: F401 - imports are not loader time
    shards = Path(args.workdir) / "shards"
    t0 = time.perf_counter()
    data = loader(args.child, shards, args)
    samples = 0
    for epoch in range(args.epochs):
        data.set_epoch(epoch)
        for batch in data:
            valid = batch["valid"] if isinstance(batch, dict) else batch.valid
            samples += int(valid.sum())
    seconds = time.perf_counter() - t0
    expected = args.epochs * len(data) * args.batch
    data.close()
    if samples != expected:
        raise SystemExit(f"{args.child}: {samples} samples, expected epochs x len() x batch "
                         f"= {expected}")
    print(json.dumps({"samples": samples, "seconds": seconds}))


def measure(args: argparse.Namespace, kind: str, workers: int) -> float:
    """Seconds per sample of one fresh-process measurement."""
    cmd = [sys.executable, __file__, "--child", kind, "--workers", str(workers),
           "--workdir", args.workdir, "--batch", str(args.batch), "--history",
           str(args.history), "--epochs", str(args.epochs)]
    out = cells.run(cmd)
    if out.returncode != 0:
        raise SystemExit(f"{kind} at {workers} workers failed:\n{out.stderr[-3000:]}")
    run = json.loads(out.stdout.strip().splitlines()[-1])
    return run["seconds"] / run["samples"]


def _mid(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"


def _ratio(each: list[float], med: float) -> str:
    return f"{med:.2f}x ({min(each):.2f}-{max(each):.2f})"


def report(cost: dict[tuple[str, int], list[float]], workers_list: list[int]) -> None:
    """Two tables: samples/s of each kind, and each pair against its parts."""
    print("samples/s, median (range) of the repeats:\n")
    print("| workers | " + " | ".join(KINDS) + " |")
    print("|---:|" + "---:|" * len(KINDS))
    for w in workers_list:
        print(f"| {w} | " + " | ".join(_mid([1 / c for c in cost[k, w]]) for k in KINDS)
              + " |")
    print("\nEach pair's seconds per sample against its parts' (above 1.00x: the pair costs "
          "more):\n")
    print("| pair | workers | pair samples/s | slower part | pair / slower part | "
          "pair / sum of parts |")
    print("|---|---:|---:|---|---:|---:|")
    for pair, (a, b) in PAIRS.items():
        for w in workers_list:
            med = {k: statistics.median(cost[k, w]) for k in (pair, a, b, "plain")}
            slower = a if med[a] >= med[b] else b
            per = list(zip(cost[pair, w], cost[a, w], cost[b, w], cost["plain", w]))
            vs_slower = [p / max(x, y) for p, x, y, _ in per]
            vs_sum = [p / (x + y - z) for p, x, y, z in per]
            print(f"| {NAMES[pair]} | {w} | {_mid([1 / c for c in cost[pair, w]])} | {slower} "
                  f"| {_ratio(vs_slower, med[pair] / med[slower])} | "
                  f"{_ratio(vs_sum, med[pair] / (med[a] + med[b] - med['plain']))} |")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workdir", default="/tmp/bench_compose")
    p.add_argument("--episodes", type=int, default=3)
    p.add_argument("--frames", type=int, default=40)
    p.add_argument("--image-size", type=int, nargs=2, default=(256, 900), metavar=("H", "W"),
                   help="the synthetic camera's size (TCP's is 256x900)")
    p.add_argument("--shard-samples", type=int, default=64, help="samples per shard")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--history", type=int, default=2, help="earlier frames per window (K)")
    p.add_argument("--epochs", type=int, default=1, help="epochs per measurement")
    p.add_argument("--workers-list", default="0,2")
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
    workers_list = [int(w) for w in args.workers_list.split(",")]
    print(f"tcp_roach synth at {args.image_size[0]}x{args.image_size[1]}, {args.episodes} routes"
          f" x {args.frames} frames, {total} samples in shards of {args.shard_samples}; batch "
          f"{args.batch}, history={args.history}, {args.epochs} epochs per measurement; "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at the start; "
          f"{args.repeats} repeats, kinds rotated\n", flush=True)
    cost: dict[tuple[str, int], list[float]] = {(k, w): [] for k in KINDS for w in workers_list}
    for r in range(args.repeats):
        for w in workers_list:
            for kind in KINDS[r % len(KINDS):] + KINDS[:r % len(KINDS)]:   # each first in turn
                cost[kind, w].append(measure(args, kind, w))
    report(cost, workers_list)
    print(json.dumps({f"{k}-{w}": v for (k, w), v in cost.items()}))   # s/sample, each repeat
    print(f"\nload average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
