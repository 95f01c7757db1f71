"""tools/bench_map.py runs end to end at a tiny size and prints both tables (no timing is
asserted: figures belong in docs/benchmarks.md)."""
from __future__ import annotations

import re

NUMBER = r"([0-9.]+)"


def test_bench_map_prints_cost_and_memory(bench_runs) -> None:
    # the same run as docs/benchmarks.md's bench_map block (tests/benchruns.py)
    proc = bench_runs.run("bench_map.py", [
        "--workdir", "w", "--clips", "1", "--frames", "24", "--image-size", "96x160",
        "--repeats", "1", "--memory-clips", "20"], timeout=900).proc
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    without = re.search(rf"^\| without the map \| {NUMBER} \({NUMBER}-{NUMBER}\) \| \|$", out,
                        re.M)
    with_map = re.search(rf"^\| Overlays\(map=\.\.\.\) \| {NUMBER} \({NUMBER}-{NUMBER}\) \| "
                         rf"(-?{NUMBER})%", out, re.M)
    assert without and with_map and float(with_map.group(1)) > 0, out
    for part in ("vad", "uniad"):   # each model's map GT alone: Overlays(map_gt=(PART,))
        assert re.search(rf"^\| Overlays\(map=\.\.\., map_gt=\('{part}',\)\) \| {NUMBER} "
                         rf"\({NUMBER}-{NUMBER}\) \| (-?{NUMBER})%", out, re.M), out
    assert re.search(rf"^\| 20 \| {NUMBER} \| {NUMBER} \|$", out, re.M), out
