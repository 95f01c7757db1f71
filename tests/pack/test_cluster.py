"""Packing on a cluster (issue 31): `carla-wds plan`, `pack --plan --part auto|i`, resuming a
killed part and `pack-status`, with the real command in real processes on real route folders.
The in-place merge: test_cluster_merge.py; the sbatch and xargs runners: test_cluster_slurm.py."""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from carla_wds.pack.cluster import array_spec
from carla_wds.pack.plan_parts import greedy_parts
from carla_wds.schema import make_key

from .clusterkit import EXE, MAX, error_lines, plan_of, run, skewed_raw


@pytest.fixture(scope="module")
def raw(raw_tcp, tmp_path_factory) -> Path:
    return skewed_raw(raw_tcp, tmp_path_factory.mktemp("skewed") / "raw")


@pytest.fixture(scope="module")
def full(raw, tmp_path_factory, packer) -> Path:
    """A single-process pack of the same input: what the parts are compared with."""
    out = tmp_path_factory.mktemp("full") / "out"
    packer(raw, out, max_samples=5)
    return out


def _route_bytes(route: Path) -> int:
    return sum(p.stat().st_size for p in route.rglob("*") if p.is_file())


def test_plan_balances_bytes_within_the_greedy_bound_and_lists_every_episode_once(raw, tmp_path):
    out = tmp_path / "out"
    result = run("plan", raw, out, "--layout", "tcp", "--parts", "4", check=True)
    assert "wrote" in result.stdout and "sbatch --array=0-3" in result.stdout
    plan = plan_of(out)
    routes = sorted(p.parent.relative_to(raw).as_posix() for p in raw.glob("*/*/measurements"))
    listed = [n for p in plan["part_list"] for n in p["episodes"]]
    assert sorted(listed) == routes and len(listed) == len(set(listed)) == 12
    sizes = {r: _route_bytes(raw / r) for r in routes}
    for p in plan["part_list"]:
        assert p["episodes"] == {n: sizes[n] for n in p["episodes"]}   # the file system's
        assert p["bytes"] == sum(p["episodes"].values())
    # Graham's bound of the greedy rule: no part above the mean plus the largest episode
    total, parts = sum(sizes.values()), [p["bytes"] for p in plan["part_list"]]
    assert sum(parts) == total == plan["bytes"]
    assert max(parts) <= total / 4 + max(sizes.values())
    assert [p["dir"] for p in plan["part_list"]] == [f"parts/{i:05d}" for i in range(4)]


def test_greedy_parts_keep_to_the_bound_on_a_long_tail():
    import numpy as np
    sizes = {f"clip{i:05d}": int(s) for i, s in
             enumerate(np.random.default_rng(3).lognormal(19.5, 0.8, 2000))}
    split = greedy_parts(sizes, 64)
    held = [sum(sizes[n] for n in p) for p in split]
    assert sorted(n for p in split for n in p) == sorted(sizes)
    assert max(held) <= sum(held) / 64 + max(sizes.values())
    assert all(p == sorted(p) for p in split)   # discovery order inside a part


def _keys_of(routes) -> set[str]:
    return {make_key(r, 0).rpartition("__")[0] for r in routes}


def test_a_slurm_array_task_packs_its_part_and_the_parts_cover_the_pack_once(
        raw, full, tmp_path, samples_of):
    out = tmp_path / "out"
    run("plan", raw, out, "--layout", "tcp", "--parts", "3", check=True)
    plan = plan_of(out)
    got: dict[str, dict[str, bytes]] = {}
    for i in (2, 0, 1):
        run("pack", raw, out, "--layout", "tcp", "--plan", out / "plan.json", "--part", "auto",
            *MAX, env={"SLURM_ARRAY_TASK_ID": str(i)}, check=True)
        done = sorted(p.name for p in (out / "parts").iterdir() if (p / "manifest.json").exists())
        assert f"{i:05d}" in done
        mine = samples_of(out / "parts" / f"{i:05d}")
        assert {k.rpartition("__")[0] for k in mine} == _keys_of(plan["part_list"][i]["episodes"])
        assert not set(mine) & set(got)
        got.update(mine)
    assert got == samples_of(full)   # every sample once, byte for byte


