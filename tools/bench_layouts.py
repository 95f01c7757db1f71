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
import gzip
import json
import resource
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import numpy as np

from proc_stats import children_cpu, cpu_seconds, steal_seconds

FIELDS = ["depth", "semantics", "bev", "lidar", "boxes", "measurements"]
PRED_LEN, ROUTE_POINTS = 8, 20
GARAGE_DEPTH_SCALE = np.float32(50.0 / 255.0)
# the measurement fields of garage.yaml's record, as (name, dtype)
RECORD = (("aim_wp", np.float32), ("command", np.int32), ("next_command", np.int32),
          ("steer", np.float32), ("throttle", np.float32), ("brake", np.bool_),
          ("junction", np.bool_), ("vehicle_hazard", np.bool_), ("light_hazard", np.bool_),
          ("walker_hazard", np.bool_), ("stop_sign_hazard", np.bool_), ("speed", np.float32),
          ("target_speed", np.float32), ("theta", np.float32),
          ("augmentation_translation", np.float32), ("augmentation_rotation", np.float32))
BIG_CLOUD = 40_000


# --------------------------------------------------------------------------------------------
# (b) the per-file reader
# --------------------------------------------------------------------------------------------

def _json_gz(path: Path):
    with gzip.open(path, "rb") as f:
        return json.loads(f.read())


def _imread(path: Path, flags: int):
    import cv2
    img = cv2.imread(str(path), flags)
    if img is None:
        raise OSError(f"cv2 cannot read {path}")
    return img


class PerFileGarage:
    """carla_garage's per-sample file reads and decodes (team_code/data.py __getitem__), to
    the arrays CARLAWebData gives; a map-style torch Dataset (len, getitem)."""

    def __init__(self, raw: Path, frames: list[tuple[str, int]], image_size: tuple[int, int]):
        self.raw, self.frames, self.size = raw, frames, tuple(image_size)

    def __len__(self) -> int:
        return len(self.frames)

    def _image(self, path: Path, flags: int, interpolation: int):
        import cv2
        img = _imread(path, flags)
        if img.shape[:2] != self.size:
            img = cv2.resize(img, self.size[::-1], interpolation=interpolation)
        return img

    def measurements(self, route: Path, frame: int) -> dict:
        """The current measurements and the waypoints from the next PRED_LEN frames'
        ego_matrix, as carla_garage's get_waypoints (full 3x3 rotation)."""
        meas = [_json_gz(route / "measurements" / f"{frame + i:04d}.json.gz")
                for i in range(PRED_LEN + 1)]
        cur = meas[0]
        origin = np.asarray(cur["ego_matrix"], np.float64)[:3]
        future = np.array([m["ego_matrix"] for m in meas[1:]], np.float64)[:, :3, 3]
        wp = ((future - origin[:, 3]) @ origin[:, :3])[:, :2].astype(np.float32)
        command = np.zeros(6, np.float32)
        command[(cur["command"] if cur["command"] > 0 else 4) - 1] = 1.0
        route = np.zeros((ROUTE_POINTS, 2), np.float32)
        given = np.asarray(cur["route"][:ROUTE_POINTS], np.float32).reshape(-1, 2)
        route[:len(given)] = given
        record = {name: np.asarray(cur[name], dtype) for name, dtype in RECORD}
        record.update(route=route, route_len=np.int32(len(given)))
        return {"speed": np.float32(cur["speed"]),
                "target_point": np.asarray(cur["target_point"], np.float32),
                "command": command, "waypoints": wp,
                "waypoints_diff": np.diff(wp, axis=0, prepend=np.zeros((1, 2), np.float32)),
                "measurements": record}

    def lidar(self, route: Path, frame: int) -> np.ndarray:
        import laspy
        las = laspy.read(str(route / "lidar" / f"{frame:04d}.laz"))
        return np.ascontiguousarray(las.xyz, dtype=np.float32)

    def boxes(self, route: Path, frame: int) -> np.ndarray:
        from carla_wds.boxes import garage_boxes
        return garage_boxes(_json_gz(route / "boxes" / f"{frame:04d}.json.gz"))

    def __getitem__(self, i: int) -> dict:
        import cv2
        episode, frame = self.frames[i]
        route, name = self.raw / episode, f"{frame:04d}"
        out = self.measurements(route, frame)
        rgb = self._image(route / "rgb" / f"{name}.jpg", cv2.IMREAD_COLOR, cv2.INTER_LINEAR)
        out["images"] = cv2.cvtColor(rgb, cv2.COLOR_BGR2RGB).transpose(2, 0, 1)[None]
        depth = self._image(route / "depth" / f"{name}.png", cv2.IMREAD_UNCHANGED,
                            cv2.INTER_LINEAR)
        out["depth"] = (depth.astype(np.float32) * GARAGE_DEPTH_SCALE)[None]
        out["semantics"] = self._image(route / "semantics" / f"{name}.png",
                                       cv2.IMREAD_UNCHANGED, cv2.INTER_NEAREST)[None]
        out["bev"] = _imread(route / "bev_semantics" / f"{name}.png", cv2.IMREAD_UNCHANGED)[None]
        out["lidar"] = self.lidar(route, frame)
        out["boxes"] = self.boxes(route, frame)
        out["key"] = f"{episode.replace('/', '__')}__{name}"
        return out


