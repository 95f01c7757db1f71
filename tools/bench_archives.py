#!/usr/bin/env python
"""Route layouts packed from their archives against unpacking them first (issue 30), side by
side in one run, same routes (docs/benchmarks.md has the figures):

  archives   `carla-wds pack ARCHIVES` (a `.tar.gz` streamed once to list its routes and once
             into the spool; a `.zip` read in place)
  unpacked   `tar xzf` (or `unzip -q`) of the same archives into a scratch folder, as the
             datasets' instructions extract them, then `carla-wds pack` of the folders

Each archive holds --per-archive routes of a synthetic `garage` dataset (carla_garage's
layout; the LB2 family is the same folder structure), under nested folders. Both packs must
give byte-identical shards (checked every run). The page cache is warm for both.

    .venv/bin/python tools/bench_archives.py --workdir /tmp/bench_archives \
        [--routes 8 --frames 60 --per-archive 4 --image-size 256x1024 --repeats 3]
"""
from __future__ import annotations

import argparse
import hashlib
import shutil
import statistics
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

LAYOUT = "garage"


def make_archives(work: Path, routes: int, frames: int, per: int,
                  size: tuple[int, int] | None) -> dict[str, Path]:
    """format -> folder of archives of the same routes (.tar.gz chunks, .zip with a stem
    folder as PDM-Lite's)."""
    from carla_wds.pack.synth import synth_dataset
    raw = work / "raw"
    if not raw.is_dir():
        synth_dataset(raw, LAYOUT, episodes=routes, frames=frames, seed=0, image_size=size,
                      progress=False)
    found = sorted(p.parent.relative_to(raw).as_posix() for p in raw.rglob("measurements"))
    out = {"tar.gz": work / "tgz", "zip": work / "zip"}
    if not out["zip"].is_dir():
        for i in range(0, len(found), per):
            chunk, name = found[i:i + per], f"chunk_{i // per:03d}"
            (out["tar.gz"] / "data").mkdir(parents=True, exist_ok=True)
            with tarfile.open(out["tar.gz"] / "data" / f"{name}.tar.gz", "w:gz") as tar:
                for r in chunk:
                    tar.add(raw / r, arcname=r)
            (out["zip"] / "data").mkdir(parents=True, exist_ok=True)
            with zipfile.ZipFile(out["zip"] / "data" / f"{name}.zip", "w",
                                 zipfile.ZIP_DEFLATED) as z:
                for r in chunk:
                    for f in sorted(p for p in (raw / r).rglob("*") if p.is_file()):
                        z.write(f, f"{name}/{f.relative_to(raw).as_posix()}")
    return out


def unpack(fmt: str, archives: Path, into: Path) -> None:
    """As the datasets' instructions do: tar into its folder, a zip whose members sit under
    its stem folder into its folder."""
    for a in sorted(archives.rglob(f"*.{fmt}")):
        folder = into / a.parent.relative_to(archives)
        folder.mkdir(parents=True, exist_ok=True)
        cmd = ["tar", "xzf", str(a), "-C", str(folder)] if fmt == "tar.gz" else \
            ["unzip", "-q", str(a), "-d", str(folder)]
        subprocess.run(cmd, check=True)


def pack(src: Path, out: Path, extra: list[str]) -> None:
    shutil.rmtree(out, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "carla_wds.cli", "pack", str(src), str(out),
                    "--layout", LAYOUT, "--all-frames", *extra],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def shards(out: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.glob("*.tar"))}


def bench(fmt: str, archives: Path, work: Path, repeats: int, extra: list[str]) -> str:
    t: dict[str, list[float]] = {"unpack": [], "folders": [], "archives": []}
    for _ in range(repeats):
        scratch = work / "scratch"
        shutil.rmtree(scratch, ignore_errors=True)
        t0 = time.perf_counter()
        unpack(fmt, archives, scratch)
        t["unpack"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        pack(scratch, work / "from_folders", extra)
        t["folders"].append(time.perf_counter() - t0)
        shutil.rmtree(scratch)
        t0 = time.perf_counter()
        pack(archives, work / "from_archives", extra)
        t["archives"].append(time.perf_counter() - t0)
        same = shards(work / "from_folders") == shards(work / "from_archives")
        if not same:
            raise SystemExit(f"{fmt}: the shards from the archives differ from the folders'")
    m = {k: statistics.median(v) for k, v in t.items()}
    both = m["unpack"] + m["folders"]
    return (f"| .{fmt} {' '.join(extra) or '(defaults)'} | {m['unpack']:.2f} | "
            f"{m['folders']:.2f} | {both:.2f} | {m['archives']:.2f} | "
            f"{both / m['archives']:.2f}x |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workdir", required=True)
    p.add_argument("--routes", type=int, default=8)
    p.add_argument("--frames", type=int, default=60)
    p.add_argument("--per-archive", type=int, default=4)
    p.add_argument("--image-size", default=None, help="HxW of the synthetic camera "
                   "(default: the layout's real size)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--workers", default="1,2", help="pack --workers values, one row each")
    a = p.parse_args()
    work = Path(a.workdir)
    work.mkdir(parents=True, exist_ok=True)
    size = tuple(int(v) for v in a.image_size.split("x")) if a.image_size else None
    found = make_archives(work, a.routes, a.frames, a.per_archive, size)
    mb = {f: sum(x.stat().st_size for x in d.rglob(f"*.{f}")) / 1e6 for f, d in found.items()}
    print(f"{a.routes} routes x {a.frames} frames of {LAYOUT}, {a.per_archive} routes an "
          f"archive: {mb['tar.gz']:.0f} MB of .tar.gz, {mb['zip']:.0f} MB of .zip; median of "
          f"{a.repeats}; shards byte-identical both ways")
    print("| archives, pack options | unpack s | pack folders s | unpack + pack s | "
          "pack archives s | archives' speed vs unpack + pack |")
    print("|---|---|---|---|---|---|")
    for fmt, d in found.items():
        for w in a.workers.split(","):
            print(bench(fmt, d, work, a.repeats, ["--workers", w]), flush=True)


if __name__ == "__main__":
    main()
