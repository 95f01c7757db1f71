"""tools/bench_archives.py runs end to end at a tiny size and prints its table, with the shards
of both paths byte-identical (the tool exits non-zero otherwise); no timing is asserted:
figures belong in docs/benchmarks.md."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "tools" / "bench_archives.py"
NUMBER = r"([0-9.]+)"


def test_bench_archives_prints_both_formats(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(BENCH), "--workdir", str(tmp_path), "--routes",
                           "3", "--frames", "16", "--per-archive", "2", "--image-size", "32x64",
                           "--repeats", "1", "--workers", "1"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for fmt in ("tar.gz", "zip"):
        row = re.search(rf"^\| \.{re.escape(fmt)} --workers 1 \| {NUMBER} \| {NUMBER} \| "
                        rf"{NUMBER} \| {NUMBER} \| {NUMBER}x \|$", proc.stdout, re.M)
        assert row and all(float(v) > 0 for v in row.groups()), proc.stdout
