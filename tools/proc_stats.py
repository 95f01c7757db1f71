"""What a benchmark cell cost its process tree, from Linux /proc and getrusage: peak RSS of the
process and its descendants, CPU seconds (reaped children through getrusage, live ones
through /proc), and the hypervisor's steal time."""
from __future__ import annotations

import os
import resource
import threading
import time


def children(pid: int) -> list[int]:
    kids: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                kids += [int(k) for k in f.read().split()]
    except OSError:
        pass
    return kids


def tree_rss_mb(root: int) -> float:
    """RSS of `root` and all its descendants, in MB (Linux /proc; cheap: no full /proc scan)."""
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        todo += children(pid)
        try:
            with open(f"/proc/{pid}/statm") as f:
                total += int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except OSError:
            pass
    return total / 1e6


class PeakRSS:
    """The largest tree_rss_mb of this process while the block runs, sampled every 50 ms."""

    def __init__(self) -> None:
        self.peak, self._stop = 0.0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, tree_rss_mb(os.getpid()))
            time.sleep(0.05)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def cpu_seconds(who: int) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def alive_children_cpu() -> float:
    """CPU seconds so far of this process's live children (persistent workers, which
    getrusage counts only once they are reaped)."""
    total = 0.0
    for pid in children(os.getpid()):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            pass
    return total


def children_cpu() -> float:
    """CPU seconds of this process's children: reaped ones, and live ones (persistent workers)."""
    return cpu_seconds(resource.RUSAGE_CHILDREN) + alive_children_cpu()


def steal_seconds() -> float:
    """Time the hypervisor gave this VM's CPUs to others since boot, all CPUs summed."""
    with open("/proc/stat") as f:
        fields = f.readline().split()
    return int(fields[8]) / os.sysconf("SC_CLK_TCK") if len(fields) > 8 else float("nan")
