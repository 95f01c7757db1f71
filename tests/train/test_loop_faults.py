"""The trainer under faults, with real processes: two trainers on one run_dir (the lock), and
the loader's verify / on_error settings turned on from the config."""
from __future__ import annotations

import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import numpy as np
import pytest

from carla_wds.train.runlock import LOCK_NAME, RunDirLocked, RunLock

from .test_loop import TINY, data, env, finish, launch, overrides  # noqa: F401 - data: fixture

RUN_FILES = ("metrics.jsonl", "checkpoint.pt", "config.json")


def wait_for(condition, proc: subprocess.Popen, log: Path, timeout: float = 240) -> None:
    """Until condition() holds; fails (with the log) if the process ends first or never does."""
    deadline = time.monotonic() + timeout
    while not condition():
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"gave up waiting (rc {proc.poll()}):\n{log.read_text()[-3000:]}")
        time.sleep(0.1)


def trainer_children(parent: int) -> list[int]:
    """Pids of the carla_wds.train ranks whose parent is `parent` (a torchrun agent)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmd = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if int(fields[1]) == parent and "carla_wds.train" in cmd and "distributed.run" not in cmd:
            found.append(int(stat.parent.name))
    return found


def running(pid: int) -> bool:
    """Alive and not a zombie (a zombie has closed its files, so its flock is gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_second_trainer_on_a_live_run_dir_fails_naming_the_first(data, tmp_path):
    run_dir, log1 = tmp_path / "run", tmp_path / "first.log"
    # The setup: a torchrun agent SIGKILLed while its rank trains on.
    with open(log1, "w") as out:
        agent = subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1",
             "-m", "carla_wds.train", "--config", TINY,
             *overrides(data, run_dir, epochs=100000, ckpt_every=1)],
            env=env(), stdout=out, stderr=subprocess.STDOUT)
    wait_for(lambda: (run_dir / "checkpoint.pt").exists(), agent, log1)
    (rank0,) = trainer_children(agent.pid)
    agent.send_signal(signal.SIGKILL)
    agent.wait(timeout=60)
    assert running(rank0), "the rank died with its agent; the scenario did not happen"
    os.kill(rank0, signal.SIGSTOP)   # frozen, so any change to its files is the second's
    try:
        before = {name: (run_dir / name).read_bytes() for name in RUN_FILES}
        second = launch(overrides(data, run_dir), nproc=2, extra=["--standalone"])
        out, _ = second.communicate(timeout=300)
        assert second.returncode != 0, out[-3000:]
        assert (f"run_dir {run_dir} is in use by another trainer: pid {rank0} on "
                f"{socket.gethostname()}") in out, out[-3000:]
        assert "command: " in out and "carla_wds.train" in out and "Fix: wait for it" in out
        assert "rank 1 of 2: not training, because rank 0 could not lock run_dir" in out, out
        # eval_only writes config.json and eval.json into run_dir, so it needs the lock too
        evaluate = subprocess.run([sys.executable, "-m", "carla_wds.train", "--config", TINY,
                                   *overrides(data, run_dir, eval_only="true")],
                                  env=env(), capture_output=True, text=True, timeout=300)
        assert evaluate.returncode == 1
        assert evaluate.stderr.startswith(f"error: run_dir {run_dir} is in use by another "
                                          f"trainer: pid {rank0}"), evaluate.stderr
        assert "Traceback" not in evaluate.stderr
        assert {name: (run_dir / name).read_bytes() for name in RUN_FILES} == before
        assert not (run_dir / "eval.json").exists()
    finally:
        os.kill(rank0, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while running(rank0) and time.monotonic() < deadline:
        time.sleep(0.1)
    # The dead holder's note is still in .lock; the kernel released its flock.
    assert json.loads((run_dir / LOCK_NAME).read_text())["pid"] == rank0
    third = launch(overrides(data, run_dir, epochs=1, resume="none"))
    finish(third)
    assert json.loads((run_dir / LOCK_NAME).read_text())["pid"] == third.pid


def test_lock_names_its_holder_and_is_free_once_the_holder_dies(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from carla_wds.train.runlock import RunLock; "
         f"RunLock({str(tmp_path)!r}).acquire(); print('held', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(RunDirLocked, match=f"pid {holder.pid} on {socket.gethostname()}"):
            RunLock(tmp_path).acquire()
    finally:
        holder.kill()
        holder.wait()
    lock = RunLock(tmp_path).acquire()
    try:
        assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == os.getpid()
    finally:
        lock.release()


def edit_shard(path: Path, edit) -> None:
    """Rewrite a shard with plain tarfile, passing (index, {member: bytes}) through edit()."""
    samples: dict[str, dict[str, bytes]] = {}
    with tarfile.open(path) as tar:
        for m in tar:
            key, _, suffix = m.name.partition(".")
            samples.setdefault(key, {})[suffix] = tar.extractfile(m).read()
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for i, (key, members) in enumerate(samples.items()):
            for suffix, payload in edit(i, members).items():
                info = tarfile.TarInfo(f"{key}.{suffix}")
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))


def short_waypoints(i: int, members: dict[str, bytes]) -> dict[str, bytes]:
    if i == 0:
        buf = io.BytesIO()
        np.save(buf, np.zeros((3, 2), np.float32))
        members["waypoints.npy"] = buf.getvalue()
    return members


def copy_pack(data: Path, tmp_path: Path) -> Path:
    root = tmp_path / "pack"
    for split in ("train", "val"):
        shutil.copytree(data / split, root / split)
    return root


def train_cli(pack: Path, run_dir: Path, **extra) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "carla_wds.train", "--config", TINY,
                           *overrides(pack, run_dir, epochs=1, **extra)],
                          env=env(), capture_output=True, text=True, timeout=300)


def test_data_verify_catches_a_shard_whose_bytes_changed(data, tmp_path):
    pack = copy_pack(data, tmp_path)
    shard = pack / "train" / "shard-000000.tar"
    raw = bytearray(shard.read_bytes())
    raw[700] ^= 0xFF   # inside the first member: the tar still parses
    shard.write_bytes(bytes(raw))
    run = train_cli(pack, tmp_path / "run", **{"data.verify": "true"})
    assert run.returncode == 1, run.stderr[-3000:]
    err = run.stderr.strip().splitlines()[-1]
    assert err.startswith("error: ") and "shard-000000.tar" in err and "sha256" in err, err
    assert "Traceback" not in run.stderr
    assert not (tmp_path / "run" / "checkpoint.pt").exists()


def test_data_on_error_raise_names_the_sample_and_skip_trains_through_it(data, tmp_path):
    pack = copy_pack(data, tmp_path)
    for shard in sorted((pack / "train").glob("*.tar")):   # some train sample is surely seen
        edit_shard(shard, short_waypoints)
    edit_shard(pack / "val" / "shard-000000.tar", short_waypoints)   # shown, and evaluated
    failed = train_cli(pack, tmp_path / "raise", **{"data.num_workers": 1})
    assert failed.returncode == 1
    err = failed.stderr.strip().splitlines()[-1]
    assert err.startswith("error: shard ") and "waypoints.npy has shape (3, 2)" in err, err
    assert "Traceback" not in failed.stderr
    run_dir = tmp_path / "skip"
    skipped = train_cli(pack, run_dir, **{"data.on_error": "skip"})
    assert skipped.returncode == 0, skipped.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["skipped_samples"]["train"] >= 1 and summary["skipped_samples"]["val"] == 1
    assert summary["val"]["n"] == 20 - 1   # every val sample once, less the bad one
    assert (run_dir / "predictions.png").is_file()