def collate(items: list[dict]) -> dict:
    """Stacked tensors; lidar and boxes zero-padded to the batch's longest, with _len."""
    import torch
    out: dict = {"keys": [it["key"] for it in items]}
    for name in ("images", "depth", "semantics", "bev", "speed", "target_point", "command",
                 "waypoints", "waypoints_diff"):
        out[name] = torch.from_numpy(np.stack([it[name] for it in items]))
    for name in ("lidar", "boxes"):
        lens = [len(it[name]) for it in items]
        pad = np.zeros((len(items), max(lens), items[0][name].shape[1]), np.float32)
        for row, it in zip(pad, items):
            row[:len(it[name])] = it[name]
        out[name], out[f"{name}_len"] = torch.from_numpy(pad), torch.tensor(lens)
    out["measurements"] = {k: torch.from_numpy(np.stack([it["measurements"][k] for it in items]))
                           for k in items[0]["measurements"]}
    return out


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
    proc = subprocess.run(cmd, capture_output=True, text=True)
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
    from carla_wds.pack import layouts
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
        size = tuple(int(v) for v in image_size.split("x")) if image_size else None
        synth_dataset(raw, "garage", episodes=episodes, frames=frames, seed=0, image_size=size,
                      progress=False)
    if not (workdir / "shards" / "manifest.json").exists():
        pack(raw, workdir / "shards", PackOptions(layout="garage", overwrite=True,
                                                  progress=False))
    if not (workdir / "shards_laz" / "manifest.json").exists():
        pack(raw, workdir / "shards_laz", PackOptions(layout=str(_laz_layout(workdir)),
                                                      overwrite=True, progress=False))
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


def _members(shards: Path, suffix: str) -> dict[str, bytes]:
    """key -> bytes of one member kind, from every shard of a pack."""
    manifest = json.loads((shards / "manifest.json").read_text())
    out = {}
    for name in [s["name"] for s in manifest["shards"]]:
        with tarfile.open(shards / name) as tar:
            for m in tar:
                if m.name.endswith(suffix):
                    out[m.name[:-len(suffix)]] = tar.extractfile(m).read()
    return out


# --------------------------------------------------------------------------------------------
# checks and in-process timings
# --------------------------------------------------------------------------------------------

def check_same(workdir: Path, batch: int) -> str:
    """One carla-wds batch against the per-file reader's items for the same keys."""
    from carla_wds import CARLAWebData
    info = json.loads((workdir / "frames.json").read_text())
    size = tuple(info["image_size"])
    by_key = {k: (ep, fr) for k, ep, fr in info["frames"]}
    data = CARLAWebData(str(workdir / "shards"), batch_size=batch, mode="eval",
                        image_size=size, fields=FIELDS)
    b = next(iter(data))
    keys = [k for k, v in zip(b.keys, b.valid.tolist()) if v]
    ds = PerFileGarage(workdir / "raw", [by_key[k] for k in keys], size)
    ref = collate([ds[i] for i in range(len(keys))])
    n = len(keys)
    pairs = {"images": (b.images[:n], ref["images"], 0), "depth": (b.depth[:n], ref["depth"], 0),
             "semantics": (b.semantics[:n], ref["semantics"], 0), "bev": (b.bev[:n], ref["bev"], 0),
             "waypoints": (b.waypoints[:n], ref["waypoints"], 1e-4),
             "target_point": (b.target_point[:n], ref["target_point"], 1e-5),
             "route": (b.route[:n], ref["measurements"]["route"], 1e-5),
             "speed": (b.speed[:n], ref["speed"], 1e-5)}
    for name in ("lidar", "boxes"):
        mine, theirs = getattr(b, name)[:n], ref[name]
        width = min(mine.shape[1], theirs.shape[1])
        pairs[name] = (mine[:, :width], theirs[:, :width], 0)
        pairs[f"{name}_len"] = (getattr(b, f"{name}_len")[:n], ref[f"{name}_len"], 0)
    bad = [name for name, (x, y, tol) in pairs.items()
           if x.shape != y.shape or not np.allclose(x.numpy().astype(np.float64),
                                                    y.numpy().astype(np.float64), atol=tol)]
    if ref["keys"] != keys or bad:
        raise SystemExit(f"the readers disagree on {bad or 'keys'} for keys {keys[:2]}...")
    return f"{n} samples, {len(pairs)} fields"


