#!/usr/bin/env python
"""Model-ready adapters against their codebase's own loader, side by side in one run (issue 26):

  ours    CARLAWebData(shards, adapter=NAME, batch_size=B, num_workers=W): the codebase's batch
          dicts from carla-wds shards
  theirs  DataLoader(CARLA_Data(...), batch_size=B, num_workers=W, shuffle=True): the
          codebase's own Dataset, at its pinned commit, reading the raw route folders
          (simlingo: Data_Driving's per-sample records, arrays as tensors, not stacked:
          their own collate needs a tokenizer; ours are collated)

Both read the same frames: routes written by `carla-wds synth` at the codebase's camera size (its
loader never resizes, so both serve that size) and packed by `carla-wds pack`; the codebase's own
preprocessing (TCP's tools/gen_data.py packed_data.npy) runs once before timing, as pack does.
Both run without augmentation (their golden setting), or both with it (--augment).

Their code is never copied here: it is imported at run time from --repo-dir NAME=PATH (a
checkout or `git archive` export at the pinned commit), through tools/golden's machinery (git
blob ids checked against the pinned commit, run-time shims only; the builders are in
tools/bench_adapters_theirs.py). An entry may take routes out of the synth's output for both
sides (b2d_tcp: the clips with a `speed: null` frame, which their default collate cannot take). An adapter whose checkout is
not given runs our half only; one not registered in carla-wds yet is skipped with a message.

Each cell (side, workers, repeat) is a fresh process, timed from after its imports to the last
batch (the Dataset's construction, worker start-up and every batch included); the sides
alternate ABBA over the repeats. The table gives medians and ranges of samples/s and CPU
seconds per sample (the cell's process plus its reaped workers). --torch-threads 1 sets the
main process's intra-op threads (workers always run one): on a busy 2-core machine torch's
default two threads can wait on each other for milliseconds per operation, which swamps a
0-worker cell of either side. --profile SIDE:W runs one more cell of that side in-process under
cProfile and prints where its time goes (at 0 workers the whole pipeline; at W > 0 the main
process: the IPC). --ours-image-format raw packs ours with cameras decoded at pack time.

    .venv/bin/python tools/bench_adapters.py --workdir /tmp/bench_adapters \
        --repo-dir tcp=/tmp/golden_src/TCP [--adapters tcp] [--episodes 2 --frames 36] \
        [--repeats 3] [--profile theirs:0] [--ours-image-format raw] [--out docs/benchmarks.md]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tools")]   # tools.golden, proc_stats, carla_wds

import cells  # noqa: E402
from proc_stats import cpu_seconds  # noqa: E402


@dataclass(frozen=True)
class Entry:
    """One adapter's benchmark: the routes both sides read and how their loader is built."""
    layout: str                  # `carla-wds synth/pack --layout`
    image_size: str              # synth HxW: the codebase's camera (its loader never resizes)
    pack_args: tuple[str, ...]   # the pack options the adapter needs (its ModelAdapter.pack)
    prepare: str                 # "module:function(repo_dir, raw)": their preprocessing, untimed
    their: str                   # "module:function(repo_dir)" -> build(raw, augment) -> Dataset
    routes: str = ""             # "module:function(raw) -> Path": after synth, in this process,
    #                              the folder `pack` reads (routes neither side can serve taken
    #                              out of raw for both); "": pack reads raw as synthesised
    listed: bool = False         # their batches are lists of their records, arrays as tensors
    #                              (their_records: their own collate needs a tokenizer)
    collate: str = ""            # "module:function(repo_dir) -> collate_fn": their own collate


