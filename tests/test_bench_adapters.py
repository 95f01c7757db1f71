"""tools/bench_adapters.py runs end to end on a tiny pack and prints its table.

No timing is asserted (figures belong in docs/benchmarks.md); this keeps the tool working: our
half always (CARLAWebData(adapter=...) on shards it synthesises and packs), their half only
where a checkout of their code at the pinned commit is at hand (never in CI: their code is not
part of this repository; tools/golden/README.md says how to make one).
"""
from __future__ import annotations

import gzip
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.benchruns import env

BENCH = Path(__file__).resolve().parents[1] / "tools" / "bench_adapters.py"
# their TCP at 73cc1dd, exported as tools/golden/README.md says
TCP_CHECKOUT = Path(os.environ.get("CARLA_WDS_TCP_CHECKOUT", "/tmp/golden_src/TCP"))
# Bench2DriveZoo's TCP port at 31278ff (tcp/admlp), exported as tools/golden/README.md says
B2D_TCP_CHECKOUT = Path(os.environ.get("CARLA_WDS_B2D_TCP_CHECKOUT",
                                       "/tmp/golden_src/b2dzoo_tcp"))
ROW = r"^\| tcp \| ([01]) \| \[(\d+)\]/(\S+) \| ([0-9.]+) \([0-9.]+-[0-9.]+\) \| (\S+).*\|$"


def _bench(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    out = tmp_path / "bench.md"
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--workdir", str(tmp_path / "work"), "--episodes", "1",
         "--frames", "8", "--batch-size", "2", "--workers-list", "0,1", "--repeats", "1",
         "--adapters", "tcp,not_an_adapter", "--profile", "ours:0", "--torch-threads", "1",
         "--out", str(out), *extra],
        capture_output=True, text=True, timeout=900, env=env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() in out.read_text()   # --out appends what it prints
    return proc


def test_our_half_runs_on_a_tiny_pack(tmp_path: Path) -> None:
    proc = _bench(tmp_path)
    rows = {m.group(1): m.groups() for m in re.finditer(ROW, proc.stdout, re.M)}
    assert set(rows) == {"0", "1"}, proc.stdout
    for _, samples, theirs, rate, their_rate in rows.values():
        # 8 frames at 2 Hz keep 8 - 4 = 4 samples, every one served; their half not run
        assert int(samples) == 4 and float(rate) > 0 and theirs == "-" and their_rate == "-"
    assert "no --repo-dir tcp=PATH" in proc.stderr and "our half only" in proc.stderr
    assert "skip not_an_adapter: no entry" in proc.stderr
    assert re.search(r"^\| PNG decode \| [0-9.]+ \| \d+% \|$", proc.stdout, re.M), proc.stdout


def test_ours_from_a_raw_pack(tmp_path: Path) -> None:
    """--ours-image-format raw packs ours with cameras decoded at pack time, in its own folder."""
    proc = _bench(tmp_path, "--ours-image-format", "raw")
    rows = {m.group(1): m.groups() for m in re.finditer(ROW, proc.stdout, re.M)}
    assert set(rows) == {"0", "1"} and all(int(r[1]) == 4 for r in rows.values())
    assert "tcp: ours from shards_raw (" in proc.stdout
    manifest = (tmp_path / "work" / "tcp_1x8" / "shards_raw" / "manifest.json").read_text()
    assert '"image_format": "raw"' in manifest


def _module(monkeypatch):
    """The tool as a module (registered by name: dataclasses and _call look it up)."""
    spec = importlib.util.spec_from_file_location("bench_adapters", BENCH)
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, bench)
    monkeypatch.setattr(sys, "path", list(sys.path))   # it prepends the repo and tools/
    spec.loader.exec_module(bench)
    return bench


def test_an_adapter_not_registered_yet_is_skipped(monkeypatch, capsys) -> None:
    bench = _module(monkeypatch)
    monkeypatch.setitem(bench.ENTRIES, "later", bench.ENTRIES["tcp"])
    assert bench.usable(["later", "tcp"], {"tcp": "x"}) == ["tcp"]
    assert "skip later: CARLAWebData(adapter='later') is not registered" in \
        capsys.readouterr().err


@pytest.mark.skipif(not (TCP_CHECKOUT / "TCP" / "data.py").is_file(),
                    reason=f"no TCP checkout at {TCP_CHECKOUT} (CARLA_WDS_TCP_CHECKOUT)")
