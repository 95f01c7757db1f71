"""The runners of a plan (issue 31): tools/slurm/pack_array.sbatch parses (`bash -n`) and, run as
an array task would run it (SLURM_ARRAY_TASK_ID set), packs its part; tools/slurm/pack_xargs.sh
packs every part with real processes, here and through `ssh` (a stand-in ssh on PATH that runs
the command on this machine and logs the host it was sent to)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .clusterkit import EXE, plan_of, run, skewed_raw

ROOT = Path(__file__).resolve().parents[2]
SBATCH = ROOT / "tools" / "slurm" / "pack_array.sbatch"
XARGS = ROOT / "tools" / "slurm" / "pack_xargs.sh"


@pytest.fixture(scope="module")
def planned(raw_tcp, tmp_path_factory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("runners")
    raw = skewed_raw(raw_tcp, base / "raw", copies=1)
    return raw, base


def _env(**kw: str) -> dict[str, str]:
    """This venv's carla-wds first on PATH, as a cluster's module load would put it."""
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", **kw}


def test_the_scripts_parse():
    for script in (SBATCH, XARGS):
        assert subprocess.run(["bash", "-n", str(script)]).returncode == 0, script
        assert os.access(script, os.X_OK), f"{script} is not executable"
    text = SBATCH.read_text()
    for line in ("#SBATCH --cpus-per-task=2", "#SBATCH --mem=2G", "#SBATCH --requeue"):
        assert line in text


def test_the_sbatch_script_packs_the_array_tasks_part(planned):
    raw, base = planned
    out = base / "sbatch"
    run("plan", raw, out, "--layout", "tcp", "--parts", "2", check=True)
    done = subprocess.run(["bash", str(SBATCH), str(raw), str(out), "--layout", "tcp"],
                          env=_env(SLURM_ARRAY_TASK_ID="1"), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (out / "parts").iterdir()) == ["00001"]
    assert (out / "parts" / "00001" / "manifest.json").is_file()


def test_the_xargs_runner_packs_two_parts_locally(planned):
    raw, base = planned
    out = base / "xargs"
    run("plan", raw, out, "--layout", "tcp", "--parts", "2", check=True)
    done = subprocess.run([str(XARGS), str(raw), str(out), "2", "--layout", "tcp"],
                          env=_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "2 done, 0 running, 0 failed, 0 missing of 2 parts" in done.stdout
    assert run("merge", "--in-place", out).returncode == 0


def test_the_xargs_runner_sends_parts_round_robin_over_ssh_hosts(planned, tmp_path):
    raw, base = planned
    out = base / "ssh"
    run("plan", raw, out, "--layout", "tcp", "--parts", "3", check=True)
    bin_dir, log = tmp_path / "bin", tmp_path / "ssh.log"
    bin_dir.mkdir()
    # ssh [-o X] HOST COMMAND: log the host, run COMMAND in a shell here (as sshd would there)
    (bin_dir / "ssh").write_text(f'#!/bin/bash\nwhile [ "$1" = -o ]; do shift 2; done\n'
                                 f'echo "$1 ${{2##*--part }}" >> {log}\nexec bash -c "$2"\n')
    (bin_dir / "ssh").chmod(0o755)
    env = _env(HOSTS="nodeA nodeB", CARLA_WDS=EXE)
    env["PATH"] = f"{bin_dir}:{env['PATH']}"
    done = subprocess.run([str(XARGS), str(raw), str(out), "1", "--layout", "tcp"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert sorted(log.read_text().splitlines()) == ["nodeA 0", "nodeA 2", "nodeB 1"]
    assert len(plan_of(out)["part_list"]) == 3
    assert "3 done" in done.stdout
