"""tools/bench_b2d.py runs end to end at a tiny size and prints every table (no timing is
asserted: figures belong in docs/benchmarks.md)."""
from __future__ import annotations

import re
NUMBER = r"([0-9.]+)"


def test_bench_b2d_prints_every_table(bench_runs) -> None:
    # the same run as docs/benchmarks.md's first bench_b2d block (tests/benchruns.py)
    proc = bench_runs.run("bench_b2d.py", [
        "--workdir", "w", "--clips", "2", "--frames", "24", "--image-size", "96x160",
        "--repeats", "1", "--memory-clips", "20"], timeout=900).proc
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    for w in (0, 1, 2):   # reduced, exact, ratio, floor, ratio
        row = re.search(rf"^\| {w} \| {NUMBER} \| {NUMBER} \| {NUMBER}x \| {NUMBER} \| "
                        rf"{NUMBER}x \|$", out, re.M)
        assert row and all(float(v) > 0 for v in row.groups()), out
    for name in ("tar xzf", "pack", "pack --no-fsync", "pack --workers 2"):
        assert re.search(rf"^\| {name} \| {NUMBER} \| {NUMBER} \| {NUMBER}x \|$", out, re.M), out
    assert re.search(rf"^\| 20 \| {NUMBER} \| {NUMBER} \(scaled", out, re.M), out