THEIRS = "bench_adapters_theirs:"   # tools/bench_adapters_theirs.py: their loaders, routes
# one entry per adapter
ENTRIES: dict[str, Entry] = {
    "tcp": Entry("tcp_roach", "256x900", ("--allow-pickle-input",),
                 THEIRS + "tcp_prepare", THEIRS + "tcp_loader"),
    "garage": Entry("garage", "256x1024", (), THEIRS + "warm", THEIRS + "garage_loader"),
    "transfuser2022": Entry("transfuser2022", "160x960", ("--allow-pickle-input",),
                            THEIRS + "warm", THEIRS + "tf2022_loader"),
    # B2D's 1600x900 cameras; the adapter's pack (every 10 Hz frame, expert file t), and no
    # LiDAR or boxes (the port reads neither); clips with a `speed: null` frame are removed
    "b2d_tcp": Entry("bench2drive", "900x1600", ("--stride", "1", "--expert-pairing",
                                                 "tcp_port", "--sensors", "expert"),
                     THEIRS + "b2d_tcp_prepare", THEIRS + "b2d_tcp_loader",
                     THEIRS + "b2d_tcp_routes"),
    # their 1024x512 camera; the layout's default pack (their loader never resizes)
    # their per-sample records as lists (their_records); ours collated
    "simlingo": Entry("garage_lb2_simlingo", "512x1024", (), THEIRS + "warm",
                      THEIRS + "simlingo_loader", listed=True),
    # three 384x384 cameras (their strip); pickled metas and boxes need --allow-pickle-input;
    # the adapter's pack keeps the strip's pixels (PNG), as its refusal of a JPEG pack says
    "lead": Entry("lead", "384x384", ("--allow-pickle-input", "--image-format", "png"),
                  THEIRS + "warm",
                  THEIRS + "lead_loader", collate=THEIRS + "lead_collate"),
}


def _call(ref: str, *args: Any) -> Any:
    module, name = ref.split(":")
    return getattr(__import__(module), name)(*args)


def _rows(batch: Any) -> int:
    """Rows of a collated batch: valid ones where the batch says (our padding), else the first
    tensor's length (their batches hold no padding)."""
    import torch
    if isinstance(batch, list):   # an Entry with listed=True: their records, uncollated
        return len(batch)
    if isinstance(batch, dict) and "valid" in batch:
        return int(batch["valid"].sum())
    values = batch.values() if isinstance(batch, dict) else batch
    return next(len(v) for v in values if isinstance(v, torch.Tensor))


def their_records(batch: list) -> list:
    """An Entry with listed=True: their per-sample records, each numpy array made a tensor
    (default_convert) in the worker, so they cross to the main process in shared memory as
    any collated batch does; nothing stacked, the rest (strings, None) as they are."""
    from torch.utils.data import default_convert
    return [default_convert(record) for record in batch]


def make_loader(cell: dict) -> Callable[[], Any]:
    """The cell's loader, its imports done; calling it builds the Dataset (timed)."""
    import torch
    if cell["side"] == "ours":
        from carla_wds import CARLAWebData
        return lambda: CARLAWebData(cell["shards"], adapter=cell["adapter"],
                                    batch_size=cell["batch"], num_workers=cell["workers"],
                                    augment=cell["augment"])
    entry = ENTRIES[cell["adapter"]]
    build = _call(entry.their, Path(cell["repo_dir"]))
    collate = (their_records if entry.listed else
               _call(entry.collate, Path(cell["repo_dir"])) if entry.collate else None)
    return lambda: torch.utils.data.DataLoader(
        build(Path(cell["raw"]), cell["augment"]), batch_size=cell["batch"], shuffle=True,
        num_workers=cell["workers"], collate_fn=collate)


