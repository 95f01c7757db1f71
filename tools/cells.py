"""How a benchmark tool runs one of its cells: a fresh process of the tool itself.

`run(cmd)` is `subprocess.run(cmd, capture_output=True, text=True)` for a command that
re-runs the calling tool (`[sys.executable, __file__, "--child", ...]`), and by default
that is exactly what it does: a new interpreter per cell, its imports its own.

With `CARLA_WDS_BENCH_FORK_CELLS=1` in the environment (the test suite's smoke runs set it:
tests/benchruns.py) each cell is still a process of its own that runs the tool's script as
`__main__` with the command's arguments, but forked from a zygote: an interpreter started once
per tool run that imported carla_wds.load (torch, numpy, OpenCV) and did nothing else, so that
a cell skips the ~2 s of imports that a smoke run's tiny cells are otherwise made of. The
zygote, not the tool, forks: a tool that has started threads (a LAZ decoder's pool, an S3
server) is never forked. Each tool times its cells after their imports, so only the import
time and the memory figures (the zygote's pages count in a cell's RSS) differ; a documented
figure comes from a run without it. Cells run one at a time.
"""
from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time

FORK = "CARLA_WDS_BENCH_FORK_CELLS"
_zygote: list[subprocess.Popen] = []


def forking() -> bool:
    return os.environ.get(FORK) == "1"


def run(cmd: list[str], check: bool = False, cwd: str | os.PathLike | None = None,
        timeout: float | None = None) -> subprocess.CompletedProcess:
    """One cell: `cmd` in a fresh process, forked from the zygote when the environment says
    so and `cmd` runs a script with this interpreter."""
    script = len(cmd) > 1 and cmd[0] == sys.executable and cmd[1].endswith(".py")
    if not (forking() and script):
        return subprocess.run(cmd, capture_output=True, text=True, check=check, cwd=cwd,
                              timeout=timeout)
    with tempfile.TemporaryDirectory(prefix="cell_") as tmp:
        out, err = os.path.join(tmp, "stdout"), os.path.join(tmp, "stderr")
        code = _ask(cmd, {"argv": cmd[1:], "cwd": None if cwd is None else str(cwd),
                          "out": out, "err": err}, timeout)
        with open(out) as o, open(err) as e:
            proc = subprocess.CompletedProcess(cmd, code, o.read(), e.read())
    if check:
        proc.check_returncode()
    return proc


def _ask(cmd: list[str], request: dict, timeout: float | None) -> int:
    """The cell's exit status; past `timeout` it is killed, as subprocess.run would."""
    if not _zygote or _zygote[0].poll() is not None:
        tools = os.path.dirname(os.path.abspath(__file__))
        _zygote[:] = [subprocess.Popen(
            [sys.executable, "-c", f"import sys; sys.path.insert(0, {tools!r}); import cells; "
             "cells.serve()"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)]
        atexit.register(_end, _zygote[0])
    zygote = _zygote[0]
    zygote.stdin.write(json.dumps(request).encode() + b"\n")
    zygote.stdin.flush()
    pid = _reply(zygote, None)["pid"]
    try:
        return _reply(zygote, None if timeout is None else time.monotonic() + timeout)["code"]
    except subprocess.TimeoutExpired:
        os.kill(pid, signal.SIGKILL)
        _reply(zygote, None)   # reaped
        raise subprocess.TimeoutExpired(cmd, timeout) from None


def _end(zygote: subprocess.Popen) -> None:
    """At the tool's exit: the zygote reads the end of its input and ends; waited for, so
    that its CPU time (and its cells') counts in the tool's, as fresh cells' did."""
    zygote.stdin.close()
    try:
        zygote.wait(timeout=30)
    except subprocess.TimeoutExpired:
        zygote.kill()
        zygote.wait()


def _reply(zygote: subprocess.Popen, deadline: float | None) -> dict:
    """The zygote's next line (it writes one line at a time and waits for the next ask)."""
    fd, line = zygote.stdout.fileno(), b""
    while not line.endswith(b"\n"):
        left = None if deadline is None else max(deadline - time.monotonic(), 0)
        if not select.select([fd], [], [], left)[0]:
            raise subprocess.TimeoutExpired("cell", left)
        chunk = os.read(fd, 1)
        if not chunk:
            raise RuntimeError(f"the cells' zygote ended (exit {zygote.wait()})")
        line += chunk
    return json.loads(line)


def serve() -> None:
    """The zygote: import what cells import, then fork one cell per line asked on stdin."""
    import gc
    import carla_wds.load  # noqa: F401 - what every cell imports, once
    gc.freeze()   # the cells' collections skip (and do not copy) the zygote's objects
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _cell(request)   # never returns
        print(json.dumps({"pid": pid}), flush=True)
        print(json.dumps({"code": os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])}),
              flush=True)


def _cell(request: dict) -> None:
    """The tool's script as __main__, as `python script args` would run it."""
    import runpy
    import traceback
    code = 1
    try:
        for fd, path, flags in ((0, os.devnull, os.O_RDONLY),
                                (1, request["out"], os.O_WRONLY | os.O_CREAT),
                                (2, request["err"], os.O_WRONLY | os.O_CREAT)):
            os.dup2(os.open(path, flags, 0o600), fd)
        if request["cwd"] is not None:
            os.chdir(request["cwd"])
        sys.argv = list(request["argv"])
        here = os.path.dirname(os.path.abspath(sys.argv[0]))   # sys.path as the script's own
        sys.path[:] = [here, *(p for p in sys.path[2:] if p != here)]
        runpy.run_path(sys.argv[0], run_name="__main__")
        code = 0
    except SystemExit as exc:   # as the interpreter does
        code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
        if not isinstance(exc.code, (int, type(None))):
            print(exc.code, file=sys.stderr)
    except BaseException:   # noqa: BLE001 - reported as a process would
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


__all__ = ["FORK", "forking", "run", "serve"]
