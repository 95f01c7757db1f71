"""tools/bench_loader.py runs end to end on a small pack and prints its tables.

No timing is asserted (figures belong in docs/benchmarks.md); this keeps the benchmark working,
and each of its cells checks its own sample count before it reports a rate.
"""
from __future__ import annotations

import re


def test_bench_loader_prints_both_tables(bench_runs) -> None:
    # the same run as docs/benchmarks.md's first bench_loader command (tests/benchruns.py)
    run = bench_runs.run("bench_loader.py", [
        "--workdir", "w", "--episodes", "1", "--frames", "40", "--kinds", "ours,persistent,mix",
        "--workers-list", "1,2", "--formats", "jpg", "--repeats", "1"], timeout=600)
    proc, tmp_path = run.proc, run.workdir
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {m.group(1): float(m.group(2)) for m in
            re.finditer(r"^\| jpg \| (\d) \| nan \| ([0-9.]+) \| [0-9.]+ \|", proc.stdout, re.M)}
    assert set(rows) == {"1", "2"} and all(rate > 0 for rate in rows.values()), proc.stdout
    # ours and the floor, each: ratio | per-repeat range | busy at 1 | busy at 2 | CPU/sample
    # ratio | steal; busy and CPU come from the cells' own getrusage, so they must be > 0
    for pipeline in ("ours", "floor", "persistent"):
        row = re.search(rf"^\| jpg \| {pipeline} \| [0-9.]+x \| [0-9.]+-[0-9.]+x \| ([0-9.]+) \| "
                        r"([0-9.]+) \| ([0-9.]+) \| -?[0-9.]+ \|$", proc.stdout, re.M)
        assert row and all(float(v) > 0 for v in row.groups()), proc.stdout
    # persistent workers, epochs 2-3: workers | fresh | persistent | ratio | per core
    later = re.findall(r"^\| jpg \| ([12]) \| [0-9.]+ \| ([0-9.]+) \| [0-9.]+x \| [0-9.]+ \|$",
                       proc.stdout, re.M)
    assert {w for w, _ in later} == {"1", "2"} and all(float(r) > 0 for _, r in later), proc.stdout
    # a two-entry mix against one pack (issue 29): workers | one pack | mix | ratio
    mixed = re.findall(r"^\| jpg \| ([12]) \| [0-9.]+ \| ([0-9.]+) \| [0-9.]+x \|$",
                       proc.stdout, re.M)
    assert {w for w, _ in mixed} == {"1", "2"} and all(float(r) > 0 for _, r in mixed)
    manifest = (tmp_path / "shards_jpg" / "manifest.json").read_text()
    assert '"image_format": "jpg"' in manifest.replace("'", '"')
