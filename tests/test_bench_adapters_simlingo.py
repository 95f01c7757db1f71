"""tools/bench_adapters.py's simlingo entry (issue 41) runs end to end on one tiny route: our
half always, their Data_Driving half where their checkout at eb2b89a and the throwaway venv
their imports need (tools/golden/README.md: /tmp/golden_venv, ujson among them) are at hand.
No timing is asserted (figures belong in docs/benchmarks.md)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "tools" / "bench_adapters.py"
CHECKOUT = Path(os.environ.get("CARLA_WDS_SIMLINGO_CHECKOUT", "/tmp/golden_src/simlingo"))
GOLDEN_PYTHON = Path(os.environ.get("CARLA_WDS_GOLDEN_PYTHON", "/tmp/golden_venv/bin/python"))
# one 26-frame route: their skip_first_n_frames 10 and the 11 future frames leave 3 samples
ROW = r"^\| simlingo \| ([01]) \| \[3\]/(\S+) \| [0-9.]+ "


def _bench(tmp_path: Path, python: str, *extra: str) -> str:
    proc = subprocess.run(
        [python, str(BENCH), "--python", python, "--workdir", str(tmp_path / "work"),
         "--episodes", "1", "--frames", "26", "--batch-size", "1", "--workers-list", "0,1",
         "--repeats", "1", "--adapters", "simlingo", "--torch-threads", "1", *extra],
        capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_our_half_serves_the_route(tmp_path: Path) -> None:
    out = _bench(tmp_path, sys.executable)
    rows = dict(re.findall(ROW, out, re.M))
    assert rows == {"0": "-", "1": "-"}, out


@pytest.mark.skipif(not ((CHECKOUT / "simlingo_training").is_dir() and GOLDEN_PYTHON.is_file()),
                    reason=f"no SimLingo checkout at {CHECKOUT} (CARLA_WDS_SIMLINGO_CHECKOUT) "
                           f"or no venv for their imports at {GOLDEN_PYTHON}")
def test_both_halves_serve_the_same_samples(tmp_path: Path) -> None:
    out = _bench(tmp_path, str(GOLDEN_PYTHON), "--repo-dir", f"simlingo={CHECKOUT}")
    rows = dict(re.findall(ROW, out, re.M))
    assert rows == {"0": "[3]", "1": "[3]"}, out
