"""The ranks of a DDP test started from pytest itself (issue 39), as Mosaic Streaming's
`world_size` marker does: a fresh interpreter per rank, torch's import and torchrun's agent
cost several seconds a launch; a fork of the pytest process costs milliseconds.

    results = run_ranks(fn, arg, ..., world_size=2)   # fn(arg, ...) on every rank
    proc = run_script(path, *argv, nproc=2)           # a tests/scripts file, as torchrun runs it
    proc = run_module("carla_wds.train", *argv)       # `torchrun -m carla_wds.train argv...`

Each rank is forked (multiprocessing's "fork" context) and gets torchrun's environment:
RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, ROLE_RANK, ROLE_WORLD_SIZE,
MASTER_ADDR and MASTER_PORT (a free port), and OMP_NUM_THREADS=1 (torch.set_num_threads(1)),
so that torch.distributed's env:// rendezvous, carla_wds.dist and Lightning's
TorchElasticEnvironment see what they see under torchrun. run_ranks joins the gloo process
group before fn (init=False leaves that to fn) and, after it, leaves together (a barrier,
then destroy_process_group). A rank's stdout and stderr (its DataLoader workers' too) go to a
file of its own, returned with its result and quoted in any failure; the root logger starts
without pytest's handlers, as in a fresh interpreter.

Failures name the rank: an exception's traceback (the other ranks are then stopped after a
short grace), an exit without a result (its exit code), or no end within `timeout`: then
every process of the ranks (DataLoader workers included) first writes each thread's stack
(faulthandler, on SIGABRT) and all are killed, so none is left behind to load the suite.

A fork of a process with threads can hang inside fork itself (CPython 3.11, gh-112275; see
carla_wds/load/transport/workers.py): the pytest process may run a thread (moto's server, for one). So
each rank reports first thing that it runs Python; one that does not within START_WAIT is
killed and forked again (it never reached the rendezvous, so the others wait for it).

Tests that use these start processes: they carry the `ddp` marker (tests/markers.py).
"""
from __future__ import annotations

import faulthandler
import logging
import multiprocessing
import os
import runpy
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any, Callable

from .helpers import _signal_all, process_tree

_FORK = multiprocessing.get_context("fork")
START_WAIT = 20.0   # seconds a forked rank has to reach Python
GRACE = 5.0         # seconds the other ranks have to end after one failed
STARTS = 3          # forks of one rank at most


def run_ranks(fn: Callable[..., Any], *args: Any, world_size: int = 2, timeout: float = 240,
              init: bool = True) -> list[Any]:
    """fn(*args) on `world_size` forked ranks (gloo); each rank's result, in rank order."""
    return [r for r, _ in _Ranks(fn, args, world_size, init).run(timeout)]


def run_script(path: str | Path, *argv: str, nproc: int = 2,
               timeout: float = 240) -> subprocess.CompletedProcess:
    """A script written for `torchrun --standalone --nproc_per_node N path argv...`, run as
    __main__ on N forked ranks (it joins the process group itself, from the environment);
    stdout is every rank's output, rank 0's first."""
    outputs = _Ranks(_script, (str(path), [str(a) for a in argv]), nproc, False).run(timeout)
    return subprocess.CompletedProcess([str(path), *argv], 0, "".join(o for _, o in outputs), "")


def run_module(module: str, *argv: str, nproc: int = 2,
               timeout: float = 240) -> subprocess.CompletedProcess:
    """`torchrun --standalone --nproc_per_node N -m module argv...` on N forked ranks: the
    module runs as __main__ (runpy, as `python -m` runs it) and joins the process group itself."""
    outputs = _Ranks(_module, (module, [str(a) for a in argv]), nproc, False).run(timeout)
    return subprocess.CompletedProcess(["-m", module, *argv], 0,
                                       "".join(o for _, o in outputs), "")


def _module(module: str, argv: list[str]) -> None:
    sys.argv = [module, *argv]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


