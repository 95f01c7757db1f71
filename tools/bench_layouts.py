#!/usr/bin/env python
"""carla_garage frames, all modalities: carla-wds from shards against a per-file reader of the
raw folders, side by side; and LiDAR kept as LAZ bytes against LiDAR stored as float32 npy.

Readers, on the same frames (the packed samples' (route, frame) list) and the same output:
  (a) carla-wds - CARLAWebData(shards, batch_size=B, num_workers=w, image_size=camera size,
                  fields=FIELDS): cameras, depth, semantics, bev, lidar, boxes, measurements
                  and the core labels, all decoded.
  (b) per-file  - a torch Dataset + torch DataLoader (same B, w, shuffle, drop_last) doing the
                  decode work of carla_garage's team_code/data.py per sample: the current and
                  the 8 future measurements/NNNN.json.gz (waypoints from ego_matrix, full 3x3
                  rotation), cv2 for rgb JPEG and the depth, semantics and bev_semantics PNGs,
                  laspy for lidar/NNNN.laz, gzip JSON for boxes/NNNN.json.gz (to the same
                  (K,12) table), and the same padded batch (lidar, boxes with _len counts).
Before timing, one batch of (a) is compared with (b) key by key (pixels, depth, classes,
points, boxes, waypoints, target point, route): the two do the same work to the same result.

Each cell is a fresh process, imports done before the clock: one untimed warm-up epoch, then
--epochs timed epochs (fresh workers each epoch, for both). Cells run back to back per worker
count, the order reversed every other repeat (ABBA); median of --repeats, and the per-repeat
ratio range. CPU ms/sample sums the process and its workers (getrusage).

LiDAR: the built-in garage layout decodes lidar/NNNN.laz once at pack time into float32 (N,3)
npy (read: laz_points, codec "points"), which this benchmark's first measurement decided. The
LAZ variant packs the same raw folders with a copy of garage.yaml whose lidar sensor keeps the
LAZ bytes (codec "laz", laspy + lazrs on load). Reported: per-sample decode time of the two codecs on the same clouds (in this
process), the member and shard bytes, and the loader's samples/s with fields=["lidar"] on both
packs (the front camera is decoded too: CARLAWebData always decodes at least one camera).
Synthetic clouds are small (about 3k points); the same codecs are also timed on about 40k-point
clouds (consecutive synthetic frames stacked; real garage frames are about that size).

    .venv/bin/python tools/bench_layouts.py --workdir /tmp/bench_layouts --episodes 8 --frames 60
"""
from __future__ import annotations

import argparse
import json
import resource
import sys
import tarfile
import time
from pathlib import Path

from bench_layouts_decode import FIELDS, PerFileGarage, breakdown, check_same, collate, lidar_codecs
import cells
from proc_stats import children_cpu, cpu_seconds, steal_seconds

# --------------------------------------------------------------------------------------------
# timed cells, each in a fresh process
# --------------------------------------------------------------------------------------------

def _loader(args: argparse.Namespace, workdir: Path):
    info = json.loads((workdir / "frames.json").read_text())
    size = tuple(info["image_size"])
    if args.child == "perfile":
        import torch
        from torch.utils.data import DataLoader
        ds = PerFileGarage(workdir / "raw", [tuple(f) for _, *f in info["frames"]], size)
        gen = torch.Generator().manual_seed(0)
        dl = DataLoader(ds, batch_size=args.batch, shuffle=True, drop_last=True,
                        num_workers=args.workers, collate_fn=collate, generator=gen)
        return dl, lambda epoch: None, lambda b: len(b["keys"])
    import carla_wds.load.dataset  # noqa: F401 (imports before the clock)
    from carla_wds import CARLAWebData
    data = CARLAWebData(str(workdir / args.shards), batch_size=args.batch,
                        num_workers=args.workers, image_size=size, fields=args.fields.split(","))
    return data, data.set_epoch, len


