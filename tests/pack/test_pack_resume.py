"""`carla-wds pack` interrupted and resumed: a real kill -9 mid-pack, a bad file midway, and
the options a resume must keep."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ..helpers import manifest_of, shard_hashes

EXE = str(Path(sys.executable).parent / "carla-wds")


def _big_raw(raw_tcp: Path, dst: Path, copies: int) -> Path:
    """`copies` x the 3 fixture routes, as hard links (no image is rendered again)."""
    for k in range(copies):
        for route in sorted(raw_tcp.glob("*/*")):
            shutil.copytree(route, dst / f"copy{k:03d}" / route.name, copy_function=os.link)
    return dst


def _kill_mid_pack(raw: Path, out: Path, args: list[str], min_shards: int) -> bool:
    """Run the real command and SIGKILL it once `min_shards` shards exist but no manifest.
    True when the kill really landed mid-pack."""
    proc = subprocess.Popen([EXE, "pack", str(raw), str(out), *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            if (len(list(out.glob("shard-*.tar"))) >= min_shards
                    and not (out / "manifest.json").exists()):
                proc.send_signal(signal.SIGKILL)
                break
            time.sleep(0.002)
    finally:
        if proc.poll() is None and time.monotonic() >= deadline:
            proc.kill()
        proc.wait(timeout=60)
    return proc.returncode == -signal.SIGKILL and not (out / "manifest.json").exists()


def test_kill_9_then_resume_is_byte_identical(raw_tcp, tmp_path, packer, cli):
    args = ["--max-samples", "3"]
    for attempt, copies in enumerate((20, 60, 180)):
        raw = _big_raw(raw_tcp, tmp_path / f"raw{attempt}", copies)
        out = tmp_path / f"out{attempt}"
        if _kill_mid_pack(raw, out, args, min_shards=5):
            print(f"killed mid-pack on attempt {attempt + 1} ({copies} copies)")
            break
    else:
        pytest.fail("the pack always finished before it could be killed mid-pack")
    # The state a kill -9 leaves: some shards, the journal, no manifest.
    written = sorted(out.glob("shard-*.tar"))
    total_shards = copies * 3 * 26 // 3
    assert 5 <= len(written) < total_shards
    assert (out / ".pack-journal.jsonl").exists() and not (out / "manifest.json").exists()

    plain = cli("pack", raw, out, *args)            # refused without --resume
    assert plain.exit_code != 0 and "--resume" in plain.output
    resumed = cli("pack", raw, out, *args, "--resume")
    assert resumed.exit_code == 0, resumed.output

    reference = tmp_path / "reference"
    packer(raw, reference, max_samples=3)
    assert shard_hashes(out) == shard_hashes(reference)
    assert len(shard_hashes(out)) == total_shards
    assert manifest_of(out)["shards"] == manifest_of(reference)["shards"]
    assert not list(out.glob(".*"))                 # no temp shard, no journal left
    assert cli("verify", out).exit_code == 0


def _fail_midway(raw_tcp: Path, copy_raw, tmp_path: Path, packer) -> tuple[Path, Path, Path]:
    """A pack interrupted by a bad file in the last route: shards of earlier routes are done."""
    from carla_wds.pack.routes import PackError
    raw = copy_raw(raw_tcp)
    bad = raw / "Town03" / "routes_town03_02" / "rgb" / "0020.png"
    good = bad.read_bytes()
    bad.write_bytes(good[:100])
    out = tmp_path / "out"
    with pytest.raises(PackError, match="0020"):
        packer(raw, out, max_samples=7)
    bad.write_bytes(good)
    return raw, out, out / ".pack-journal.jsonl"


def test_interrupted_pack_resumes_identically(raw_tcp, packed_tcp, copy_raw, tmp_path, packer):
    raw, out, journal = _fail_midway(raw_tcp, copy_raw, tmp_path, packer)
    assert journal.exists() and not (out / "manifest.json").exists()
    done = sorted(p.name for p in out.glob("shard-*.tar"))
    assert 0 < len(done) < 12
    assert not list(out.glob(".*.tmp"))              # the half-written shard was dropped
    before = {n: (out / n).stat().st_mtime_ns for n in done}
    packer(raw, out, max_samples=7, resume=True, workers=2)
    assert shard_hashes(out) == shard_hashes(packed_tcp)
    assert {n: (out / n).stat().st_mtime_ns for n in done} == before   # not rewritten


def test_resume_with_different_options_is_refused(raw_tcp, copy_raw, tmp_path, packer, cli):
    raw, out, journal = _fail_midway(raw_tcp, copy_raw, tmp_path, packer)
    for extra in (["--max-samples", "8"], ["--max-samples", "7", "--image-format", "jpg"],
                  ["--max-samples", "7", "--pred-len", "3"]):
        result = cli("pack", raw, out, "--resume", *extra)
        assert result.exit_code != 0, extra
        assert "same options" in result.output and "Fix:" in result.output
    assert journal.exists() and not (out / "manifest.json").exists()
    assert cli("pack", raw, out, "--resume", "--max-samples", "7").exit_code == 0


def test_resume_of_a_finished_pack_is_refused(packed_tcp, raw_tcp, copy_tree, cli):
    out = copy_tree(packed_tcp, "done")
    result = cli("pack", raw_tcp, out, "--resume", "--max-samples", "7")
    assert result.exit_code != 0 and "finished pack" in result.output
