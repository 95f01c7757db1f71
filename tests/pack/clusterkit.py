"""Helpers of the cluster-packing tests (issue 31): a raw set of routes with skewed sizes, and
the real `carla-wds` command run in a subprocess."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

EXE = str(Path(sys.executable).parent / "carla-wds")
MAX = ["--max-samples", "5"]   # several shards a part, so a kill can land between two


def skewed_raw(raw_tcp: Path, dst: Path, copies: int = 4, seed: int = 0) -> Path:
    """`copies` x raw_tcp's routes as hard links, each with a pad file of lognormal size (a
    clip-size distribution's long tail): the plan sees uneven episodes, the pack ignores it."""
    rng = np.random.default_rng(seed)
    for k in range(copies):
        for route in sorted(raw_tcp.glob("*/*")):
            target = dst / f"copy{k:02d}" / route.name
            shutil.copytree(route, target, copy_function=os.link)
            (target / "pad.bin").write_bytes(b"\0" * int(rng.lognormal(10, 1.5)))
    return dst


def run(*args: str | Path, env: dict[str, str] | None = None, check: bool = False
        ) -> subprocess.CompletedProcess:
    """The real command line, in a process of its own."""
    return subprocess.run([EXE, *map(str, args)], capture_output=True, text=True, check=check,
                          env={**os.environ, **(env or {})}, timeout=300)


def plan_of(out: Path) -> dict:
    return json.loads((out / "plan.json").read_text())


def error_lines(result) -> list[str]:
    """The lines of a failed command's stderr that are not log records."""
    return [ln for ln in result.stderr.splitlines()
            if ln.strip() and not ln.startswith(("INFO ", "WARNING ", "DEBUG "))]
