"""One pack at a time writes an output folder: a second `carla-wds pack` into OUTPUT_DIR while
another process holds it is refused with one line naming the folder and the holder's pid; the
lock of a killed pack blocks nothing; a finished pack leaves no lock file behind."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from carla_wds.pack.output import PACK_LOCK

EXE = str(Path(sys.executable).parent / "carla-wds")


def hold(out: Path | str, env: dict | None = None) -> subprocess.Popen:
    """A process that opens OUTPUT_DIR as a pack does (output.LocalOutput, or for an s3://
    URL upload.StoreOutput) and keeps it."""
    made = (f"LocalOutput(Path({str(out)!r}))" if isinstance(out, Path) else
            f"StoreOutput({out!r}, PackOptions())")
    code = ("import sys; from pathlib import Path; from carla_wds.pack.output import "
            "LocalOutput; from carla_wds.pack.upload import StoreOutput; from "
            f"carla_wds.pack.options import PackOptions; o = {made}; print('held', flush=True);"
            " sys.stdin.read()")
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout.readline().strip() == "held"
    return proc


def pack(raw: Path, out: Path | str, *args: str, env: dict | None = None
         ) -> subprocess.CompletedProcess:
    return subprocess.run([EXE, "pack", str(raw), str(out), "--max-samples", "7", *args],
                          capture_output=True, text=True, timeout=300, env=env)


def test_a_second_pack_is_refused_naming_the_folder_and_pid(raw_tcp, tmp_path):
    out = tmp_path / "out"
    holder = hold(out)
    try:
        for args in ([], ["--overwrite"], ["--resume"]):
            proc = pack(raw_tcp, out, *args)
            assert proc.returncode == 1, proc.stderr
            lines = proc.stderr.strip().splitlines()
            assert len(lines) == 1 and "Traceback" not in proc.stderr
            assert str(out) in lines[0] and f"pid {holder.pid}" in lines[0]
            assert "another carla-wds pack" in lines[0]
        assert [p.name for p in out.iterdir()] == [PACK_LOCK]   # nothing of the second pack
        assert json.loads((out / PACK_LOCK).read_text())["pid"] == holder.pid
    finally:
        holder.kill()
        holder.wait()


def test_the_lock_of_a_killed_pack_blocks_nothing(raw_tcp, tmp_path):
    out = tmp_path / "out"
    holder = hold(out)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    assert (out / PACK_LOCK).exists()   # the file stays; the kernel dropped its flock
    proc = pack(raw_tcp, out)
    assert proc.returncode == 0, proc.stderr
    assert (out / "manifest.json").exists() and not (out / PACK_LOCK).exists()


def test_packs_one_after_the_other_and_a_failed_one_leave_no_lock(raw_tcp, tmp_path):
    out = tmp_path / "out"
    assert pack(raw_tcp, out).returncode == 0
    assert pack(raw_tcp, out, "--overwrite").returncode == 0
    assert not (out / PACK_LOCK).exists()
    proc = pack(raw_tcp, tmp_path / "bad", "--layout", "tcp", "--pred-len", "1000")
    assert proc.returncode == 1 and not (tmp_path / "bad").exists()


def test_a_second_pack_to_the_same_s3_prefix_is_refused(raw_tcp, s3_endpoint, tmp_path):
    pytest.importorskip("s3fs")
    from tests.s3server import BUCKET, env, fresh_prefix
    url = f"s3://{BUCKET}/{fresh_prefix()}"
    environ = {**os.environ, **env(s3_endpoint), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    holder = hold(url, environ)   # on the default staging folder of this URL
    try:
        proc = pack(raw_tcp, url, env=environ)
        assert proc.returncode == 1, proc.stderr
        line = proc.stderr.strip().splitlines()[-1]
        assert url in line and f"pid {holder.pid}" in line
    finally:
        holder.kill()
        holder.wait()
    proc = pack(raw_tcp, url, env=environ)
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "cache" / "carla-wds").exists()   # the staging folder, tidied
