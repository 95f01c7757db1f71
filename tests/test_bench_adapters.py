"""tools/bench_adapters.py runs end to end on a tiny pack and prints its table.

No timing is asserted (figures belong in docs/benchmarks.md); this keeps the tool working: our
half always (CARLAWebData(adapter=...) on shards it synthesises and packs), their half only
where a checkout of their code at the pinned commit is at hand (never in CI: their code is not
part of this repository; tools/golden/README.md says how to make one).
"""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "tools" / "bench_adapters.py"
# their TCP at 73cc1dd, exported as tools/golden/README.md says
TCP_CHECKOUT = Path(os.environ.get("CARLA_WDS_TCP_CHECKOUT", "/tmp/golden_src/TCP"))
ROW = r"^\| tcp \| ([01]) \| \[(\d+)\]/(\S+) \| ([0-9.]+) \([0-9.]+-[0-9.]+\) \| (\S+).*\|$"


def _bench(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    out = tmp_path / "bench.md"
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--workdir", str(tmp_path / "work"), "--episodes", "1",
         "--frames", "8", "--batch-size", "2", "--workers-list", "0,1", "--repeats", "1",
         "--adapters", "tcp,not_an_adapter", "--profile", "ours:0", "--torch-threads", "1",
         "--out", str(out), *extra],
        capture_output=True, text=True, timeout=900)
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
        for ref in (entry.prepare, entry.their):
            module, func = ref.split(":")
            assert callable(getattr(__import__(module), func)), (name, ref)
