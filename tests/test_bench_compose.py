"""tools/bench_compose.py runs end to end on a tiny pack and prints its two tables.

No timing is asserted (figures belong in docs/benchmarks.md); each cell checks its own sample
count against epochs x len() x batch before it reports a rate."""
from __future__ import annotations

import re

NUM = r"([0-9.]+) \([0-9.]+-[0-9.]+\)"
RATIO = r"[0-9.]+x \([0-9.]+-[0-9.]+\)"
# pair / sum of parts: below zero where noise at a smoke run's few samples makes the parts'
# summed cost (a + b - plain) negative, so with its sign
SUM = r"-?[0-9.]+x \(-?[0-9.]+--?[0-9.]+\)"


def test_bench_compose_prints_kinds_and_pairs(bench_runs) -> None:
    # the same run as docs/benchmarks.md's bench_compose block (tests/benchruns.py)
    proc = bench_runs.run("bench_compose.py", [
        "--workdir", "w", "--episodes", "1", "--frames", "24", "--image-size", "32", "112",
        "--shard-samples", "8", "--batch", "4", "--epochs", "1", "--workers-list", "0,1",
        "--repeats", "1"], timeout=600).proc
    assert proc.returncode == 0, proc.stderr[-3000:]
    # workers | plain | history | mix | hist_mix | adapter | adp_hist
    rows = re.findall(rf"^\| ([01]) \| {NUM} \| {NUM} \| {NUM} \| {NUM} \| {NUM} \| {NUM} \|$",
                      proc.stdout, re.M)
    assert [r[0] for r in rows] == ["0", "1"], proc.stdout
    assert all(float(v) > 0 for r in rows for v in r[1:]), proc.stdout
    # pair | workers | pair samples/s | slower part | pair / slower | pair / sum of parts
    pairs = re.findall(rf"^\| (history x mix|adapter x history) \| ([01]) \| {NUM} \| "
                       rf"(history|mix|adapter) \| {RATIO} \| {SUM} \|$", proc.stdout, re.M)
    assert sorted((p[0], p[1]) for p in pairs) == [
        ("adapter x history", "0"), ("adapter x history", "1"),
        ("history x mix", "0"), ("history x mix", "1")], proc.stdout
    for name, _, _, slower in pairs:   # the slower part is one of the pair's own
        assert slower in {"history x mix": ("history", "mix"),
                          "adapter x history": ("adapter", "history")}[name], proc.stdout
