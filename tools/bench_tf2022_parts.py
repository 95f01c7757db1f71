#!/usr/bin/env python
"""adapter="transfuser2022"'s per-sample parts at an earlier commit against this tree, in one
process (issue 26).

A runs the BEV and depth decodes (`BitPlanesCodec.decode`, `DepthCarla24Codec.decode`), the
semantic class table (`classes.served`) and the adapter's transform as REF has them: their
modules' source at REF (`git show`), loaded beside this tree's package, so their relative
imports are this tree's. B runs this tree's. Everything else (shard reads, the LiDAR
histogram, collate) is the same code on both sides. One pass of
CARLAWebData(PACK, batch_size=8, adapter="transfuser2022", num_workers=0) per round after
torch.set_num_threads(1), A and B alternating (AB, BA, ...); A's and B's batches are compared
key by key first (the tool fails unless equal). Prints CPU and wall ms per sample, medians
(ranges), and B / A.

    .venv/bin/python tools/bench_tf2022_parts.py --ref 12cb398 --workdir /tmp/tf2022_parts
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any, Callable

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from carla_wds import CARLAWebData  # noqa: E402
from carla_wds.load.decode import fields  # noqa: E402
from carla_wds.load.adapters.transfuser2022 import TRANSFUSER2022  # noqa: E402
from carla_wds.modalities import bev, depth  # noqa: E402

# (module path, package, the swapped attribute's owner in this tree, attribute, owner at REF)
SWAPS: tuple[tuple[str, str, Any, str, Callable[[types.ModuleType], Any]], ...] = (
    ("carla_wds/modalities/bev.py", "carla_wds.modalities", bev.BitPlanesCodec, "decode",
     lambda m: m.BitPlanesCodec),
    ("carla_wds/modalities/depth.py", "carla_wds.modalities", depth.DepthCarla24Codec, "decode",
     lambda m: m.DepthCarla24Codec),
    ("carla_wds/load/classes.py", "carla_wds.load", fields, "served", lambda m: m),   # at REF
    ("carla_wds/load/adapters/transfuser2022.py", "carla_wds.load.adapters", TRANSFUSER2022,
     "transform", lambda m: m.TRANSFUSER2022),
)


def module_at(ref: str, path: str, package: str) -> types.ModuleType:
    """The module's source at `ref`, executed as a sibling module of `package`."""
    src = subprocess.run(["git", "-C", str(ROOT), "show", f"{ref}:{path}"], check=True,
                         capture_output=True, text=True).stdout
    mod = types.ModuleType(f"{package}._ab_{Path(path).stem}")
    mod.__package__ = package
    sys.modules[mod.__name__] = mod   # dataclasses look their module up there
    exec(compile(src, f"{ref}:{path}", "exec"), mod.__dict__)
    return mod


def sides(ref: str) -> dict[str, list[tuple[Any, str, Any]]]:
    """'A' and 'B' -> (owner, attribute, value) to set."""
    out: dict[str, list[tuple[Any, str, Any]]] = {"A": [], "B": []}
    for path, package, owner, name, at_ref in SWAPS:
        out["A"].append((owner, name, getattr(at_ref(module_at(ref, path, package)), name)))
        out["B"].append((owner, name, getattr(owner, name)))
    return out


def use(settings: list[tuple[Any, str, Any]]) -> None:
    for owner, name, value in settings:
        if owner is TRANSFUSER2022:
            object.__setattr__(owner, name, value)   # the adapter is a frozen dataclass
        else:
            setattr(owner, name, value)


def one_pass(pack: str, augment: bool) -> tuple[float, float, list[dict]]:
    """(CPU ms, wall ms) per sample of one pass, and its batches."""
    kw = {"augment": True, "mode": "train", "seed": 0} if augment else {}
    c0, t0 = time.process_time(), time.perf_counter()
    batches = list(CARLAWebData(pack, batch_size=8, adapter="transfuser2022", num_workers=0,
                                **kw))
    n = sum(int(b["valid"].sum()) for b in batches)
    return ((time.process_time() - c0) / n * 1e3, (time.perf_counter() - t0) / n * 1e3,
            batches)


def same(a: list[dict], b: list[dict]) -> int:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert list(x) == list(y)
        for k in x:
            if isinstance(x[k], torch.Tensor):
                assert x[k].dtype == y[k].dtype and torch.equal(x[k], y[k]), k
            else:
                assert x[k] == y[k], k
    return sum(int(x["valid"].sum()) for x in a)


def make_pack(work: Path, episodes: int, frames: int) -> Path:
    raw, pack = work / "raw", work / "pack"
    cli = [sys.executable, "-m", "carla_wds.cli"]
    if not raw.exists():
        subprocess.run([*cli, "synth", str(raw), "--layout", "transfuser2022", "--episodes",
                        str(episodes), "--frames", str(frames), "--image-size", "160x960"],
                       check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    if not pack.exists():
        subprocess.run([*cli, "pack", str(raw), str(pack), "--layout", "transfuser2022",
                        "--allow-pickle-input"], check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    return pack


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ref", required=True, help="the baseline commit")
    ap.add_argument("--workdir", default="/tmp/tf2022_parts")
    ap.add_argument("--episodes", type=int, default=2)
    ap.add_argument("--frames", type=int, default=41)
    ap.add_argument("--rounds", type=int, default=6, help="passes per side")
    ap.add_argument("--augment", action="store_true", help="their rotation on (train mode)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    pack = str(make_pack(Path(args.workdir).resolve(), args.episodes, args.frames))
    settings = sides(args.ref)
    got = {}
    for side in "AB":
        use(settings[side])
        got[side] = one_pass(pack, args.augment)[2]
    print(f"A ({args.ref}) and B (this tree) serve the same batches: "
          f"{same(got['A'], got['B'])} samples, augment={args.augment}")
    times: dict[str, list[tuple[float, float]]] = {"A": [], "B": []}
    for r in range(args.rounds):
        for side in ("AB" if r % 2 == 0 else "BA"):
            use(settings[side])
            times[side].append(one_pass(pack, args.augment)[:2])
    use(settings["B"])
    med = {}
    for side in "AB":
        cpu, wall = [t[0] for t in times[side]], [t[1] for t in times[side]]
        med[side] = statistics.median(cpu)
        print(f"{side}: CPU ms/sample {med[side]:.2f} ({min(cpu):.2f}-{max(cpu):.2f}), wall "
              f"ms/sample {statistics.median(wall):.2f} ({min(wall):.2f}-{max(wall):.2f})")
    print(f"B / A (CPU): {med['B'] / med['A']:.2f}x, {med['A'] - med['B']:.2f} ms less a sample")


if __name__ == "__main__":
    main()
