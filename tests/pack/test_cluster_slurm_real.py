"""The whole cluster flow on a real SLURM (issue 31): sbatch the array of a plan, scancel one task
mid-part, read pack-status, resubmit the --array= list it prints, merge in place, and compare
with a single-process pack of the same input, sample by sample.

Needs a running SLURM whose jobs can see this machine's files: a one-node cluster on this
machine (tools/slurm/local_cluster.sh start, as root, with Debian's slurm-wlm and munge).
Skipped where `sinfo` finds no idle node."""
from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import carla_wds

from .clusterkit import EXE, run, skewed_raw

# the script as shipped in the package (carla-wds slurm-script writes this file)
SBATCH = Path(carla_wds.__file__).resolve().parent / "cluster_scripts" / "pack_array.sbatch"


def _slurm_up() -> bool:
    if not shutil.which("sbatch") or not shutil.which("sinfo"):
        return False
    try:
        out = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True,
                             timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "idle" in out or "mix" in out


pytestmark = pytest.mark.skipif(not _slurm_up(), reason="no running SLURM (tools/slurm/"
                                "local_cluster.sh start)")


def _submit(raw: Path, out: Path, array: str) -> str:
    venv = str(Path(sys.executable).parent)
    job = subprocess.run(
        ["sbatch", "--parsable", f"--array={array}", "--cpus-per-task=1", "--mem=500M",
         f"--chdir={out.parent}", f"--output={out.parent}/slurm-%A_%a.log",
         f"--export=ALL,CARLA_WDS={EXE},PATH={venv}:/usr/bin:/bin",
         str(SBATCH), str(raw), str(out), "--layout", "tcp", "--max-samples", "2"],
        capture_output=True, text=True, check=True)
    return job.stdout.strip().split(";")[0]


def _wait(job: str, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not subprocess.run(["squeue", "-h", "-j", job], capture_output=True,
                              text=True).stdout.strip():
            return
        time.sleep(0.5)
    subprocess.run(["scancel", job])
    raise AssertionError(f"job {job} did not end in {timeout} s")


def test_array_scancel_status_resubmit_merge_equals_a_single_pack(
        raw_tcp, tmp_path, packer, samples_of):
    raw, out = skewed_raw(raw_tcp, tmp_path / "raw", copies=4), tmp_path / "out"
    single = tmp_path / "single"
    packer(raw, single, max_samples=2)
    run("plan", raw, out, "--layout", "tcp", "--parts", "3", check=True)
    job = _submit(raw, out, "0-2")
    part = out / "parts" / "00001"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:   # task 1 mid-part: a shard committed, no manifest
        if list(part.glob("shard-*.tar")) and not (part / "manifest.json").exists():
            subprocess.run(["scancel", f"{job}_1"], check=True)
            break
        time.sleep(0.002)
    _wait(job)
    assert not (part / "manifest.json").exists(), "scancel did not land mid-part"
    lines = run("pack-status", out, "--stale", "0", check=True).stdout.splitlines()
    assert lines[-2:] == ["2 done, 0 running, 1 failed, 0 missing of 3 parts", "--array=1"]
    _wait(_submit(raw, out, lines[-1].split("=", 1)[1]))
    assert run("pack-status", out, check=True).stdout.splitlines()[-1] == \
        "3 done, 0 running, 0 failed, 0 missing of 3 parts"
    assert run("merge", "--in-place", out, "--deep").returncode == 0
    assert run("verify", out, "--deep").returncode == 0
    assert samples_of(out) == samples_of(single)   # every sample, byte for byte
