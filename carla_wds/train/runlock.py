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

import fcntl
import json
import logging
import os
import socket
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

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


def try_lock(path: Path) -> tuple[int | None, dict[str, Any]]:
    """(fd, {}) once this process holds an exclusive flock on `path` (created if missing) with
    its holder_info() written in it; (None, the holder's note) while a live process holds it.
    A holder may delete the file when done (a pack's output lock): a lock taken on a file no
    longer at `path` is let go and taken again. OSError: this file system has no flock."""
    while True:
        # O_CREAT without O_TRUNC: a process that fails to lock must not wipe the holder's note
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            return None, holder
        except OSError:
            os.close(fd)
            raise
        mine = os.fstat(fd)
        try:
            there = os.stat(path)
            if (there.st_dev, there.st_ino) == (mine.st_dev, mine.st_ino):
                break
        except FileNotFoundError:
            pass
        os.close(fd)   # deleted by its holder as we took it: lock the file now at `path`
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(holder_info()).encode() + b"\n", 0)
    return fd, {}


def holder_info() -> dict[str, Any]:
    return {"pid": os.getpid(), "host": socket.gethostname(),
            "command": " ".join(getattr(sys, "orig_argv", sys.argv)),
            "started": time.strftime("%Y-%m-%d %H:%M:%S %z")}


def _read_holder(fd: int) -> dict[str, Any]:
    try:
        return json.loads(os.pread(fd, 1 << 16, 0) or b"{}")
    except (OSError, ValueError):
        return {}   # the holder has not written its note yet, or it is not ours


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
