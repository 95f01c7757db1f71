"""The runners of a plan (issue 31), as `carla-wds slurm-script` writes them from the package
(issue 43: they ship in the wheel and run from any folder): pack_array.sbatch parses (`bash -n`)
and, run as an array task would run it (SLURM_ARRAY_TASK_ID set), packs its part; pack_xargs.sh
packs every part with real processes, here and through `ssh` (a stand-in ssh on PATH that runs
the command on this machine and logs the host it was sent to). Each script is written into a
folder of its own and run from another one, never from the repository."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import carla_wds
from carla_wds.cli import main

from .clusterkit import EXE, plan_of, run, skewed_raw

SHIPPED = Path(carla_wds.__file__).resolve().parent / "cluster_scripts"


def _write(folder: Path, *flags: str) -> Path:
    """`carla-wds slurm-script [--xargs] --out FILE`, in process."""
    folder.mkdir(parents=True, exist_ok=True)
    name = "pack_xargs.sh" if "--xargs" in flags else "pack_array.sbatch"
    done = CliRunner().invoke(main, ["slurm-script", *flags, "--out", str(folder / name)])
    assert done.exit_code == 0, done.output
    return folder / name


@pytest.fixture(scope="module")
def scripts(tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("scripts")
    return _write(folder), _write(folder, "--xargs")


@pytest.fixture(scope="module")
def planned(raw_tcp, tmp_path_factory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("runners")
    raw = skewed_raw(raw_tcp, base / "raw", copies=1)
    return raw, base


def _env(**kw: str) -> dict[str, str]:
    """This venv's carla-wds first on PATH, as a cluster's module load would put it."""
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", **kw}


def test_slurm_script_writes_and_prints_the_shipped_scripts_byte_for_byte(tmp_path):
    for flags, name in (((), "pack_array.sbatch"), (("--xargs",), "pack_xargs.sh")):
        written = _write(tmp_path, *flags)
        assert written.read_bytes() == (SHIPPED / name).read_bytes()
        assert os.access(written, os.X_OK), f"{written} is not executable"
        printed = CliRunner().invoke(main, ["slurm-script", *flags])
        assert printed.exit_code == 0 and printed.stdout_bytes == (SHIPPED / name).read_bytes()
        assert "tools/slurm" not in printed.stdout   # no path into a repository checkout


def test_the_plan_hint_names_the_command_that_writes_the_runner(raw_tcp, tmp_path):
    out = tmp_path / "out"
    done = CliRunner().invoke(main, ["plan", str(raw_tcp), str(out), "--layout", "tcp",
                                     "--parts", "2"])
    assert done.exit_code == 0, done.output
    assert (f"carla-wds slurm-script --out pack_array.sbatch, then sbatch --array=0-1 "
            f"pack_array.sbatch {raw_tcp} {out} --layout tcp") in done.output
    assert "tools/slurm" not in done.output


def test_the_scripts_parse(scripts):
    sbatch, xargs = scripts
    for script in (sbatch, xargs):
        assert subprocess.run(["bash", "-n", str(script)]).returncode == 0, script
    text = sbatch.read_text()
    for line in ("#SBATCH --cpus-per-task=2", "#SBATCH --mem=2G", "#SBATCH --requeue"):
        assert line in text


def test_the_sbatch_script_packs_the_array_tasks_part(planned, scripts, tmp_path):
    raw, base = planned
    out = base / "sbatch"
    run("plan", raw, out, "--layout", "tcp", "--parts", "2", check=True)
    done = subprocess.run(["bash", str(scripts[0]), str(raw), str(out), "--layout", "tcp"],
                          env=_env(SLURM_ARRAY_TASK_ID="1"), capture_output=True, text=True,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (out / "parts").iterdir()) == ["00001"]
    assert (out / "parts" / "00001" / "manifest.json").is_file()


def test_the_xargs_runner_packs_two_parts_locally(planned, scripts, tmp_path):
    raw, base = planned
    out = base / "xargs"
    run("plan", raw, out, "--layout", "tcp", "--parts", "2", check=True)
    done = subprocess.run([str(scripts[1]), str(raw), str(out), "2", "--layout", "tcp"],
                          env=_env(), capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "2 done, 0 running, 0 failed, 0 missing of 2 parts" in done.stdout
    assert run("merge", "--in-place", out).returncode == 0


def test_the_xargs_runner_sends_parts_round_robin_over_ssh_hosts(planned, scripts, tmp_path):
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
    done = subprocess.run([str(scripts[1]), str(raw), str(out), "1", "--layout", "tcp"], env=env,
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert sorted(log.read_text().splitlines()) == ["nodeA 0", "nodeA 2", "nodeB 1"]
    assert len(plan_of(out)["part_list"]) == 3
    assert "3 done" in done.stdout