def _best_us(fn, items: list, repeats: int) -> float:
    """Median over repeats of the mean us per item of fn over all items (after one untimed
    pass: lazy imports, first-call set-up)."""
    for it in items[:2]:
        fn(it)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for it in items:
            fn(it)
        times.append((time.perf_counter() - t0) / len(items) * 1e6)
    return sorted(times)[len(times) // 2]


def breakdown(workdir: Path, repeats: int, limit: int = 48) -> list[tuple[str, float, float]]:
    """Per-sample ms of each decode step, in this process: (step, per-file, carla-wds)."""
    import cv2

    from carla_wds.codecs import codec_named
    info = json.loads((workdir / "frames.json").read_text())
    size = tuple(info["image_size"])
    frames = info["frames"][:limit]
    ds = PerFileGarage(workdir / "raw", [(ep, fr) for _, ep, fr in frames], size)
    routes = [(workdir / "raw" / ep, fr) for _, ep, fr in frames]
    keys = [k for k, _, _ in frames]
    shards = workdir / "shards"
    manifest = json.loads((shards / "manifest.json").read_text())
    members = manifest["members"]
    rows = []
    steps = [
        ("rgb JPEG", "front.jpg",
         lambda r: ds._image(r[0] / "rgb" / f"{r[1]:04d}.jpg", cv2.IMREAD_COLOR,
                                   cv2.INTER_LINEAR)),
        ("depth PNG", "depth.png",
         lambda r: _imread(r[0] / "depth" / f"{r[1]:04d}.png", cv2.IMREAD_UNCHANGED)),
        ("semantics PNG", "semantics.png",
         lambda r: _imread(r[0] / "semantics" / f"{r[1]:04d}.png", cv2.IMREAD_UNCHANGED)),
        ("bev PNG", "bev.png",
         lambda r: _imread(r[0] / "bev_semantics" / f"{r[1]:04d}.png", cv2.IMREAD_UNCHANGED)),
        ("lidar (LAZ / npy)", "lidar.npy", lambda r: ds.lidar(*r)),
        ("boxes (json.gz / npy)", "boxes.npy", lambda r: ds.boxes(*r)),
        ("measurements + waypoints (9 json.gz / record npy)", "measurements.npy",
         lambda r: ds.measurements(*r)),
    ]
    for label, member, per_file in steps:
        data = list(_members(shards, "." + member)[k] for k in keys)
        codec = codec_named(members[member])
        rows.append((label, _best_us(per_file, routes, repeats) / 1e3,
                     _best_us(codec.decode, data, repeats) / 1e3))
    return rows


def lidar_codecs(workdir: Path, repeats: int) -> list[dict]:
    """Per-sample decode us and bytes of the same clouds as LAZ (the LAZ pack's members), as
    (N,3) npy (the default pack's) and as (N,4) npy (xyz + a zero column)."""
    from carla_wds.codecs import codec_named
    from carla_wds.modalities import encode_laz
    laz, pts = codec_named("laz"), codec_named("points")
    small_laz = _members(workdir / "shards_laz", ".lidar.laz")
    small_npy = _members(workdir / "shards", ".lidar.npy")
    keys = sorted(small_laz)
    clouds = [laz.decode(small_laz[k]) for k in keys]
    if not all(np.array_equal(c, pts.decode(small_npy[k])[:, :3]) for c, k in zip(clouds, keys)):
        raise SystemExit("the npy pack's clouds differ from the LAZ pack's")
    big, acc = [], []
    for c in clouds:   # consecutive frames stacked to about BIG_CLOUD points
        acc.append(c)
        if sum(map(len, acc)) >= BIG_CLOUD:
            big.append(laz.decode(encode_laz(np.concatenate(acc))))   # 1 mm grid, as stored
            acc = []

    def with_zero(c: np.ndarray) -> np.ndarray:
        return np.concatenate([c, np.zeros((len(c), 1), np.float32)], axis=1)

    out = []
    for label, cset, laz_bytes in (("synthetic frames", clouds, [small_laz[k] for k in keys]),
                                   ("stacked to ~40k points", big, [encode_laz(c) for c in big])):
        if not cset:
            continue
        npy3 = [pts.encode(c) for c in cset]
        npy4 = [pts.encode(with_zero(c)) for c in cset]
        out.append({"clouds": label, "n": len(cset), "points": np.mean([len(c) for c in cset]),
                    "laz_us": _best_us(laz.decode, laz_bytes, repeats),
                    "npy3_us": _best_us(pts.decode, npy3, repeats),
                    "npy4_us": _best_us(pts.decode, npy4, repeats),
                    "laz_bytes": np.mean([len(b) for b in laz_bytes]),
                    "npy3_bytes": np.mean([len(b) for b in npy3]),
                    "npy4_bytes": np.mean([len(b) for b in npy4])})
    return out


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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workdir", default="/tmp/bench_layouts")
    p.add_argument("--episodes", type=int, default=8)
    p.add_argument("--frames", type=int, default=60)
    p.add_argument("--image-size", default=None, help="WxH for synth (default 1024x256)")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--epochs", type=int, default=1, help="timed epochs per cell (after 1 warm-up)")
    p.add_argument("--workers-list", default="0,1,2")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--no-lidar", action="store_true", help="skip the LAZ vs npy part")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--workers", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--shards", default="shards", help=argparse.SUPPRESS)
    p.add_argument("--fields", default=",".join(FIELDS), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return child(args)
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    prepare(workdir, args.episodes, args.frames, args.image_size)
    info = json.loads((workdir / "frames.json").read_text())
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
    print("\nWhere the time goes: decode per sample, in one process, ms (per-file: the file "
          "read and decode as above; carla-wds: its codec's decode of the member bytes):\n")
    print("| step | per-file ms | carla-wds ms |\n|---|---:|---:|")
    total = [0.0, 0.0]
    for label, a, b in breakdown(workdir, args.repeats):
        total = [total[0] + a, total[1] + b]
        print(f"| {label} | {a:.2f} | {b:.2f} |")
    print(f"| sum | {total[0]:.2f} | {total[1]:.2f} |", flush=True)
    if args.no_lidar:
        return
    import laspy
    print(f"\nlaspy {laspy.__version__}, LAZ backend {laspy.LazBackend.detect_available()[0].name}")
    print("\nLiDAR, the same clouds as LAZ bytes (codec laz) and float32 npy (codec points): "
          "decode us per sample (median of repeats), bytes per sample. The default garage "
          "pack stores (N,3) npy (read: laz_points); the LAZ pack keeps the source bytes:\n")
    print("| clouds | n | points | LAZ us | npy (N,3) us | npy (N,4) us | LAZ / npy (N,3) time | "
          "LAZ bytes | npy (N,3) bytes | npy (N,4) bytes | npy (N,3) / LAZ bytes |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in lidar_codecs(workdir, max(args.repeats, 5)):
        print(f"| {r['clouds']} | {r['n']} | {r['points']:.0f} | {r['laz_us']:.0f} | "
              f"{r['npy3_us']:.0f} | {r['npy4_us']:.0f} | {r['laz_us'] / r['npy3_us']:.1f}x | "
              f"{r['laz_bytes']:.0f} | {r['npy3_bytes']:.0f} | {r['npy4_bytes']:.0f} | "
              f"{r['npy3_bytes'] / r['laz_bytes']:.2f}x |")
    sizes = {name: sum(s["bytes"] for s in json.loads(
        (workdir / name / "manifest.json").read_text())["shards"]) for name in ("shards_laz",
                                                                               "shards")}
    print(f"\nshard bytes, all members: LAZ pack {sizes['shards_laz'] / 1e6:.1f} MB, npy pack "
          f"{sizes['shards'] / 1e6:.1f} MB ({sizes['shards'] / sizes['shards_laz']:.2f}x)")
    lidar_cells = [(kind, wk, shards, "lidar") for wk in workers
                   for kind, shards in (("ours", "shards_laz"), ("ours", "shards"))]
    runs = _interleaved(args.repeats, lidar_cells, run)
    print("\nLoader, fields=['lidar'] (+ the front camera), samples/s; npy pack (N,3):\n")
    print("| workers | LAZ pack | npy pack | npy / LAZ | per repeat |\n|---:|---:|---:|---:|---:|")
    for wk in workers:
        a, b, each = _row_pair(runs, ("ours", wk, "shards_laz", "lidar"),
                               ("ours", wk, "shards", "lidar"))
        print(f"| {wk} | {a:.1f} | {b:.1f} | {b / a:.2f}x | {each[0]:.2f}-{each[-1]:.2f}x |",
              flush=True)


if __name__ == "__main__":
    main()
