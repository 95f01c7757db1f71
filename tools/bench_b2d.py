#!/usr/bin/env python
"""Bench2Drive benchmarks, each side by side in one run (docs/benchmarks.md has the figures):

  loader  six 1600x900 JPEG q20 cameras -> 6 x 3 x 224 x 400 at 0/1/2 workers: CARLAWebData
          with reduced-DCT decode (the default) against the same loader with exact_resize=True,
          and the floor: cv2 full decode + resize of the same bytes in a loop, one process.
  pack    `carla-wds pack` of the .tar.gz clips (hashes everything, writes shards) against
          `tar xzf` of the same clips to a scratch folder; both with the page cache warm.
  memory  peak RSS of a process that opens a loader over a Base-like manifest of 1k and 14k
          clips' shard entries and reads 4 batches, against a pickled mmdet3d-style info list
          as Bench2DriveZoo's prepare_B2D.py writes (measured on a slice, scaled linearly).

    .venv/bin/python tools/bench_b2d.py --workdir /tmp/bench_b2d [--clips 3 --frames 60]
                                        [--repeats 3] [--parts loader,pack,memory]
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import cells
from proc_stats import PeakRSS

CAMS = ("front", "front_left", "front_right", "back", "back_left", "back_right")
OUT_HW, BATCH = (224, 400), 8


def make_data(work: Path, clips: int, frames: int,
              size: tuple[int, int] | None = None) -> tuple[Path, Path]:
    """Synthetic clips at the real 1600x900 (archives), packed at every frame (--stride 1)."""
    from carla_wds.pack.packer import PackOptions, pack
    from carla_wds.pack.synth import synth_dataset
    raw, shards = work / "raw", work / "shards"
    if not (raw / "archives").is_dir():
        synth_dataset(raw, "bench2drive", episodes=clips, frames=frames, seed=0,
                      image_size=size, progress=True)
    if not (shards / "manifest.json").exists():
        # every frame with a future, as before the layout's sample rule (short bench clips)
        pack(raw / "archives", shards, PackOptions.of(layout="bench2drive", stride=1,
                                                   max_samples=16, overwrite=True,
                                                   all_frames=True))
    return raw, shards


def loader_epoch(shards: Path, workers: int, exact: bool) -> tuple[float, int]:
    from carla_wds.load import CARLAWebData
    data = CARLAWebData(str(shards), batch_size=BATCH, num_workers=workers, image_size=OUT_HW,
                        mode="eval", exact_resize=exact)
    t0, n = time.perf_counter(), 0
    for batch in data:
        n += int(batch.valid.sum())
    return time.perf_counter() - t0, n


def floor(shards: Path) -> float:
    """samples/s of cv2 full decode + resize of every sample's six JPEGs, bytes in memory."""
    import tarfile

    import cv2
    cv2.setNumThreads(1)
    blobs = []
    for tar in sorted(shards.glob("*.tar")):
        with tarfile.open(tar) as t:
            blobs += [t.extractfile(m).read() for m in t if m.name.endswith(".jpg")]
    t0 = time.perf_counter()
    for b in blobs:
        img = cv2.imdecode(np.frombuffer(b, np.uint8), cv2.IMREAD_COLOR)
        cv2.resize(img, OUT_HW[::-1], interpolation=cv2.INTER_LINEAR)
    return len(blobs) / len(CAMS) / (time.perf_counter() - t0)


def bench_loader(shards: Path, repeats: int) -> list[str]:
    rows = ["| workers | reduced DCT (samples/s) | exact_resize=True | reduced / exact | "
            "floor (1 process) | reduced / floor |", "|---|---|---|---|---|---|"]
    fl = statistics.median(floor(shards) for _ in range(repeats))
    for w in (0, 1, 2):
        rate = {}
        for exact in (False, True):
            loader_epoch(shards, w, exact)   # warm-up: page cache, worker start paths
            runs = [loader_epoch(shards, w, exact) for _ in range(repeats)]
            rate[exact] = statistics.median(n / t for t, n in runs)
        rows.append(f"| {w} | {rate[False]:.1f} | {rate[True]:.1f} | "
                    f"{rate[False] / rate[True]:.2f}x | {fl:.1f} | {rate[False] / fl:.2f}x |")
    return rows