def test_part_auto_outside_a_slurm_array_is_one_line(raw, tmp_path):
    out = tmp_path / "out"
    run("plan", raw, out, "--layout", "tcp", "--parts", "2", check=True)
    env = {k: v for k, v in os.environ.items() if k != "SLURM_ARRAY_TASK_ID"}
    result = subprocess.run([EXE, "pack", str(raw), str(out), "--plan", str(out / "plan.json"),
                             "--part", "auto"], capture_output=True, text=True, env=env)
    assert result.returncode == 1
    assert error_lines(result) == ["Error: --part auto: SLURM_ARRAY_TASK_ID is not set (not a "
                                   "SLURM array task). Fix: pass --part i with 0 <= i < 2, or "
                                   "submit with sbatch --array=0-1"]
    bad = run("pack", raw, out, "--plan", out / "plan.json", "--part", "2")
    assert len(error_lines(bad)) == 1 and "the plan has parts 0..1" in bad.stderr


def test_a_plan_whose_fingerprint_differs_from_the_input_is_refused_in_one_line(
        raw_tcp, tmp_path):
    raw = skewed_raw(raw_tcp, tmp_path / "raw", copies=2)
    out = tmp_path / "out"
    run("plan", raw, out, "--layout", "tcp", "--parts", "2", check=True)
    route = sorted(plan_of(out)["part_list"][0]["episodes"])[0]
    with open(raw / route / "pad.bin", "ab") as f:
        f.write(b"changed")
    result = run("pack", raw, out, "--layout", "tcp", "--plan", out / "plan.json", "--part", "0")
    assert result.returncode == 1 and len(error_lines(result)) == 1
    line = error_lines(result)[0]
    assert f"episode {route} has" in line and "fingerprint" in line
    assert f"Fix: plan again (carla-wds plan {raw} OUT --layout tcp --parts 2)" in line
    assert not (out / "parts").exists()   # refused before anything was written
    # an episode the plan never saw: named, whichever part is asked for
    extra = raw / "copy09" / Path(route).name
    extra.parent.mkdir()
    subprocess.run(["cp", "-al", str(raw / route), str(extra)], check=True)
    result = run("pack", raw, out, "--layout", "tcp", "--plan", out / "plan.json", "--part", "1")
    assert len(error_lines(result)) == 1 and "1 episode(s) not in the plan, e.g. copy09/" \
        in error_lines(result)[0]


