#!/usr/bin/env python
"""What first-touching memory costs on this machine: the per-worker start-up cost of a loader.

Each DataLoader worker writes its batches into shared ring slots (carla_wds/ring.py) that it
touches for the first time, 50 MB a slot. On a VM whose memory the host backs lazily (and takes
back when the guest frees it), a first touch can cost several times what a page that was used
recently costs. This tool maps shared anonymous memory (like the ring) in 50 MB chunks and times
the first write to each chunk, for one process and for two at once:

    .venv/bin/python tools/bench_first_touch.py [--chunks 40] [--rounds 3]
"""
from __future__ import annotations

import argparse
import mmap
import os
import statistics
import time

import numpy as np

CHUNK = 32 * 4 * 256 * 512 * 3   # one batch of the benchmarks: 32 x 4 cameras x 256 x 512 x 3


def touch_chunks(chunks: int) -> list[float]:
    """ms to first-write each 50 MB chunk of a fresh MAP_SHARED | MAP_ANONYMOUS mapping."""
    mem = mmap.mmap(-1, chunks * CHUNK)
    out = []
    for i in range(chunks):
        t = time.perf_counter()
        np.frombuffer(mem, np.uint8, count=CHUNK, offset=i * CHUNK)[::4096] = 1
        out.append((time.perf_counter() - t) * 1e3)
    return out


def in_children(n: int, chunks: int) -> list[list[float]]:
    """touch_chunks in n forked processes at once."""
    pipes, pids = [], []
    for _ in range(n):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.write(w, " ".join(f"{x:.1f}" for x in touch_chunks(chunks)).encode())
            os._exit(0)
        os.close(w)
        pipes.append(r)
        pids.append(pid)
    results = []
    for r, pid in zip(pipes, pids):
        with os.fdopen(r) as f:
            results.append([float(x) for x in f.read().split()])
        os.waitpid(pid, 0)
    return results


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--chunks", type=int, default=40)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    print(f"first write of {args.chunks} chunks of {CHUNK / 2**20:.0f} MiB, ms per chunk\n")
    print("| round | processes | min | median | max | total s |")
    print("|---:|---:|---:|---:|---:|---:|")
    for rnd in range(args.rounds):
        for n in (1, 2):
            for times in in_children(n, args.chunks):
                print(f"| {rnd} | {n} | {min(times):.0f} | {statistics.median(times):.0f} | "
                      f"{max(times):.0f} | {sum(times) / 1e3:.2f} |", flush=True)


if __name__ == "__main__":
    main()