def test_their_half_runs_with_a_checkout(tmp_path: Path) -> None:
    proc = _bench(tmp_path, "--repo-dir", f"tcp={TCP_CHECKOUT}", "--profile", "theirs:0")
    rows = {m.group(1): m.groups() for m in re.finditer(ROW, proc.stdout, re.M)}
    assert set(rows) == {"0", "1"}, proc.stdout
    for _, samples, theirs, rate, their_rate in rows.values():
        assert theirs == "[4]" and float(their_rate.split()[0]) > 0   # the same 4 frames
    assert "cProfile of one theirs cell, tcp, 0 workers" in proc.stdout


def test_every_entry_can_be_synthesised_and_built(monkeypatch) -> None:
    """Each ENTRIES row names a synth layout and functions that exist, so an entry cannot
    rot where no checkout is at hand (its loader only runs with one)."""
    from carla_wds.pack.synth import synth_layouts
    bench = _module(monkeypatch)
    for name, entry in bench.ENTRIES.items():
        assert entry.layout in synth_layouts(), name
        assert re.fullmatch(r"\d+x\d+", entry.image_size), name
        for ref in (entry.prepare, entry.their, *filter(None, [entry.routes])):
            module, func = ref.split(":")
            assert callable(getattr(__import__(module), func)), (name, ref)


def _nulls(clip: Path) -> list[int]:
    """Frames of a synth clip folder whose anno says `"speed": null` (read here, not by the
    tool's helper)."""
    return [int(a.name.split(".")[0]) for a in sorted((clip / "anno").iterdir())
            if json.loads(gzip.decompress(a.read_bytes()))["speed"] is None]


def test_b2d_tcp_routes_leave_out_the_null_speed_clips(monkeypatch, tmp_path: Path) -> None:
    """The b2d_tcp entry's routes: the synth clips with a `speed: null` frame (their default
    collate cannot batch None) are removed for both sides, the others kept untouched, and pack
    is pointed at the clip folders (not also at the synth's .tar.gz copies of them)."""
    from carla_wds.pack.synth import synth_dataset
    from carla_wds.pack.synth.bench2drive import SPLIT_FILE
    synth_dataset(tmp_path, "bench2drive", episodes=3, frames=8, seed=0, image_size=(36, 64),
                  progress=False)
    clips = sorted((tmp_path / "v1").iterdir())
    nulls = {c.name: _nulls(c) for c in clips}
    assert [bool(n) for n in nulls.values()] == [False, False, True], nulls   # the 3rd clip
    before = {p: p.read_bytes() for c in clips[:2] for p in c.rglob("*") if p.is_file()}
    bench = _module(monkeypatch)
    source = bench._call(bench.ENTRIES["b2d_tcp"].routes, tmp_path)
    assert source == tmp_path / "v1"
    assert sorted(source.iterdir()) == clips[:2] and not (tmp_path / "archives").exists()
    assert {p: p.read_bytes() for p in before} == before and (tmp_path / SPLIT_FILE).is_file()
    assert bench._call(bench.ENTRIES["b2d_tcp"].routes, tmp_path) == source   # idempotent
    assert sorted(source.iterdir()) == clips[:2]


@pytest.mark.skipif(not (B2D_TCP_CHECKOUT / "TCP" / "data.py").is_file(),
                    reason=f"no Bench2DriveZoo tcp/admlp checkout at {B2D_TCP_CHECKOUT} "
                           "(CARLA_WDS_B2D_TCP_CHECKOUT)")
def test_b2d_tcp_both_halves_with_a_checkout(tmp_path: Path) -> None:
    """One 28-frame clip at B2D's 1600x900: the port serves frames 0 and 1, ours the same 2."""
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--workdir", str(tmp_path / "work"), "--episodes", "1",
         "--frames", "28", "--batch-size", "2", "--workers-list", "0", "--repeats", "1",
         "--adapters", "b2d_tcp", "--torch-threads", "1",
         "--repo-dir", f"b2d_tcp={B2D_TCP_CHECKOUT}"], capture_output=True, text=True,
        timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(r"^\| b2d_tcp \| 0 \| \[2\]/\[2\] \| [0-9.]+ ", proc.stdout, re.M), \
        proc.stdout
    assert (tmp_path / "work" / "b2d_tcp_1x28" / "raw" / "tcp_bench2drive-train.npy").is_file()
