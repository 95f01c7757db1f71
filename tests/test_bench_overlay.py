"""tools/bench_overlay.py runs end to end on a tiny pack and prints its table.

No timing is asserted (figures belong in docs/benchmarks.md); each cell checks that the
overlay's field came with every batch before it reports a rate."""
from __future__ import annotations

import re


def test_bench_overlay_prints_its_table(bench_runs) -> None:
    # the same run as docs/benchmarks.md's bench_overlay block (tests/benchruns.py)
    proc = bench_runs.run("bench_overlay.py", [
        "--workdir", "w", "--episodes", "2", "--frames", "14", "--image-size", "24", "32",
        "--batch-size", "4", "--workers-list", "0,2", "--repeats", "1", "--epochs", "1"],
        timeout=600).proc
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = re.findall(r"^\| ([02]) \| ([0-9.]+) \| ([0-9.]+) \| ([0-9.]+) \| [0-9.]+x \| "
                      r"[0-9.]+x \|$", proc.stdout, re.M)
    assert {r[0] for r in rows} == {"0", "2"}, proc.stdout
    assert all(float(v) > 0 for r in rows for v in r[1:]), proc.stdout
    assert "have a simlingo_commentary entry" in proc.stdout
