"""load/transport/workers.py: a DataLoader worker that hangs inside fork (CPython 3.11, gh-112275:
the child inherits the interpreter's thread-state lock held by another thread, and gloo's
threads take it under DDP) is killed and the pass's workers forked again, in a real child
process whose first forked worker really hangs; the pass still delivers every sample once."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ..helpers import SCRIPTS, all_keys, make_pack


# the guard's hang timeout is wall-clock: under -n it runs in the serial group (tests/parallel.py)
@pytest.mark.serial
def test_a_worker_hung_in_fork_is_forked_again_and_no_sample_is_lost(tmp_path):
    shards = make_pack(tmp_path / "data", episodes=2, frames=24)
    out, mark = tmp_path / "keys.json", tmp_path / "stuck.pid"
    proc = subprocess.run([sys.executable, str(SCRIPTS / "stuck_fork.py"), str(shards),
                           str(out), str(mark)], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert mark.exists()   # a worker did hang in fork
    assert "hung in fork" in proc.stderr and "try 1 of 3" in proc.stderr, proc.stderr[-3000:]
    keys = json.loads(out.read_text())
    assert sorted(keys) == sorted(all_keys(shards)) and len(keys) == len(set(keys))
    stuck = int(mark.read_text())
    assert not Path(f"/proc/{stuck}").exists()   # killed, and reaped: nothing left behind
