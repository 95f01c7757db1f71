"""Each benchmark tool runs once per suite (issue 39).

A documented benchmark block (docs/benchmarks.md, run by tests/test_docs_blocks.py) and the
tool's smoke test (tests/test_bench_*.py) ask `BenchRuns.run` for the same command, and the
second asker gets the first run's output and work folder. Two commands are the same run when
they name the same tool with the same options in any order (`--workdir` aside: each run gets
its own). So a block that documents several sizes of one tool, shrunk by its `replace`
directives to the same small size, runs once too.

Every run here (and each tests/test_bench_*.py that starts a tool itself, with `env()`) forks
the tool's cells from one interpreter that imported carla_wds.load once, instead of starting
each cell's interpreter afresh (tools/cells.py): the tiny cells of a smoke run were mostly
torch's import. The commands and what they print are as documented.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINKED = (".venv", "tools", "configs", "carla_wds")   # a checkout's root, read-only
FORK_CELLS = "CARLA_WDS_BENCH_FORK_CELLS"   # tools/cells.py
# one documented command: `.venv/bin/python tools/bench_X.py ARGS` (a trailing comment aside)
COMMAND = re.compile(r"^\.venv/bin/python tools/(bench_\w+\.py)((?:[ \t]+[^\s#]\S*)*)"
                     r"[ \t]*(?:#.*)?$")


@dataclass(frozen=True)
class Run:
    proc: subprocess.CompletedProcess
    workdir: Path          # the run's --workdir (or the folder it ran in, without one)
    stdout_file: Path


def key(tool: str, args: list[str]) -> tuple:
    """The run a command stands for: its tool and options, order aside, --workdir dropped.
    A repeated option keeps its last value, as argparse does."""
    groups: dict[str, tuple[str, ...]] = {}
    flag, values = "", []
    for token in [*args, "--"]:
        if token.startswith("--"):
            if flag:
                groups[flag] = tuple(values)
            flag, values = token, []
        else:
            values.append(token)
    groups.pop("--workdir", None)
    return tool, tuple(sorted(groups.items()))


def env() -> dict[str, str]:
    """The documented commands' environment: the venv first on PATH, the installed package,
    and a tool's cells forked after its imports (tools/cells.py: a smoke run's tiny cells are
    otherwise mostly imports; CARLA_WDS_BENCH_FORK_CELLS=0 outside runs them as documented)."""
    out = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}"
           f"{os.environ.get('PATH', '')}", "MPLBACKEND": "Agg", "PYTHONUNBUFFERED": "1"}
    out.pop("PYTHONPATH", None)
    out.setdefault(FORK_CELLS, "1")
    return out


class BenchRuns:
    """The suite's benchmark runs, one per key, in folders under `root`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.done: dict[tuple, Run] = {}

    def run(self, tool: str, args: list[str], timeout: int = 900) -> Run:
        """tools/<tool> with args, or the earlier run of the same command."""
        k = key(tool, args)
        if k not in self.done:
            self.done[k] = self._start(tool, args, timeout)
        return self.done[k]

    def _start(self, tool: str, args: list[str], timeout: int) -> Run:
        cwd = self.root / f"{Path(tool).stem}_{len(self.done)}"
        cwd.mkdir(parents=True)
        for name in LINKED:
            if (ROOT / name).exists():
                (cwd / name).symlink_to(ROOT / name)
        args = list(args)
        if "--workdir" in args:   # its own, inside the run's folder
            at = len(args) - 1 - args[::-1].index("--workdir")
            args[at + 1] = str(cwd / "work")
        proc = subprocess.run([sys.executable, str(ROOT / "tools" / tool), *args], cwd=cwd,
                              env=env(), capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
        out = cwd / "stdout.txt"
        out.write_text(proc.stdout)
        workdir = cwd / "work" if "--workdir" in args else cwd
        return Run(proc, workdir, out)

    def shared_script(self, code: str) -> tuple[str, list[Run]]:
        """A bash block with each benchmark command replaced by `cat` of its one run's output
        (run now if no one ran it yet), and the runs, for the caller to check."""
        lines, runs = [], []
        for line in code.replace("\\\n", " ").splitlines():
            found = COMMAND.match(line.strip())
            if found is None:
                lines.append(line)
                continue
            run = self.run(found.group(1), found.group(2).split())
            runs.append(run)
            lines.append(f"cat '{run.stdout_file}'")
        return "\n".join(lines) + "\n", runs


__all__ = ["BenchRuns", "COMMAND", "FORK_CELLS", "Run", "env", "key"]