def bench_pack(raw: Path, work: Path, repeats: int) -> list[str]:
    archives = sorted((raw / "archives").glob("*.tar.gz"))
    size = sum(a.stat().st_size for a in archives)
    # tar xzf is two processes (tar, and gzip behind it): the pack with 2 workers is the
    # like-for-like row on this 2-core machine
    variants = {"pack": [], "pack --no-fsync": ["--no-fsync"],
                "pack --workers 2": ["--workers", "2"]}
    times: dict[str, list[float]] = {"tar xzf": [], **{k: [] for k in variants}}
    for _ in range(repeats):
        scratch = work / "scratch"
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir()
        t0 = time.perf_counter()
        for a in archives:
            subprocess.run(["tar", "xzf", str(a), "-C", str(scratch)], check=True)
        times["tar xzf"].append(time.perf_counter() - t0)
        shutil.rmtree(scratch)
        for name, extra in variants.items():
            out = work / "packed_bench"
            shutil.rmtree(out, ignore_errors=True)
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "carla_wds.cli", "pack", str(raw / "archives"),
                            str(out), "--layout", "bench2drive", "--stride", "1",
                            "--all-frames", *extra],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            times[name].append(time.perf_counter() - t0)
    tar = statistics.median(times["tar xzf"])
    rows = [f"{len(archives)} clips, {size / 1e6:.0f} MB of .tar.gz; median of {repeats}",
            "| what | s | MB/s of archive | speed vs tar xzf |", "|---|---|---|---|"]
    for name, ts in times.items():
        m = statistics.median(ts)
        rows.append(f"| {name} | {m:.2f} | {size / 1e6 / m:.0f} | {tar / m:.2f}x |")
    return rows


def linked_manifest(shards: Path, work: Path, clips: int) -> Path:
    """A pack folder whose manifest has `clips` shard entries, one per clip, each a hard link
    of the pack's first shard (made once per size)."""
    base = json.loads((shards / "manifest.json").read_text())
    folder = work / f"manifest_{clips}"
    if not folder.is_dir():
        folder.mkdir()
        first = base["shards"][0]
        entries = []
        for i in range(clips):
            name = f"shard-{i:06d}.tar"
            os.link(shards / first["name"], folder / name)
            entries.append({**first, "name": name})
        doc = {**base, "shards": entries, "total_samples": first["samples"] * clips}
        doc["counts"] = {**base["counts"], "samples": doc["total_samples"]}
        (folder / "manifest.json").write_text(json.dumps(doc))
    return folder


def peak_rss_reading(make_loader) -> float:
    """Peak RSS (MB) of this process and its children while a loader is made and 4 batches
    are read."""
    with PeakRSS() as peak:
        data = make_loader()
        for i, _ in enumerate(data):
            if i == 3:
                break
        data.close()
    return peak.peak


def _memory_child(shards: Path, work: Path, clips: int) -> float:
    """Peak RSS (MB) of a loader over a manifest of `clips` shard entries, 4 batches read."""
    from carla_wds.load import CARLAWebData
    folder = linked_manifest(shards, work, clips)
    return peak_rss_reading(lambda: CARLAWebData(str(folder), batch_size=BATCH, num_workers=2,
                                                 image_size=OUT_HW))


