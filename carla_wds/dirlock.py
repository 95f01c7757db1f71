"""An exclusive flock on a file that names its holder: one trainer per run directory
(train/runlock.py), one pack per output folder (pack/output.py).

flock is released by the kernel when its holder dies, so a lock left by a dead process never
blocks. The holder's pid, host, command and start time are written into the file, so that the
process refused can name who holds it.
"""
from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any


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
