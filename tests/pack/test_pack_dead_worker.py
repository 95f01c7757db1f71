"""`pack --workers N` when a worker process dies (issue 38, N8): SIGKILL, the OOM killer and a
segfault all end a worker without a word. multiprocessing.Pool replaced it and waited forever
for its chunk; the pack must fail at once naming the chunk, record the part's failure for
pack-status, leave what a resume expects, and finish when run again.

The worker is really killed: `encode_chunk` is replaced (in this process, and so in the
spawned workers, which unpickle it from this module by name) by one that sends SIGKILL to its
own process on the victim route. A deadline (SIGALRM) turns the old hang into a failure."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path

from carla_wds.pack import packer
from carla_wds.pack.frames import encode_chunk

VICTIM = "Town03/routes_town03_02"   # the last route: shards are committed first
DEADLINE_S = 240   # far above a pass (seconds); only a hang reaches it


def kill_on_victim(args):
    """encode_chunk, but the worker holding the victim route's 2nd chunk dies by SIGKILL, once
    two shards are committed (the main process commits them from the other worker's chunks,
    which precede it) so that the failure leaves what a resume starts from."""
    tasks = args[0]
    if tasks[0].episode == VICTIM and tasks[0].frame > 0:
        part = Path(os.environ["DEAD_WORKER_PART"])
        for _ in range(600):   # not an assertion: it dies after 60 s in any case
            if len(list(part.glob("shard-*.tar"))) >= 2:
                break
            time.sleep(0.1)
        os.kill(os.getpid(), signal.SIGKILL)
    return encode_chunk(args)


@contextlib.contextmanager
def deadline(seconds: int):
    def hung(*_):
        raise TimeoutError(f"still running after {seconds} s: the pack hangs")
    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_a_killed_worker_fails_the_part_naming_its_chunk_and_a_rerun_finishes(
        raw_tcp, tmp_path, cli, monkeypatch):
    out = tmp_path / "out"
    assert cli("plan", raw_tcp, out, "--layout", "tcp", "--parts", "1").exit_code == 0
    args = ["pack", raw_tcp, out, "--layout", "tcp", "--plan", out / "plan.json", "--part",
            "0", "--workers", "2", "--check-images", "--max-samples", "5"]
    part = out / "parts" / "00000"
    monkeypatch.setenv("DEAD_WORKER_PART", str(part))   # spawned workers inherit it
    monkeypatch.setattr(packer, "encode_chunk", kill_on_victim)
    with deadline(DEADLINE_S):
        failed = cli(*args)
    assert failed.exit_code != 0
    [line] = [ln for ln in failed.output.splitlines() if ln.startswith("Error:")]
    assert f"while it held route {VICTIM} frames 16-" in line, failed.output
    assert "was killed by SIGKILL" in line and "run the same command again" in line
    marker = json.loads((out / "parts" / "00000.failed").read_text())
    assert f"route {VICTIM} frames 16-" in marker["error"]
    status = cli("pack-status", out)
    assert "failed   parts/00000: a pack worker" in status.output and "--array=0" in \
        status.output, status.output
    # what a resume expects: committed shards and their journal, nothing half-written
    assert not (part / "manifest.json").exists()
    assert (part / ".pack-journal.jsonl").is_file() and list(part.glob("shard-*.tar"))
    assert not list(part.glob(".*.tmp")) and not list(part.glob("*.tmp"))
    monkeypatch.setattr(packer, "encode_chunk", encode_chunk)
    with deadline(DEADLINE_S):
        again = cli(*args)
    assert again.exit_code == 0, again.output
    assert (part / "manifest.json").is_file() and not (out / "parts" / "00000.failed").exists()
    assert cli("verify", part).exit_code == 0


def test_a_pack_with_workers_makes_no_named_semaphore(raw_tcp, tmp_path, packer, monkeypatch):
    """Low 15: a spawn context's queues and locks are named POSIX semaphores in /dev/shm that a
    killed pack left behind (6 a run); the pipe pool makes none, so nothing can be left."""
    from multiprocessing import resource_tracker
    made, real = [], resource_tracker.register

    def register(name, rtype):
        made.append((name, rtype))
        real(name, rtype)
    monkeypatch.setattr(resource_tracker, "register", register)
    packer(raw_tcp, tmp_path / "out", layout="tcp", max_samples=5, workers=2, check_images=True)
    assert [name for name, rtype in made if rtype == "semaphore"] == []
