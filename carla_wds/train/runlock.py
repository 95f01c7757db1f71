"""One trainer per run directory: rank 0 holds an flock on run_dir/.lock for the whole run.

A torchrun agent killed with SIGKILL leaves its ranks training (they run in sessions of their
own), and a restart with resume=auto then wrote into the same metrics.jsonl and checkpoint. The
lock makes the second start fail instead, naming the holder. flock is released by the kernel
when its holder dies, so a lock left by a dead process never blocks; the file itself stays
(deleting it would let two processes lock two different inodes).

On NFS, Linux maps flock to byte-range locks the server enforces across clients (NFSv4, or v3
with lockd); on a file system without locks the error says so.
"""
from __future__ import annotations

import logging
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from ..dirlock import try_lock

log = logging.getLogger(__name__)
LOCK_NAME = ".lock"


class RunDirLocked(RuntimeError):
    """Another live process holds this run directory; the message names it and the fix."""


class RunLock:
    """An exclusive, non-blocking flock on run_dir/.lock with the holder's pid, host, command."""

    def __init__(self, run_dir: str | Path) -> None:
        self.path = Path(run_dir) / LOCK_NAME
        self.fd: int | None = None

    def acquire(self) -> "RunLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.fd, holder = try_lock(self.path)
        except OSError as exc:
            raise RunDirLocked(f"run_dir {self.path.parent}: cannot lock {self.path} ({exc}); "
                               "this file system has no working flock. Fix: put run_dir on a "
                               "local disk or an NFS mount with locking") from None
        if self.fd is None:
            raise RunDirLocked(_locked_message(self.path.parent, holder))
        return self

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)   # closing the only descriptor releases the flock
            self.fd = None


def _locked_message(run_dir: Path, holder: dict[str, Any]) -> str:
    pid, host = holder.get("pid", "unknown"), holder.get("host", "unknown host")
    command = f", command: {holder['command']}" if holder.get("command") else ""
    started = f", since {holder['started']}" if holder.get("started") else ""
    return (f"run_dir {run_dir} is in use by another trainer: pid {pid} on {host}{started}"
            f"{command}. Fix: wait for it to finish, or stop it (kill {pid} on {host}), or "
            "pass another run_dir=; to evaluate its checkpoint meanwhile, use run_dir=OTHER "
            f"resume={run_dir}/checkpoint.pt eval_only=true")


@contextmanager
def hold_run_dir(run_dir: str | Path, rank: int, world: int, device: str) -> Iterator[None]:
    """Rank 0 locks run_dir for the block; every rank learns whether it did before any work.

    When rank 0 fails, each rank fails too: rank 0 with the holder's details, the others with
    a line pointing at it; a barrier lets every rank say so before any exits (torchrun stops
    the rest of the group once one rank has exited).
    """
    import torch
    import torch.distributed as tdist
    lock, error = RunLock(run_dir), None
    if rank == 0:
        try:
            lock.acquire()
        except RunDirLocked as exc:
            error = exc
    if world > 1:
        failed = torch.tensor([0 if error is None else 1], device=device)
        tdist.broadcast(failed, src=0)
        if failed.item():
            if rank != 0:
                error = RunDirLocked(f"rank {rank} of {world}: not training, because rank 0 "
                                     f"could not lock run_dir {run_dir} (see rank 0's error)")
                log.error("%s", error)   # before the barrier: said before rank 0 exits
                error.reported = True
            tdist.barrier()
    if error is not None:
        raise error
    try:
        yield
    finally:
        lock.release()
