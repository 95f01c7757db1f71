"""tests/ranks.py, the pytest-side rank launcher: torchrun's environment and a gloo group per
rank, results in rank order, DataLoader workers inside a rank, and failures that name the rank
and leave no process behind."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from .helpers import SIZE, child_pids
from .ranks import run_ranks, run_script
from .test_helpers import _zombie

pytestmark = pytest.mark.ddp


def _whoami(tag: str) -> dict:
    import torch
    import torch.distributed as tdist
    names = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK")
    total = torch.tensor([tdist.get_rank() + 1])
    tdist.all_reduce(total)
    return {"tag": tag, "pid": os.getpid(), "group": [tdist.get_rank(), tdist.get_world_size()],
            "env": [os.environ[n] for n in names], "sum": int(total), "threads":
            torch.get_num_threads()}


def test_each_rank_runs_in_a_gloo_group_with_torchruns_environment():
    got = run_ranks(_whoami, "x", world_size=3)
    assert [g["group"] for g in got] == [[0, 3], [1, 3], [2, 3]]
    assert [g["env"] for g in got] == [[str(r), str(r), "3", "3", "0"] for r in range(3)]
    assert {g["sum"] for g in got} == {6} and {g["tag"] for g in got} == {"x"}
    assert {g["threads"] for g in got} == {1}
    assert len({g["pid"] for g in got} | {os.getpid()}) == 4
    assert not child_pids()


def _loader_keys(shards: str) -> list[str]:
    from carla_wds import CARLAWebData
    data = CARLAWebData(shards, batch_size=3, num_workers=2, image_size=SIZE)
    return [k for b in data for k in b.keys]


def test_a_rank_reads_with_two_forked_dataloader_workers(zoo):
    """The library's fork-hang guard and its workers' fork, inside a forked rank."""
    shards = zoo()
    ranks = run_ranks(_loader_keys, str(shards))
    assert len(ranks[0]) == len(ranks[1]) > 0
    assert not set(ranks[0]) & set(ranks[1])
    assert not child_pids()


def _fails_on_one(out: str) -> None:
    import torch.distributed as tdist
    Path(out, str(tdist.get_rank())).write_text(str(os.getpid()))
    if tdist.get_rank() == 1:
        print("rank one speaking")
        raise ValueError("broken on purpose")
    tdist.barrier()   # rank 0 waits here for a peer that is gone


def test_a_failing_rank_is_named_with_its_traceback_and_the_others_stopped(tmp_path):
    start = time.monotonic()
    with pytest.raises(AssertionError) as failure:
        run_ranks(_fails_on_one, str(tmp_path), timeout=120)
    text = str(failure.value)
    assert "rank 1 raised" in text and "ValueError: broken on purpose" in text
    assert "_fails_on_one" in text and "rank one speaking" in text
    assert time.monotonic() - start < 60   # not the timeout: the grace after a failure
    pids = [int((tmp_path / r).read_text()) for r in "01"]
    assert not any(Path(f"/proc/{p}").exists() for p in pids) and not child_pids()


def _exits(code: int) -> None:
    os._exit(code)


def test_a_rank_that_exits_without_a_result_is_named_with_its_code():
    with pytest.raises(AssertionError, match="rank 0 exited with code 3"):
        run_ranks(_exits, 3, world_size=1, init=False)


def _hangs(out: str) -> None:
    import multiprocessing
    worker = multiprocessing.get_context("fork").Process(target=_stuck_worker)
    worker.start()
    Path(out, os.environ["RANK"]).write_text(f"{os.getpid()} {worker.pid}")
    time.sleep(1000)


def _stuck_worker() -> None:
    time.sleep(1000)


def test_a_hung_rank_fails_with_stacks_and_leaves_no_process(tmp_path):
    # 15 s, as the torchrun helper's own test: a loaded machine may take seconds to fork,
    # join the group and start the worker before the hang begins
    with pytest.raises(AssertionError) as failure:
        run_ranks(_hangs, str(tmp_path), timeout=15)
    text = str(failure.value)
    assert "no end after 15 s" in text, text
    assert "in _stuck_worker" in text and "in _hangs" in text, text   # the worker's stack too
    pids = [int(p) for r in "01" for p in (tmp_path / r).read_text().split()]
    assert len(pids) == 4
    time.sleep(0.5)
    assert all(not Path(f"/proc/{pid}").exists() or _zombie(pid) for pid in pids)
    assert not child_pids()


def test_a_rank_hung_before_it_reached_python_is_forked_again(tmp_path, monkeypatch):
    """A fork that hangs inside fork (gh-112275: never runs Python, never joins the group) is
    simulated by a first rank 1 that stops before it reports: it is killed and forked again."""
    import tests.ranks as ranks
    real = ranks._rank_main

    def stalls_once(*args):
        if args[2]["RANK"] == "1":   # (fn, args, env, ...): its environment to be
            first = tmp_path / "first-fork"
            if not first.exists():
                first.write_text(str(os.getpid()))
                time.sleep(1000)
        real(*args)

    monkeypatch.setattr(ranks, "_rank_main", stalls_once)
    monkeypatch.setattr(ranks, "START_WAIT", 2.0)
    got = run_ranks(_whoami, "again", timeout=60)
    assert [g["group"] for g in got] == [[0, 2], [1, 2]] and {g["sum"] for g in got} == {3}
    stalled = int((tmp_path / "first-fork").read_text())
    assert stalled not in {g["pid"] for g in got}
    assert not Path(f"/proc/{stalled}").exists() and not child_pids()


SCRIPT = """
import sys, torch.distributed as tdist
tdist.init_process_group("gloo")
print(f"rank {tdist.get_rank()} of {tdist.get_world_size()}: {sys.argv[1:]}")
tdist.barrier()
tdist.destroy_process_group()
"""


def test_a_torchrun_script_runs_as_main_on_each_rank(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    proc = run_script(script, "a", "b", nproc=2)
    assert proc.stdout == "rank 0 of 2: ['a', 'b']\nrank 1 of 2: ['a', 'b']\n"