def _script(path: str, argv: list[str]) -> None:
    sys.argv = [path, *argv]
    sys.path.insert(0, str(Path(path).resolve().parent))   # as `python path` has it
    runpy.run_path(path, run_name="__main__")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Ranks:
    def __init__(self, fn: Callable[..., Any], args: tuple, world_size: int, init: bool) -> None:
        self.fn, self.args, self.world, self.init = fn, args, world_size, init
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="ranks-"))
        self.procs: dict[int, Any] = {}
        self.conns: dict[int, Connection] = {}
        self.forked: dict[int, tuple[float, int]] = {}   # rank -> (time, forks so far)
        self.started: set[int] = set()
        self.results: dict[int, Any] = {}
        self.failed: dict[int, str] = {}

    def output(self, rank: int) -> str:
        path = self.dir / f"rank{rank}.out"
        return path.read_text(errors="replace") if path.exists() else ""

    def run(self, timeout: float) -> list[tuple[Any, str]]:
        for rank in range(self.world):
            self._fork(rank)
        deadline = time.monotonic() + timeout
        try:
            while len(self.results) < self.world:
                if self.failed:
                    self._end_after_failure()
                if time.monotonic() > deadline:
                    self._timed_out(timeout)
                self._poll(min(1.0, max(0.0, deadline - time.monotonic())))
            for p in self.procs.values():
                p.join(30)
            return [(self.results[r], self.output(r)) for r in range(self.world)]
        finally:
            self._kill(list(self.procs))
            for f in self.dir.iterdir():
                f.unlink()
            self.dir.rmdir()

    def _fork(self, rank: int) -> None:
        ours, theirs = _FORK.Pipe(duplex=False)
        env = {"RANK": rank, "LOCAL_RANK": rank, "WORLD_SIZE": self.world,
               "LOCAL_WORLD_SIZE": self.world, "GROUP_RANK": 0, "GROUP_WORLD_SIZE": 1,
               "ROLE_RANK": rank, "ROLE_WORLD_SIZE": self.world, "ROLE_NAME": "default",
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": self.port, "OMP_NUM_THREADS": 1}
        proc = _FORK.Process(target=_rank_main, name=f"rank{rank}", daemon=False, args=(
            self.fn, self.args, {k: str(v) for k, v in env.items()}, self.init,
            str(self.dir / f"rank{rank}.out"), theirs))
        proc.start()
        theirs.close()
        self.procs[rank], self.conns[rank] = proc, ours
        self.forked[rank] = (time.monotonic(), self.forked.get(rank, (0, 0))[1] + 1)

    def _poll(self, seconds: float) -> None:
        live = {c: r for r, c in self.conns.items() if r not in self.results | self.failed}
        for conn in wait(list(live), seconds):
            rank = live[conn]
            try:
                kind, value = conn.recv()
            except (EOFError, OSError):   # it exited; why, the exit code says
                self.procs[rank].join(10)
                self.failed[rank] = (f"rank {rank} exited with code {self.procs[rank].exitcode}"
                                     " before it returned a result")
                continue
            if kind == "started":
                self.started.add(rank)
            elif kind == "ok":
                self.results[rank] = value
            else:
                self.failed[rank] = f"rank {rank} raised:\n{value}"
        for rank, (at, forks) in list(self.forked.items()):
            if rank not in self.started and rank not in self.failed and \
                    time.monotonic() - at > START_WAIT:
                self._kill([rank])
                if forks >= STARTS:
                    self.failed[rank] = f"rank {rank} did not reach Python in {forks} forks"
                else:   # hung in fork (module docstring): it never joined the rendezvous
                    self._fork(rank)

    def _end_after_failure(self) -> None:
        end = time.monotonic() + GRACE
        while time.monotonic() < end and len(self.results) + len(self.failed) < self.world:
            self._poll(0.2)
        self._kill(list(self.procs))
        raise AssertionError("\n\n".join(
            f"{why}\n--- rank {r}'s output (tail) ---\n{self.output(r)[-4000:]}"
            for r, why in sorted(self.failed.items())))

    def _timed_out(self, timeout: float) -> None:
        trees = [p for r in sorted(self.procs) for p in process_tree(self.procs[r].pid)]
        for pid in trees:   # one at a time, so that the stacks do not interleave
            _signal_all([pid], signal.SIGABRT)
            time.sleep(0.3)
        time.sleep(1)
        self._kill(list(self.procs))
        pending = [r for r in range(self.world) if r not in self.results]
        raise AssertionError(
            f"ranks {pending} of {self.world}: no end after {timeout} s; their stacks:\n" +
            "\n".join(f"--- rank {r} ---\n{_stacks(self.output(r))[-8000:]}" for r in pending))

    def _kill(self, ranks: list[int]) -> None:
        for rank in ranks:
            proc = self.procs[rank]
            if proc.exitcode is None:
                _signal_all(process_tree(proc.pid), signal.SIGKILL)
                proc.join(10)
            else:   # its DataLoader workers may outlive it a moment; their parent is init now
                proc.join(0)


def _stacks(output: str) -> str:
    """A rank's output less faulthandler's "Extension modules:" lines: a process that has
    imported much (scipy and all, late in a -n worker) lists thousands of characters of them
    after each stack, which pushed the frames themselves out of the kept tail."""
    return "\n".join(line for line in output.splitlines()
                     if not line.startswith("Extension modules:"))


def _rank_main(fn: Callable[..., Any], args: tuple, env: dict[str, str], init: bool,
               out: str, conn: Connection) -> None:
    conn.send(("started", os.getpid()))
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    faulthandler.enable(file=sys.stderr, all_threads=True)   # its stack on SIGABRT
    os.environ.update(env)
    logging.root.handlers.clear()   # pytest's (in-memory) handlers: a fresh interpreter has
    logging.root.setLevel(logging.WARNING)   # none, so a CLI's basicConfig prints its lines
    try:
        import torch
        import torch.distributed as tdist
        torch.set_num_threads(1)   # torchrun's OMP_NUM_THREADS=1
        if init:
            tdist.init_process_group("gloo")
        try:
            result = fn(*args)
        except SystemExit as e:   # a script's sys.exit(0) is a success, as under torchrun
            if e.code not in (None, 0):
                raise
            result = None
        if init and tdist.is_initialized():
            tdist.barrier()   # leave together (carla_wds.dist.cleanup)
            tdist.destroy_process_group()
        sys.stdout.flush()
        sys.stderr.flush()
        conn.send(("ok", result))
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        conn.send(("error", traceback.format_exc()))
