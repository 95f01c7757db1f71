#!/usr/bin/env python
"""Map vectors at load time (`Overlays(map=MAP_PACK)`), side by side in one run
(docs/benchmarks.md has the figures):

  cost    one eval epoch of CARLAWebData over a Bench2Drive pack at 0 workers, without the
          map pack, with it (VAD's and UniAD's map GT of every sample), and with each model's
          alone (Overlays(map_gt=...)); every side selects fields=["ego2world"] (the pose the
          map stage reads), so the differences are the map stage's. Each cell a fresh
          process, the sides in turn, the order reversed every other repeat; medians.
  memory  peak RSS of a process that opens the loader with the map pack (2 workers) over a
          manifest of N clips' shard entries (each a hard link of one real shard) and reads 4
          batches, for each N of --memory-clips (1k against 10k), beside the same loader
          without the map.

    .venv/bin/python tools/bench_map.py --workdir /tmp/bench_map [--clips 3 --frames 60]
        [--repeats 5] [--memory-clips 1000,10000] [--image-size HxW]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import bench_b2d
import cells

OUT_HW, BATCH = bench_b2d.OUT_HW, bench_b2d.BATCH


def make_data(work: Path, clips: int, frames: int, size: tuple[int, int] | None
              ) -> tuple[Path, Path]:
    """bench_b2d's synthetic clips packed at every frame, and the map pack of their towns'
    HD maps (the synth writes them beside the clips)."""
    from carla_wds.pack.datasets.bench2drive.hdmap_pack import pack_maps
    raw, shards = bench_b2d.make_data(work, clips, frames, size)
    maps = work / "maps"
    if not (maps / "maps.json").exists():
        pack_maps(raw / "maps", maps, allow_pickle=True, progress=False)
    return shards, maps


# a cost cell's side -> Overlays(map_gt=) (None: both models' map GT)
SIDES = {"without": None, "with": None, "vad": ("vad",), "uniad": ("uniad",)}
ROWS = {"without": "without the map", "with": "Overlays(map=...)",
        "vad": "Overlays(map=..., map_gt=('vad',))",
        "uniad": "Overlays(map=..., map_gt=('uniad',))"}


def loader(shards: Path, maps: Path | None, workers: int,
           map_gt: tuple[str, ...] | None = None):
    from carla_wds.load import CARLAWebData, Overlays
    return CARLAWebData(str(shards), batch_size=BATCH, num_workers=workers, image_size=OUT_HW,
                        mode="eval", fields=["ego2world"],
                        overlays=Overlays(map=str(maps), map_gt=map_gt) if maps else None)


def _cost_child(shards: Path, maps: Path | None, map_gt: tuple[str, ...] | None) -> str:
    """One cell: a warm-up epoch (page cache, the towns read once), then one timed epoch."""
    data = loader(shards, maps, 0, map_gt)
    list(data)
    t0, n = time.perf_counter(), 0
    for batch in data:
        n += int(batch.valid.sum())
    return json.dumps({"seconds": time.perf_counter() - t0, "samples": n})


def _memory_child(shards: Path, maps: Path | None, work: Path, clips: int) -> float:
    """Peak RSS (MB) of a loader (with the map pack or without) over `clips` shard entries,
    4 batches read."""
    folder = bench_b2d.linked_manifest(shards, work, clips)
    return bench_b2d.peak_rss_reading(lambda: loader(folder, maps, 2))


def _child(work: Path, args: list[str]) -> str:
    out = cells.run([sys.executable, __file__, "--workdir", str(work), *args], check=True)
    return out.stdout.strip().splitlines()[-1]


def bench_cost(work: Path, repeats: int) -> list[str]:
    runs: dict[str, list[float]] = {side: [] for side in SIDES}
    n = 0
    for i in range(repeats):   # the sides in turn, the order reversed every other repeat
        for side in (list(SIDES) if i % 2 == 0 else list(SIDES)[::-1]):
            cell = json.loads(_child(work, ["--child-cost", side]))
            runs[side].append(cell["seconds"] / cell["samples"] * 1e3)
            n = cell["samples"]
    rows = [f"{n} samples an epoch, 0 workers, median of {repeats} (range)",
            "| loader | ms a sample | map stage's share of a sample's load time |",
            "|---|---|---|"]
    base = statistics.median(runs["without"])
    for side, ms in runs.items():
        m = statistics.median(ms)
        share = " " if side == "without" else f" {(m - base) / m:.1%} "
        rows.append(f"| {ROWS[side]} | {m:.2f} ({min(ms):.2f}-{max(ms):.2f}) |{share}|")
    return rows


def bench_memory(work: Path, clip_counts: list[int]) -> list[str]:
    rows = ["| clips (shard entries) | loader, 2 workers, peak RSS MB: without the map | "
            "with Overlays(map=...) |", "|---|---|---|"]
    for clips in clip_counts:
        mb = [float(_child(work, ["--child-memory", str(clips), "--side", side]))
              for side in ("without", "with")]
        rows.append(f"| {clips} | {mb[0]:.0f} | {mb[1]:.0f} |")
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workdir", required=True)
    p.add_argument("--clips", type=int, default=3)
    p.add_argument("--frames", type=int, default=60)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--parts", default="cost,memory")
    p.add_argument("--image-size", default=None, help="HxW of the synthetic cameras (smoke "
                   "tests); default B2D's 900x1600")
    p.add_argument("--memory-clips", default="1000,10000")
    p.add_argument("--child-cost", choices=tuple(SIDES), help=argparse.SUPPRESS)
    p.add_argument("--child-memory", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--side", choices=("with", "without"), default="with",
                   help=argparse.SUPPRESS)
    args = p.parse_args()
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    size = tuple(int(v) for v in args.image_size.split("x")) if args.image_size else None
    shards, maps = make_data(work, args.clips, args.frames, size)
    if args.child_cost:
        print(_cost_child(shards, None if args.child_cost == "without" else maps,
                          SIDES[args.child_cost]))
        return
    if args.child_memory is not None:
        print(_memory_child(shards, maps if args.side == "with" else None, work,
                            args.child_memory))
        return
    parts = args.parts.split(",")
    if "cost" in parts:
        print("\n## map vectors: load time with and without the map pack\n")
        print("\n".join(bench_cost(work, args.repeats)))
    if "memory" in parts:
        print("\n## memory with the map pack\n")
        print("\n".join(bench_memory(work, [int(c) for c in args.memory_clips.split(",")])))


if __name__ == "__main__":
    main()