def _kill_mid_part(raw: Path, out: Path, part: int) -> None:
    """Run part `part` and SIGKILL it once a shard is committed but before its manifest."""
    folder = out / "parts" / f"{part:05d}"
    proc = subprocess.Popen([EXE, "pack", str(raw), str(out), "--plan", str(out / "plan.json"),
                             "--part", str(part), "--max-samples", "2"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        if list(folder.glob("shard-*.tar")) and not (folder / "manifest.json").exists():
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.002)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the kill did not land mid-part"


def test_a_killed_part_shows_as_running_then_failed_and_resumes_byte_identical(raw, tmp_path):
    out, ref = tmp_path / "out", tmp_path / "ref"
    run("plan", raw, out, "--layout", "tcp", "--parts", "2", check=True)
    ref.mkdir()
    (ref / "plan.json").write_bytes((out / "plan.json").read_bytes())
    _kill_mid_part(raw, out, 1)
    status = run("pack-status", out, check=True).stdout.splitlines()
    assert status[0].startswith("running  parts/00001: journal ")
    assert status[1:] == ["0 done, 1 running, 0 failed, 1 missing of 2 parts", "--array=0"]
    stale = run("pack-status", out, "--stale", "0", check=True).stdout.splitlines()
    assert stale[0].startswith("failed   parts/00001: journal untouched for ")
    assert stale[1:] == ["0 done, 0 running, 1 failed, 1 missing of 2 parts", "--array=0-1"]
    run("pack", raw, out, "--plan", out / "plan.json", "--part", "1", "--max-samples", "2",
        check=True)
    run("pack", raw, ref, "--plan", ref / "plan.json", "--part", "1", "--max-samples", "2",
        check=True)
    a, b = out / "parts" / "00001", ref / "parts" / "00001"
    assert sorted(p.name for p in a.iterdir()) == sorted(p.name for p in b.iterdir())
    for p in a.iterdir():
        assert p.read_bytes() == (b / p.name).read_bytes(), p.name
    again = run("pack", raw, out, "--plan", out / "plan.json", "--part", "1", check=True)
    assert "part 1 is complete already; nothing to do" in again.stdout


def test_pack_status_lists_each_state_and_the_array_string_exactly(raw, tmp_path):
    out = tmp_path / "out"
    run("plan", raw, out, "--layout", "tcp", "--parts", "8", check=True)
    plan = plan_of(out)
    for i in (0, 5):
        run("pack", raw, out, "--plan", out / "plan.json", "--part", str(i), *MAX, check=True)
    # part 4 fails for real: one of its images is not a PNG any more (same size, so the
    # plan still matches), and the pack records its error line
    route = sorted(plan["part_list"][4]["episodes"])[0]
    image = sorted((raw / route / "rgb").iterdir())[5]
    broken = tmp_path / "raw4"
    subprocess.run(["cp", "-al", str(raw), str(broken)], check=True)
    target = broken / route / "rgb" / image.name
    size = target.stat().st_size
    target.unlink()
    target.write_bytes(b"\0" * size)
    failed = run("pack", broken, out, "--plan", out / "plan.json", "--part", "4", *MAX)
    assert failed.returncode == 1
    # parts 2 (fresh journal: running) and 3 (a journal an hour old: a killed pack)
    for i, age in ((2, 0), (3, 7200)):
        folder = out / "parts" / f"{i:05d}"
        folder.mkdir(parents=True)
        (folder / ".pack-journal.jsonl").write_text('{"options": {}}\n')
        t = time.time() - age
        os.utime(folder / ".pack-journal.jsonl", (t, t))
    lines = run("pack-status", out, check=True).stdout.splitlines()
    assert lines[0].startswith("running  parts/00002: journal ")
    assert lines[1].startswith("failed   parts/00003: journal untouched for ")
    assert lines[2].startswith("failed   parts/00004: ") and image.name in lines[2]
    assert lines[3:] == ["2 done, 1 running, 2 failed, 3 missing of 8 parts",
                         "--array=1,3-4,6-7"]


def test_array_spec_runs():
    assert array_spec([3, 17, 40, 41, 42]) == "3,17,40-42"
    assert array_spec([5, 1, 2, 3, 5]) == "1-3,5" and array_spec([]) == ""


def test_planning_again_over_another_plan_is_refused_and_the_same_plan_is_kept(raw_tcp, tmp_path):
    raw, out = skewed_raw(raw_tcp, tmp_path / "raw", copies=1), tmp_path / "out"
    run("plan", raw, out, "--layout", "tcp", "--parts", "2", check=True)
    first = (out / "plan.json").read_bytes()
    run("plan", raw, out, "--layout", "tcp", "--parts", "2", check=True)   # the same: fine
    other = run("plan", raw, out, "--layout", "tcp", "--parts", "3")
    assert other.returncode == 1 and len(error_lines(other)) == 1
    assert f"{out}/plan.json holds another plan" in other.stderr and "Fix: " in other.stderr
    assert (out / "plan.json").read_bytes() == first


def test_a_plan_outside_output_dir_is_refused_since_status_and_merge_read_it_there(raw, tmp_path):
    out = tmp_path / "out"
    run("plan", raw, out, "--layout", "tcp", "--parts", "2", check=True)
    result = run("pack", raw, tmp_path / "elsewhere", "--plan", out / "plan.json", "--part", "0")
    assert result.returncode == 1 and len(error_lines(result)) == 1
    assert f"--plan {out}/plan.json is not OUTPUT_DIR's plan ({tmp_path}/elsewhere/plan.json)" \
        in result.stderr and not (tmp_path / "elsewhere").exists()
