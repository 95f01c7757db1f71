"""The suite's torchrun helper: a hung run ends the test with every process's stack, and
leaves no process behind to load the rest of the suite."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from .helpers import torchrun

HANGS = """
    import multiprocessing, os, sys, time
    def stuck_worker():
        time.sleep(1000)
    worker = multiprocessing.Process(target=stuck_worker)
    worker.start()
    Path = __import__("pathlib").Path
    Path(sys.argv[1], os.environ["RANK"]).write_text(f"{os.getpid()} {worker.pid}")
    time.sleep(1000)
"""


def test_a_hung_torchrun_fails_with_stacks_and_leaves_no_process(tmp_path):
    script = tmp_path / "hangs.py"
    script.write_text(textwrap.dedent(HANGS))
    with pytest.raises(AssertionError) as failure:
        torchrun(str(script), str(tmp_path), timeout=15)
    text = str(failure.value)
    assert "no end after 15 s" in text
    assert "in stuck_worker" in text and "hangs.py" in text   # the worker's own stack
    pids = [int(p) for r in "01" for p in (tmp_path / r).read_text().split()]
    assert len(pids) == 4
    assert all(not Path(f"/proc/{pid}").exists() or _zombie(pid) for pid in pids)


def _zombie(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] == "Z"



def test_the_zoo_packs_once_per_arguments_and_notices_a_changed_file(tmp_path):
    """tests/helpers.PackZoo (the `zoo` fixture): one pack per arguments, and any change to a
    shared pack's files is listed at the session's end."""
    from tests.helpers import PackZoo
    zoo = PackZoo(tmp_path)
    one = zoo(episodes=1, frames=8, max_samples=4)
    assert zoo(frames=8, episodes=1, max_samples=4) == one and len(zoo.packs) == 1
    assert zoo(episodes=1, frames=9, max_samples=4) != one and zoo.changed() == []
    shard = sorted(one.glob("*.tar"))[0]
    shard.write_bytes(shard.read_bytes()[:-1024])
    (one / "extra.txt").write_text("x")
    assert zoo.changed() == [f"{one.parent}/shards/extra.txt", f"{one.parent}/shards/{shard.name}"]
