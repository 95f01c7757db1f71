"""The pack's worker processes (`pack --workers N`): chunks of frames go out over one pipe per
worker and come back in the stream's order, with at most `ahead` chunks out at once.

multiprocessing.Pool replaced a worker that died (SIGKILL, the OOM killer, a segfault) but
neither redid nor failed the task it held, so the pack waited forever (and a SLURM part sat
"running" until its wall time). Here each worker holds one chunk at a time: its death closes
its pipe, which the main process sees at once, and the chunk it held is known, so the pack
fails in one line naming it. Pipes, not queues: a spawn context's queues and locks are named
POSIX semaphores in /dev/shm, which a killed pack leaves behind; a pipe leaves nothing.
"""
from __future__ import annotations

import logging
import signal
from multiprocessing import get_context
from multiprocessing.connection import Connection, wait
from typing import Any, Callable, Generic, Iterable, Iterator, TypeVar

from .errors import PackError

log = logging.getLogger(__name__)
T = TypeVar("T")
R = TypeVar("R")


def _serve(conn: Connection, fn: Callable[[Any], Any], initializer: Callable[..., None] | None,
           initargs: tuple[Any, ...]) -> None:
    """A worker: (True, fn(item)) or (False, its exception) for each item, until None or EOF."""
    # Ctrl-C reaches the whole process group: the main process stops the pack and its workers
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if initializer is not None:
        initializer(*initargs)
    while True:
        try:
            item = conn.recv()
        except EOFError:
            return
        if item is None:
            return
        try:
            reply: tuple[bool, Any] = (True, fn(item))
        except Exception as exc:   # the main process raises it
            reply = (False, exc)
        try:
            conn.send(reply)
        except Exception as exc:   # an unpicklable result or exception
            conn.send((False, PackError(f"a pack worker's reply could not be sent back "
                                        f"({exc!r}); this is a carla-wds bug")))


class WorkerPool(Generic[T, R]):
    """`n` spawned processes running `fn`; `describe(item)` names an item in an error."""

    def __init__(self, n: int, fn: Callable[[T], R], describe: Callable[[T], str],
                 initializer: Callable[..., None] | None = None,
                 initargs: tuple[Any, ...] = ()) -> None:
        ctx = get_context("spawn")
        self.describe = describe
        self.workers: list[tuple[Any, Connection]] = []
        try:
            for _ in range(n):
                mine, theirs = ctx.Pipe()
                proc = ctx.Process(target=_serve, args=(theirs, fn, initializer, initargs),
                                   daemon=True, name="carla-wds pack worker")
                proc.start()
                theirs.close()   # so that the worker's death reads as EOF here
                self.workers.append((proc, mine))
        except BaseException:
            self.close()
            raise

    def imap(self, items: Iterable[T], ahead: int) -> Iterator[R]:
        """fn of each item, in order; each worker holds one item, at most `ahead` are out."""
        source, done = iter(items), {}
        sent = taken = 0
        more, idle = True, list(self.workers)
        busy: dict[Connection, tuple[Any, T, int]] = {}
        while True:
            while more and idle and sent - taken < ahead:
                try:
                    item = next(source)
                except StopIteration:
                    more = False
                    break
                proc, conn = idle.pop()
                self._send(proc, conn, item)
                busy[conn] = (proc, item, sent)
                sent += 1
            if taken in done:
                yield done.pop(taken)
                taken += 1
                continue
            if not busy:
                return
            for conn in wait(list(busy)):
                proc, item, seq = busy.pop(conn)
                done[seq] = self._receive(proc, conn, item)
                idle.append((proc, conn))

    def _send(self, proc: Any, conn: Connection, item: T) -> None:
        try:
            conn.send(item)
        except (EOFError, OSError):   # BrokenPipeError: it died before it took the item
            raise self._died(proc, f"before it took {self.describe(item)}") from None

    def _receive(self, proc: Any, conn: Connection, item: T) -> R:
        try:
            ok, value = conn.recv()
        except (EOFError, OSError):
            raise self._died(proc, f"while it held {self.describe(item)}") from None
        if not ok:
            raise value
        return value

    def _died(self, proc: Any, when: str) -> PackError:
        proc.join(5)   # it closed its pipe, so it is exiting: take its exit status
        code = proc.exitcode
        if code is None:
            how = "closed its pipe but did not exit"
        elif code < 0:
            how = f"was killed by {signal.Signals(-code).name}"
        else:
            how = f"exited with status {code}"
        return PackError(f"a pack worker (pid {proc.pid}) {how} {when}: the OOM killer "
                         "(the kernel log names it), a kill, or a crash in a reader (a damaged "
                         "input file?); nothing of that chunk was written. Fix: run the same command again (with "
                         "--resume; `pack --plan` resumes by itself): it goes on from the last "
                         "committed shard. If it dies at the same place again, those files "
                         "crash their reader: check or remove them")

    def close(self) -> None:
        """Stop every worker (mid-chunk ones too: the pack has ended or failed)."""
        for proc, _ in self.workers:
            if proc.is_alive():
                proc.terminate()
        for proc, conn in self.workers:
            proc.join(5)
            if proc.is_alive():
                proc.kill()
                proc.join()
            conn.close()
