"""tools/bench_layouts.py runs end to end on a tiny garage pack and prints both readers' figures.

No timing is asserted (figures belong in docs/benchmarks.md); the bench itself checks, before
timing, that the two readers give the same batch for the same keys.
"""
from __future__ import annotations

import json
import re
NUMBER = r"([0-9.]+)"


def test_bench_layouts_prints_both_readers(bench_runs) -> None:
    # the same run as docs/benchmarks.md's two bench_layouts blocks (tests/benchruns.py)
    run = bench_runs.run("bench_layouts.py", [
        "--workdir", "w", "--episodes", "1", "--frames", "16", "--image-size", "16x64",
        "--batch", "2", "--workers-list", "0", "--repeats", "1"], timeout=600)
    proc, tmp_path = run.proc, run.workdir
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert re.search(r"^same result: \d+ samples, 12 fields equal", out, re.M), out
    # workers | per-file samples/s | carla-wds samples/s | ratio | per repeat | CPU | CPU
    row = re.search(rf"^\| 0 \| {NUMBER} \| {NUMBER} \| {NUMBER}x \| [0-9.]+-[0-9.]+x \| "
                    rf"{NUMBER} \| {NUMBER} \| {NUMBER}x \|$", out, re.M)
    assert row and all(float(v) > 0 for v in row.groups()), out
    assert re.search(rf"^\| lidar \(LAZ / npy\) \| {NUMBER} \| {NUMBER} \|$", out, re.M), out
    assert re.search(r"^\| synthetic frames \| \d+ \| \d+ \| \d+ \| \d+ \| \d+ \|", out, re.M), out
    lidar = re.search(rf"^\| 0 \| {NUMBER} \| {NUMBER} \| {NUMBER}x \| [0-9.]+-[0-9.]+x \|$",
                      out, re.M)
    assert lidar and all(float(v) > 0 for v in lidar.groups()), out
    members = json.loads((tmp_path / "shards" / "manifest.json").read_text())["members"]
    assert members["lidar.npy"] == "points" and "lidar.laz" not in members
    members = json.loads((tmp_path / "shards_laz" / "manifest.json").read_text())["members"]
    assert members["lidar.laz"] == "laz" and "lidar.npy" not in members