def run_cell(cell: dict, prof: Any = None) -> dict:
    """One pass over the data: samples, wall seconds and CPU seconds (with reaped workers)."""
    if cell["side"] == "prepare":
        _call(ENTRIES[cell["adapter"]].prepare, Path(cell["repo_dir"]), Path(cell["raw"]))
        return {}
    if cell.get("threads"):   # the main process's intra-op threads (workers run 1 each)
        import torch
        torch.set_num_threads(cell["threads"])
    make = make_loader(cell)
    cpu0 = cpu_seconds(resource.RUSAGE_SELF) + cpu_seconds(resource.RUSAGE_CHILDREN)
    if prof is not None:   # the timed part only, not the imports
        prof.enable()
    t0 = time.perf_counter()
    n = sum(_rows(b) for b in make())
    wall = time.perf_counter() - t0
    if prof is not None:
        prof.disable()
    cpu = cpu_seconds(resource.RUSAGE_SELF) + cpu_seconds(resource.RUSAGE_CHILDREN) - cpu0
    return {"samples": n, "wall": wall, "cpu": cpu}


def fresh(cell: dict, python: str) -> dict:
    """run_cell in a fresh process (its own imports, page cache shared)."""
    out = cells.run([python, __file__, "--cell", json.dumps(cell)], cwd=ROOT, timeout=3600)
    if out.returncode:
        raise SystemExit(f"cell {cell['side']} {cell['adapter']} W={cell['workers']} failed:\n"
                         f"{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def cli(python: str, *args: str) -> None:
    subprocess.run([python, "-m", "carla_wds.cli", *args], check=True, cwd=ROOT,
                   capture_output=True, text=True)


def prepare(name: str, entry: Entry, args: argparse.Namespace) -> tuple[Path, Path]:
    """Synthesise and pack the routes once (kept in --workdir), and run their preprocessing."""
    work = Path(args.workdir) / f"{name}_{args.episodes}x{args.frames}"
    fmt = args.ours_image_format   # ours reads a pack of these cameras (None: the source's)
    raw, shards = work / "raw", work / ("shards" if fmt is None else f"shards_{fmt}")
    if not raw.is_dir():
        cli(sys.executable, "synth", str(raw), "--layout", entry.layout, "--episodes",
            str(args.episodes), "--frames", str(args.frames), "--seed", str(args.seed),
            "--image-size", entry.image_size)
    source = _call(entry.routes, raw) if entry.routes else raw
    if not (shards / "manifest.json").exists():
        cli(sys.executable, "pack", str(source), str(shards), "--layout", entry.layout,
            "--no-fsync", *entry.pack_args, *(("--image-format", fmt) if fmt else ()))
    if name in args.repo_dirs:
        fresh({"side": "prepare", "adapter": name, "repo_dir": args.repo_dirs[name],
               "raw": str(raw)}, args.python)
    return raw, shards


def usable(names: list[str], repo_dirs: dict[str, str]) -> list[str]:
    """The adapters that can run; each one that cannot is named with the reason."""
    from carla_wds.load.adapters import MODEL_ADAPTERS
    out = []
    for name in names:
        if name not in ENTRIES:
            print(f"skip {name}: no entry in tools/bench_adapters.py ENTRIES yet (its layout, "
                  "camera size, pack options and their loader's builder)", file=sys.stderr)
        elif name not in MODEL_ADAPTERS:
            print(f"skip {name}: CARLAWebData(adapter={name!r}) is not registered in carla-wds "
                  f"yet (registered: {sorted(MODEL_ADAPTERS)})", file=sys.stderr)
        else:
            if name not in repo_dirs:
                print(f"{name}: no --repo-dir {name}=PATH (their checkout at the pinned "
                      "commit): our half only", file=sys.stderr)
            out.append(name)
    return out


# what one line of a cProfile self-time list is spent on (self times do not nest: they add up)
CATEGORIES = (
    ("PNG decode", r"ImagingDecoder|imdecode|spng|zlib"),
    ("pixels to float, normalise", r"TensorBase' objects>|from_numpy|ascontiguousarray|"
                                   r"__array_interface__|"
                                   r"tobytes|ImagingEncoder|normalize|to_tensor"),
    ("collate", r"collate|torch\.(stack|cat|as_tensor|tensor)>"),
    ("IPC and waiting on workers", r"lock' objects|poll|select|recv|rebuild|reduction|"
                                   r"connection|queues|pickle|loads|storage|sleep"),
    ("file reads", r"BufferedReader|FileIO|io\.open|posix\.(read|stat)"),
)


def profile_text(stats: Any, top: int = 12) -> str:
    """The profile's self time by category (CATEGORIES), then its largest self times."""
    import re
    rows, total, spent = [], stats.total_tt, {name: 0.0 for name, _ in CATEGORIES}
    for (file, line, func), (_, calls, tt, ct, _) in stats.stats.items():
        where = f"{Path(file).name}:{line}({func})" if file != "~" else func
        rows.append((tt, ct, calls, where))
        for name, pattern in CATEGORIES:
            if re.search(pattern, where):
                spent[name] += tt
                break
    lines = ["| self time in | s | share |", "|---|---:|---:|"]
    lines += [f"| {k} | {v:.2f} | {v / total:.0%} |" for k, v in spent.items()]
    rest = total - sum(spent.values())
    lines += [f"| everything else | {rest:.2f} | {rest / total:.0%} |",
              f"| total (profiled, cProfile's overhead included) | {total:.2f} | 100% |", "",
              "| function (largest self times) | calls | self s | cumulative s |",
              "|---|---:|---:|---:|"]
    lines += [f"| `{w}` | {n} | {tt:.2f} | {ct:.2f} |" for tt, ct, n, w in
              sorted(rows, reverse=True)[:top]]
    return "\n".join(lines)


def profiled(cell: dict) -> dict:
    import cProfile
    import io
    import pstats
    prof = cProfile.Profile()
    result = run_cell(cell, prof)
    result["profile"] = profile_text(pstats.Stats(prof, stream=io.StringIO()))
    return result


def measure(name: str, raw: Path, shards: Path, args: argparse.Namespace) -> dict:
    """Every (side, workers) cell, repeats times, each in a fresh process, sides ABBA."""
    sides = ["ours", "theirs"] if name in args.repo_dirs else ["ours"]
    base = {"adapter": name, "shards": str(shards), "raw": str(raw), "augment": args.augment,
            "repo_dir": args.repo_dirs.get(name), "batch": args.batch_size,
            "threads": args.torch_threads}
    results: dict[tuple[str, int], list[dict]] = {(s, w): [] for w in args.workers for s in sides}
    for i in range(args.repeats):
        for w in args.workers:
            for side in (sides if i % 2 == 0 else sides[::-1]):
                results[(side, w)].append(fresh({**base, "side": side, "workers": w},
                                                args.python))
    for spec in args.profile:
        side, w = spec.split(":")
        if side in sides:
            cell = {**base, "side": side, "workers": int(w), "profile": True}
            results[(f"profile {side}", int(w))] = [fresh(cell, args.python)]
    return results


def _stat(runs: list[dict], key: Callable[[dict], float], fmt: str) -> str:
    values = [key(r) for r in runs]
    return (f"{statistics.median(values):{fmt}} ({min(values):{fmt}}-{max(values):{fmt}})"
            if values else "-")


def table(name: str, results: dict, workers: list[int]) -> str:
    rate = lambda r: r["samples"] / r["wall"]   # noqa: E731
    cpu = lambda r: 1e3 * r["cpu"] / max(r["samples"], 1)   # noqa: E731
    lines = [f"| adapter | workers | samples ours / theirs | ours samples/s | theirs samples/s "
             "| ours / theirs | ours CPU ms/sample | theirs CPU ms/sample |",
             "|---|---:|---|---:|---:|---:|---:|---:|"]
    for w in workers:
        ours, theirs = results[("ours", w)], results.get(("theirs", w), [])
        counts = "/".join(str(sorted({r["samples"] for r in s})) if s else "-"
                          for s in (ours, theirs))
        ratio = [{"r": rate(a) / rate(b)} for a, b in zip(ours, theirs)]
        lines.append(f"| {name} | {w} | {counts} | {_stat(ours, rate, '.1f')} | "
                     f"{_stat(theirs, rate, '.1f')} | {_stat(ratio, lambda r: r['r'], '.2f')}x | "
                     f"{_stat(ours, cpu, '.0f')} | {_stat(theirs, cpu, '.0f')} |")
    for (side, w), runs in results.items():
        if side.startswith("profile"):
            lines += ["", f"cProfile of one {side.split()[1]} cell, {name}, {w} workers "
                      f"({runs[0]['samples']} samples, {runs[0]['wall']:.2f} s wall):", "",
                      runs[0]["profile"]]
    return "\n".join(lines)


def machine() -> str:
    import numpy
    import torch
    model = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo")
                  if ln.startswith("model name")), platform.processor())
    mem = int(next(ln.split()[1] for ln in open("/proc/meminfo") if ln.startswith("MemTotal")))
    return (f"{os.cpu_count()} cores ({model}), {mem / 2**20:.0f} GiB RAM, Linux "
            f"{platform.release()}, Python {platform.python_version()}, torch {torch.__version__}"
            f", numpy {numpy.__version__}")


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--adapters", default="tcp", help="comma-separated ENTRIES names")
    ap.add_argument("--repo-dir", action="append", default=[], metavar="NAME=PATH",
                    help="their checkout at the pinned commit (tools/golden/README.md)")
    ap.add_argument("--workdir", default="/tmp/bench_adapters")
    ap.add_argument("--episodes", type=int, default=2)
    ap.add_argument("--frames", type=int, default=36, help="frames per synth route")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--workers-list", default="0,1,2")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--augment", action="store_true", help="their augmentation on both sides")
    ap.add_argument("--ours-image-format", choices=("png", "jpg", "raw"),
                    help="pack ours with --image-format (default: the source's bytes)")
    ap.add_argument("--torch-threads", type=int, default=0,
                    help="torch.set_num_threads in each cell's main process (0: torch's default)")
    ap.add_argument("--python", default=sys.executable,
                    help="the interpreter of every cell (both sides), e.g. /tmp/golden_venv")
    ap.add_argument("--profile", action="append", default=[], metavar="SIDE:W",
                    help="also one cProfile'd cell, e.g. theirs:0 or ours:1")
    ap.add_argument("--out", type=Path, help="append the Markdown (and the command) here")
    ap.add_argument("--cell", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.repo_dirs = dict(r.split("=", 1) for r in args.repo_dir)
    args.workers = [int(w) for w in args.workers_list.split(",")]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.cell:
        cell = json.loads(args.cell)
        print(json.dumps(profiled(cell) if cell.get("profile") else run_cell(cell)))
        return 0
    load = os.getloadavg()
    parts = [f"    {' '.join([Path(args.python).name, *sys.argv])}", "",
             f"Machine: {machine()}. Load average (1, 5, 15 min) at the start: "
             f"{load[0]:.2f}, {load[1]:.2f}, {load[2]:.2f}."]
    for name in usable(args.adapters.split(","), args.repo_dirs):
        raw, shards = prepare(name, ENTRIES[name], args)
        mib = [sum(p.stat().st_size for p in d.rglob("*") if p.is_file()) / 2**20
               for d in (shards, raw)]
        parts += ["", f"{name}: ours from {shards.name} ({mib[0]:.1f} MiB; the raw routes "
                  f"{mib[1]:.1f} MiB)", "",
                  table(name, measure(name, raw, shards, args), args.workers)]
    load = os.getloadavg()
    parts += ["", f"Load average at the end: {load[0]:.2f}, {load[1]:.2f}, {load[2]:.2f}."]
    text = "\n".join(parts)
    print(text)
    if args.out:
        with open(args.out, "a") as f:
            f.write("\n" + text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
