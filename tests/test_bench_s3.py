"""tools/bench_s3.py runs end to end at a tiny size, against its own moto server on 127.0.0.1,
and prints every table row with positive figures (no timing is asserted: figures belong in
docs/benchmarks.md). Each cell checks its own sample count against the manifest."""
from __future__ import annotations

import re

import pytest

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

NUM = r"([0-9.]+)"
CASES = ("local", "local again", "s3", "s3 cold cache", "s3 warm cache")


def test_bench_s3_prints_every_row(bench_runs) -> None:
    # the same run as docs/benchmarks.md's bench_s3 block (tests/benchruns.py)
    proc = bench_runs.run("bench_s3.py", [
        "--workdir", "w", "--episodes", "1", "--frames", "24", "--max-samples", "8",
        "--image-size", "64x180", "--repeats", "1"], timeout=300).proc
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    for w in (0, 2):
        for case in CASES:   # samples/s, range, ratio, paired range, open ms, CPU, server CPU
            row = re.search(rf"^\| {case} \| {w} \| {NUM} \| {NUM}-{NUM} \| {NUM}x \| "
                            rf"{NUM}-{NUM}x \| {NUM} \| {NUM} \| {NUM} \|$", out, re.M)
            assert row, (case, w, out)
            rate, low, high, ratio, _, _, _, cpu, _ = (float(v) for v in row.groups())
            assert rate > 0 and 0 < low <= rate <= high and ratio > 0 and cpu > 0, row.group(0)
        # local spread, local again / local, warm / local (per repeat), warm / local median
        noise = re.search(rf"^\| {w} \| {NUM}-{NUM} \| {NUM}% \| {NUM}-{NUM}x \| "
                          rf"{NUM}-{NUM}x \| {NUM}x \| (yes|no) \|$", out, re.M)
        assert noise and all(float(v) > 0 for v in noise.groups()[3:8]), out
    fetch = out.split("where the time goes")[1].split("cProfile")[0]
    pieces = re.findall(rf"^\| ([^|]+) \| {NUM} \| {NUM} \|$", fetch, re.M)
    names = [name for name, *_ in pieces]
    assert any(n.startswith("moto:") for n in names) and any("sha256" in n for n in names)
    assert sum("scaled to one shard" in n for n in names) == len(CASES) - 1, names
    assert all(float(ms) > 0 and float(mbs) > 0 for _, ms, mbs in pieces), out
    # the profile of one epoch from each source: its whole own time, and the decode within it
    total = re.search(rf"^\| total \(profiled\) \| {NUM} \| {NUM} \|$", out, re.M)
    assert total and all(float(v) > 0 for v in total.groups()), out
    assert re.search(rf"^\| PNG decode \(spng\) \| {NUM} \| {NUM} \|$", out, re.M), out
