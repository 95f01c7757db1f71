#!/usr/bin/env python
"""How long the training thread waits for each batch, pin_memory=True against False, at
0/2/4 workers, with a small model step on the GPU (issue 44).

    .venv/bin/python tools/bench_pin.py --workdir /tmp/bench_pin

It synthesises tcp_roach routes at TCP's camera size (256x900), packs them, and serves them
with adapter="tcp" (2.76 MB of float32 image per sample) or, with --adapter none, as plain
CARLABatches (uint8 images). Each step takes the next batch, copies it to the GPU with
non_blocking=True and runs a forward and backward pass of a small conv net on the images.
The wait per batch is the training thread's time in `next()` plus in the `.to()` call: with
pinned memory the copy is queued and returns, from pageable memory it returns only once the
copy is done, behind the steps already queued. Step time is the wall time per measured step,
synchronised at the end. The first --warmup batches (fork, first slot writes, cuDNN) are left
out.

On a host without CUDA it says so, runs the same loop on the CPU for two tiny batches per
worker count (a dry run of the code path, not a measurement), and exits 0.
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

import torch

FULL_SIZE = (256, 900)   # TCP's camera (H, W)


def prepare(workdir: Path, samples: int, image_size: tuple[int, int] | None) -> Path:
    """A tcp_roach pack of at least `samples` samples (made once per workdir)."""
    from carla_wds.pack.packer import PackOptions, pack
    from carla_wds.pack.synth import synth_dataset
    out = workdir / "shards"
    if (out / "manifest.json").exists():
        return out
    frames = 60
    episodes = max(1, math.ceil(samples / (frames - 4)))   # a route's last 4 frames: no future
    synth_dataset(workdir / "raw", "tcp_roach", episodes=episodes, frames=frames, seed=0,
                  image_size=image_size, progress=False)
    pack(workdir / "raw", out, PackOptions(layout="tcp_roach", allow_pickle_input=True,
                                           max_samples=256, overwrite=True, progress=False))
    return out


def small_net(device: torch.device) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """A few strided convolutions: a step of a few ms, so the copy matters."""
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 5, stride=4), torch.nn.ReLU(),
        torch.nn.Conv2d(32, 64, 3, stride=2), torch.nn.ReLU(),
        torch.nn.Conv2d(64, 64, 3, stride=2), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(64, 2)).to(device)
    return net, torch.optim.SGD(net.parameters(), lr=1e-3)


def images_of(batch, adapter: str | None) -> torch.Tensor:
    if adapter:   # TCP's batch: "front_img" (B, 3, H, W) float32, normalised
        return batch["front_img"]
    return batch.images[:, 0].float() / 255   # (B, n_cameras, 3, H, W) uint8 -> camera 0


def measure(shards: Path, adapter: str | None, workers: int, pin: bool, args,
            device: torch.device) -> dict[str, float]:
    """The wait per batch (ms) and the step time (ms) of one loader setting."""
    from carla_wds import CARLAWebData
    kw = dict(adapter=adapter) if adapter else dict(image_size=FULL_SIZE)
    data = CARLAWebData(str(shards), batch_size=args.batch_size, num_workers=workers,
                        pin_memory=pin, mode="train", seed=0, **kw)
    net, opt = small_net(device)
    waits, it = [], iter(data)
    total = args.warmup + args.batches
    for i in range(min(total, len(data))):
        if i == args.warmup:
            sync(device)
            start = time.perf_counter()
        t0 = time.perf_counter()
        batch = next(it)
        x = images_of(batch, adapter).to(device, non_blocking=True)
        waits.append(time.perf_counter() - t0)
        loss = net(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        del batch, x
    sync(device)
    measured = waits[args.warmup:]
    step = (time.perf_counter() - start) / max(1, len(measured)) if measured else math.nan
    del it
    return {"wait_ms": 1e3 * statistics.median(measured) if measured else math.nan,
            "wait_mean_ms": 1e3 * statistics.fmean(measured) if measured else math.nan,
            "step_ms": 1e3 * step, "batches": len(measured)}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def table(rows: list[tuple[int, bool, dict]]) -> None:
    print("| num_workers | pin_memory | wait per batch, median ms | mean ms | step ms | "
          "batches |")
    print("|---:|:---|---:|---:|---:|---:|")
    for workers, pin, r in rows:
        print(f"| {workers} | {pin} | {r['wait_ms']:.1f} | {r['wait_mean_ms']:.1f} | "
              f"{r['step_ms']:.1f} | {r['batches']} |", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workdir", default="/tmp/bench_pin")
    p.add_argument("--workers", default="0,2,4")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--batches", type=int, default=40, help="measured batches per setting")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--adapter", default="tcp", help='"tcp", or "none" for plain CARLABatches')
    args = p.parse_args(argv)
    adapter = None if args.adapter == "none" else args.adapter
    workers = [int(w) for w in args.workers.split(",")]
    workdir = Path(args.workdir)
    if torch.cuda.is_available():
        device = torch.device("cuda", torch.cuda.current_device())
        print(f"GPU: {torch.cuda.get_device_name(device)}", flush=True)
        shards = prepare(workdir, args.batch_size * (args.warmup + args.batches), None)
        pins = (False, True)
    else:
        print("no CUDA on this host (torch.cuda.is_available() is False): pinned memory "
              "cannot be measured here. A dry run of the loop on the CPU, unpinned, 2 tiny "
              "batches per worker count; not a measurement.", flush=True)
        device, pins = torch.device("cpu"), (False,)
        args.batch_size, args.warmup, args.batches = 2, 0, 2
        shards = prepare(workdir / "dry", 8, (48, 64))
    rows = [(w, pin, measure(shards, adapter, w, pin, args, device))
            for w in workers for pin in pins]
    table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