def _info_frame(rng: np.random.Generator, k: int = 40) -> dict:
    """One frame's entry of b2d_infos_train.pkl, with prepare_B2D.py's keys and shapes."""
    cams = {f"CAM_{c.upper()}": {"cam2ego": rng.normal(size=(4, 4)),
                                 "intrinsic": rng.normal(size=(3, 3)),
                                 "world2cam": rng.normal(size=(4, 4)),
                                 "data_path": f"v1/Clip_Town12_Route1_Weather0/camera/rgb_{c}/"
                                              "00000.jpg"} for c in CAMS}
    return {"folder": "v1/Clip_Town12_Route1_Weather0", "town_name": "Town12", "frame_idx": 0,
            "command_far": 4, "command_near": 4, "command_far_xy": rng.normal(size=2),
            "command_near_xy": rng.normal(size=2), "ego_yaw": 0.1,
            "ego_translation": rng.normal(size=3), "ego_vel": rng.normal(size=3),
            "ego_accel": rng.normal(size=3), "ego_rotation_rate": rng.normal(size=3),
            "ego_size": rng.normal(size=3), "world2ego": rng.normal(size=(4, 4)),
            "throttle": 0.5, "steer": 0.0, "brake": 0.0,
            "sensors": {**cams, "LIDAR_TOP": {"lidar2ego": rng.normal(size=(4, 4)),
                                              "world2lidar": rng.normal(size=(4, 4))}},
            "gt_boxes": rng.normal(size=(k, 9)), "gt_names": np.array(["vehicle.tesla"] * k),
            "gt_ids": rng.integers(0, 9999, k), "num_points": rng.integers(0, 99, k),
            "npc2world": rng.normal(size=(k, 4, 4))}


def _pickle_child(work: Path, frames: int) -> float:
    """Peak RSS (MB) after pickle.load of an info list of `frames` frames."""
    path = work / f"infos_{frames}.pkl"
    if not path.exists():
        rng = np.random.default_rng(0)
        with open(path, "wb") as f:
            pickle.dump([_info_frame(rng) for _ in range(frames)], f)
    with PeakRSS() as peak:
        with open(path, "rb") as f:
            infos = pickle.load(f)   # our own file, written above
        del infos
    return peak.peak


def bench_memory(shards: Path, work: Path, clip_counts: list[int]) -> list[str]:
    def child(args: list[str]) -> float:
        out = cells.run([sys.executable, __file__, "--workdir", str(work), *args],
                        check=True).stdout
        return float(out.strip().splitlines()[-1])
    rows = ["| clips | carla-wds loader, 2 workers, peak RSS MB | pickled infos (per worker) |",
            "|---|---|---|"]
    # ~2M annotated 10 Hz frames in 13,638 clips (the B2D paper): ~147 a clip [inferred]
    frames_per_clip = 147
    slice_frames = 20000
    per_frame = (child(["--child-pickle", str(slice_frames)])
                 - child(["--child-pickle", "1"])) / slice_frames
    for clips in clip_counts:
        ours = child(["--child-memory", str(clips)])
        rows.append(f"| {clips} | {ours:.0f} | {per_frame * frames_per_clip * clips:.0f} "
                    f"(scaled from {slice_frames} frames) |")
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workdir", required=True)
    p.add_argument("--clips", type=int, default=3)
    p.add_argument("--frames", type=int, default=60)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--parts", default="loader,pack,memory")
    p.add_argument("--image-size", default=None, help="HxW of the synthetic cameras (smoke "
                   "tests); default B2D's 900x1600")
    p.add_argument("--memory-clips", default="1000,14000")
    p.add_argument("--child-memory", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--child-pickle", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    if args.child_pickle is not None:
        print(_pickle_child(work, args.child_pickle))
        return
    # HxW, as every size option and synth_dataset's image_size
    size = tuple(int(v) for v in args.image_size.split("x")) if args.image_size else None
    raw, shards = make_data(work, args.clips, args.frames, size)
    if args.child_memory is not None:
        print(_memory_child(shards, work, args.child_memory))
        return
    parts = args.parts.split(",")
    if "loader" in parts:
        print("\n## loader: six 1600x900 JPEG q20 -> 6 x 3 x 224 x 400\n")
        print("\n".join(bench_loader(shards, args.repeats)))
    if "pack" in parts:
        print("\n## pack from .tar.gz clips vs tar xzf\n")
        print("\n".join(bench_pack(raw, work, args.repeats)))
    if "memory" in parts:
        print("\n## memory\n")
        counts = [int(c) for c in args.memory_clips.split(",")]
        print("\n".join(bench_memory(shards, work, counts)))


if __name__ == "__main__":
    main()