def child(args: argparse.Namespace) -> None:
    import cv2  # noqa: F401
    import laspy  # noqa: F401
    import torch  # noqa: F401
    loader, set_epoch, count = _loader(args, Path(args.workdir))

    def epoch(e: int) -> int:
        set_epoch(e)
        return sum(count(b) for b in loader)

    epoch(0)   # warm-up, untimed: page cache, lazy imports, allocator
    cpu0 = cpu_seconds(resource.RUSAGE_SELF) + children_cpu()
    steal0 = steal_seconds()
    t0 = time.perf_counter()
    n = sum(epoch(e) for e in range(1, args.epochs + 1))
    seconds = time.perf_counter() - t0
    cpu = cpu_seconds(resource.RUSAGE_SELF) + children_cpu() - cpu0
    print(json.dumps({"samples": n, "seconds": seconds, "cpu": cpu,
                      "steal": steal_seconds() - steal0}))


def measure(workdir: Path, kind: str, workers: int, batch: int, epochs: int,
            shards: str = "shards", fields: str = ",".join(FIELDS)) -> dict:
    cmd = [sys.executable, __file__, "--child", kind, "--workers", str(workers),
           "--batch", str(batch), "--epochs", str(epochs), "--workdir", str(workdir),
           "--shards", shards, "--fields", fields]
    proc = cells.run(cmd)
    if proc.returncode != 0:
        raise SystemExit(f"{kind} workers={workers} failed:\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["rate"] = result["samples"] / result["seconds"]
    return result


# --------------------------------------------------------------------------------------------
# data: synth, pack, the npy LiDAR variant, the frame list
# --------------------------------------------------------------------------------------------

def _laz_layout(workdir: Path) -> Path:
    """garage.yaml with its lidar sensor keeping the LAZ bytes (codec laz), for the LiDAR
    comparison: the built-in layout decodes them once at pack time into float32 npy."""
    from carla_wds.pack.datasets.routes import layouts
    text = (Path(layouts.__file__).parent / "layouts" / "garage.yaml").read_text()
    old = "lidar: {folder: lidar, ext: laz, codec: points, read: laz_points}"
    if old not in text:
        raise SystemExit(f"garage.yaml has no line {old!r}; update bench_layouts._laz_layout")
    path = workdir / "garage_laz.yaml"
    path.write_text(text.replace("name: garage", "name: garage_laz")
                    .replace(old, "lidar: {folder: lidar, ext: laz, codec: laz}"))
    return path


def prepare(workdir: Path, episodes: int, frames: int, image_size: str | None) -> None:
    from carla_wds.pack.packer import PackOptions, pack
    from carla_wds.pack.synth import synth_dataset
    raw = workdir / "raw"
    if not raw.exists():
        # HxW, as every size option and synth_dataset's image_size
        size = tuple(int(v) for v in image_size.split("x")) if image_size else None
        synth_dataset(raw, "garage", episodes=episodes, frames=frames, seed=0, image_size=size,
                      progress=False)
    if not (workdir / "shards" / "manifest.json").exists():
        # every frame with a future, as before garage's own sample rule (short bench routes)
        pack(raw, workdir / "shards", PackOptions(layout="garage", overwrite=True,
                                                  progress=False, all_frames=True))
    if not (workdir / "shards_laz" / "manifest.json").exists():
        pack(raw, workdir / "shards_laz", PackOptions(layout=str(_laz_layout(workdir)),
                                                      overwrite=True, progress=False,
                                                      all_frames=True))
    manifest = json.loads((workdir / "shards" / "manifest.json").read_text())
    found = []
    for name in [s["name"] for s in manifest["shards"]]:
        with tarfile.open(workdir / "shards" / name) as tar:
            for m in tar:
                if m.name.endswith(".meta.json"):
                    meta = json.loads(tar.extractfile(m).read())
                    found.append((m.name[:-len(".meta.json")], meta["episode"], meta["frame"]))
    (workdir / "frames.json").write_text(json.dumps({
        "image_size": manifest["image_sizes"]["front"], "frames": sorted(found)}))


# --------------------------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------------------------

def _mid(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def _interleaved(repeats: int, cells: list[tuple], run) -> dict[tuple, list[dict]]:
    """Each cell `repeats` times, in order then reversed (ABBA), results by cell."""
    runs: dict[tuple, list[dict]] = {}
    for r in range(repeats):
        for cell in cells if r % 2 == 0 else cells[::-1]:
            runs.setdefault(cell, []).append(run(*cell))
    return runs


def _row_pair(runs: dict, a: tuple, b: tuple) -> tuple[float, float, list[float]]:
    """Median rates of a and b, and the sorted per-repeat ratios b/a."""
    ra, rb = runs[a], runs[b]
    return (_mid([x["rate"] for x in ra]), _mid([x["rate"] for x in rb]),
            sorted(y["rate"] / x["rate"] for x, y in zip(ra, rb)))


def _cpu_ms(results: list[dict]) -> float:
    return _mid([r["cpu"] / r["samples"] * 1e3 for r in results])


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workdir", default="/tmp/bench_layouts")
    p.add_argument("--episodes", type=int, default=8)
    p.add_argument("--frames", type=int, default=60)
    p.add_argument("--image-size", default=None, help="HxW for synth (default 256x1024)")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--epochs", type=int, default=1, help="timed epochs per cell (after 1 warm-up)")
    p.add_argument("--workers-list", default="0,1,2")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--no-lidar", action="store_true", help="skip the LAZ vs npy part")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--workers", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--shards", default="shards", help=argparse.SUPPRESS)
    p.add_argument("--fields", default=",".join(FIELDS), help=argparse.SUPPRESS)
    return p


def _readers_table(args: argparse.Namespace, workers: list[int], run) -> None:
    """Both readers' samples/s and CPU per sample, per worker count, and the median steal."""
    cells = [(kind, wk) for wk in workers for kind in ("perfile", "ours")]
    runs = _interleaved(args.repeats, cells, run)
    print("| workers | per-file samples/s | carla-wds samples/s | carla-wds / per-file | "
          "per repeat | per-file CPU ms/sample | carla-wds CPU ms/sample | CPU per-file / "
          "carla-wds |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for wk in workers:
        a, b, each = _row_pair(runs, ("perfile", wk), ("ours", wk))
        cpu_a, cpu_b = _cpu_ms(runs[("perfile", wk)]), _cpu_ms(runs[("ours", wk)])
        print(f"| {wk} | {a:.1f} | {b:.1f} | {b / a:.2f}x | {each[0]:.2f}-{each[-1]:.2f}x | "
              f"{cpu_a:.1f} | {cpu_b:.1f} | {cpu_a / cpu_b:.2f}x |", flush=True)
    steal = _mid([r["steal"] for rs in runs.values() for r in rs])
    print(f"\nsteal during a cell (median): {steal:.2f} s")


def _breakdown_table(workdir: Path, repeats: int) -> None:
    print("\nWhere the time goes: decode per sample, in one process, ms (per-file: the file "
          "read and decode as above; carla-wds: its codec's decode of the member bytes):\n")
    print("| step | per-file ms | carla-wds ms |\n|---|---:|---:|")
    total = [0.0, 0.0]
    for label, a, b in breakdown(workdir, repeats):
        total = [total[0] + a, total[1] + b]
        print(f"| {label} | {a:.2f} | {b:.2f} |")
    print(f"| sum | {total[0]:.2f} | {total[1]:.2f} |", flush=True)


def _lidar_codec_table(workdir: Path, repeats: int) -> None:
    import laspy
    print(f"\nlaspy {laspy.__version__}, LAZ backend {laspy.LazBackend.detect_available()[0].name}")
    print("\nLiDAR, the same clouds as LAZ bytes (codec laz) and float32 npy (codec points): "
          "decode us per sample (median of repeats), bytes per sample. The default garage "
          "pack stores (N,3) npy (read: laz_points); the LAZ pack keeps the source bytes:\n")
    print("| clouds | n | points | LAZ us | npy (N,3) us | npy (N,4) us | LAZ / npy (N,3) time | "
          "LAZ bytes | npy (N,3) bytes | npy (N,4) bytes | npy (N,3) / LAZ bytes |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in lidar_codecs(workdir, max(repeats, 5)):
        print(f"| {r['clouds']} | {r['n']} | {r['points']:.0f} | {r['laz_us']:.0f} | "
              f"{r['npy3_us']:.0f} | {r['npy4_us']:.0f} | {r['laz_us'] / r['npy3_us']:.1f}x | "
              f"{r['laz_bytes']:.0f} | {r['npy3_bytes']:.0f} | {r['npy4_bytes']:.0f} | "
              f"{r['npy3_bytes'] / r['laz_bytes']:.2f}x |")
    sizes = {name: sum(s["bytes"] for s in json.loads(
        (workdir / name / "manifest.json").read_text())["shards"]) for name in ("shards_laz",
                                                                               "shards")}
    print(f"\nshard bytes, all members: LAZ pack {sizes['shards_laz'] / 1e6:.1f} MB, npy pack "
          f"{sizes['shards'] / 1e6:.1f} MB ({sizes['shards'] / sizes['shards_laz']:.2f}x)")


def _lidar_loader_table(repeats: int, workers: list[int], run) -> None:
    lidar_cells = [(kind, wk, shards, "lidar") for wk in workers
                   for kind, shards in (("ours", "shards_laz"), ("ours", "shards"))]
    runs = _interleaved(repeats, lidar_cells, run)
    print("\nLoader, fields=['lidar'] (+ the front camera), samples/s; npy pack (N,3):\n")
    print("| workers | LAZ pack | npy pack | npy / LAZ | per repeat |\n|---:|---:|---:|---:|---:|")
    for wk in workers:
        a, b, each = _row_pair(runs, ("ours", wk, "shards_laz", "lidar"),
                               ("ours", wk, "shards", "lidar"))
        print(f"| {wk} | {a:.1f} | {b:.1f} | {b / a:.2f}x | {each[0]:.2f}-{each[-1]:.2f}x |",
              flush=True)


def _workdir(args: argparse.Namespace) -> tuple[Path, dict]:
    """The work folder, with the data prepared, and its frame list."""
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    prepare(workdir, args.episodes, args.frames, args.image_size)
    return workdir, json.loads((workdir / "frames.json").read_text())


def main() -> None:
    args = _parser().parse_args()
    if args.child:
        return child(args)
    workdir, info = _workdir(args)
    n = len(info["frames"])
    h, w = info["image_size"]
    workers = [int(x) for x in args.workers_list.split(",")]
    print(f"garage synth: {n} samples, camera {w}x{h} (output {w}x{h}), batch {args.batch}, "
          f"{n // args.batch * args.batch} samples per epoch; fields {FIELDS}")
    print(f"same result: {check_same(workdir, args.batch)} equal between the readers")
    print(f"each cell: 1 warm-up epoch, then {args.epochs} timed; median of {args.repeats} "
          "(ABBA order)\n")

    def run(kind: str, wk: int, shards: str = "shards", fields: str = ",".join(FIELDS)) -> dict:
        return measure(workdir, kind, wk, args.batch, args.epochs, shards, fields)

    _readers_table(args, workers, run)
    _breakdown_table(workdir, args.repeats)
    if args.no_lidar:
        return
    _lidar_codec_table(workdir, args.repeats)
    _lidar_loader_table(args.repeats, workers, run)


if __name__ == "__main__":
    main()
