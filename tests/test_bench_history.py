"""tools/bench_history.py runs end to end at its smallest size and prints its tables.

No timing is asserted (figures belong in docs/benchmarks.md); this keeps the benchmark working,
and each of its cells checks its own sample count against len() x batch before it reports.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.benchruns import env

BENCH = Path(__file__).resolve().parents[1] / "tools" / "bench_history.py"
NUM = r"[0-9.]+ \([0-9.]+-[0-9.]+\)"
RATIO = r"[0-9.]+x \([0-9.]+-[0-9.]+\)"


def test_bench_history_prints_windows_and_clips(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--workdir", str(tmp_path), "--episodes", "1",
         "--frames", "40", "--raw-size", "48", "64", "--size", "32", "64", "--batch", "4",
         "--clip-batch", "2", "--shard-samples", "8", "--workers-list", "0,1",
         "--repeats", "1"], capture_output=True, text=True, timeout=600, env=env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    # workers | h0 | h3 | h3 frames | per frame | after the first batch | per sample | RSS x 2
    rows = re.findall(rf"^\| ([01]) \| {NUM} \| {NUM} \| ({NUM}) \| {RATIO} \| {RATIO} \| "
                      rf"{RATIO} \| "
                      r"(\d+) \| (\d+) \|$", proc.stdout, re.M)
    assert [r[0] for r in rows] == ["0", "1"], proc.stdout
    assert all(float(r[1].split()[0]) > 0 and int(r[3]) > 0 for r in rows), proc.stdout
    # clips: workers | samples/s | frames/s | per frame | after the first | frames/clip | RSS
    clips = re.findall(rf"^\| ([01]) \| {NUM} \| {NUM} \| {RATIO} \| {RATIO} \| ([0-9.]+) \| "
                       r"(\d+) \|$",
                       proc.stdout, re.M)
    assert [c[0] for c in clips] == ["0", "1"], proc.stdout
    # a 32-frame clip over 40-frame routes: more than one real frame, at most 32
    assert all(1 < float(c[1]) <= 32 and int(c[2]) > 0 for c in clips), proc.stdout
