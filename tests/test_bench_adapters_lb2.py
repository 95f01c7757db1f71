"""tools/bench_adapters.py's simlingo and lead entries (issue 41) run end to end on one tiny
route: our half always, their loader's half where their checkout at the pinned commit and the
throwaway venv their imports need (tools/golden/README.md: /tmp/golden_venv; ujson, laspy
among them) are at hand. No timing is asserted (figures belong in docs/benchmarks.md)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.benchruns import FORK_CELLS, env

BENCH = Path(__file__).resolve().parents[1] / "tools" / "bench_adapters.py"
GOLDEN_PYTHON = Path(os.environ.get("CARLA_WDS_GOLDEN_PYTHON", "/tmp/golden_venv/bin/python"))
CHECKOUTS = {"simlingo": Path(os.environ.get("CARLA_WDS_SIMLINGO_CHECKOUT",
                                             "/tmp/golden_src/simlingo")),
             "lead": Path(os.environ.get("CARLA_WDS_LEAD_CHECKOUT", "/tmp/golden_src/lead"))}
# one route each: SimLingo's skip_first_n_frames 10 and 11 future frames leave 26 - 23 = 3
# samples; LEAD's skip_first 8 and skip_last 8 (planning decoder on) leave 18 - 16 = 2
ROUTES = {"simlingo": ("26", 3), "lead": ("18", 2)}


def _bench(tmp_path: Path, python: str, name: str, *extra: str) -> dict[str, str]:
    frames, n = ROUTES[name]
    proc = subprocess.run(
        [python, str(BENCH), "--python", python, "--workdir", str(tmp_path / "work"),
         "--episodes", "1", "--frames", frames, "--batch-size", "1", "--workers-list", "0,1",
         "--repeats", "1", "--adapters", name, "--torch-threads", "1", *extra],
        capture_output=True, text=True, timeout=900,
        # our half's cells forked after the imports (tests/benchruns.py); theirs, under their
        # venv's interpreter, each a fresh process
        env={**env(), FORK_CELLS: "1" if python == sys.executable else "0"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = dict(re.findall(rf"^\| {name} \| ([01]) \| \[{n}\]/(\S+) \| [0-9.]+ ", proc.stdout,
                           re.M))
    assert set(rows) == {"0", "1"}, proc.stdout
    return rows


@pytest.mark.parametrize("name", sorted(ROUTES))
def test_our_half_serves_the_route(tmp_path: Path, name: str) -> None:
    assert set(_bench(tmp_path, sys.executable, name).values()) == {"-"}


@pytest.mark.parametrize("name", sorted(ROUTES))
def test_both_halves_serve_the_same_samples(tmp_path: Path, name: str) -> None:
    checkout = CHECKOUTS[name]
    if not (checkout.is_dir() and GOLDEN_PYTHON.is_file()):
        pytest.skip(f"no {name} checkout at {checkout} or no venv for their imports at "
                    f"{GOLDEN_PYTHON} (tools/golden/README.md)")
    rows = _bench(tmp_path, str(GOLDEN_PYTHON), name, "--repo-dir", f"{name}={checkout}")
    assert set(rows.values()) == {f"[{ROUTES[name][1]}]"}, rows
