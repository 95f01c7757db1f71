"""make test's two workers (tests/parallel.py, issue 39): the serial group runs one test at a
time on one worker, a module is one unit, a documented page's blocks stay together; run by
real pytest-xdist workers over an inner suite."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.proc   # the inner session starts xdist's worker processes
ROOT = Path(__file__).resolve().parents[1]

RECORD = '''
import json, os, time
from pathlib import Path

def record(name, sleep=0.3):
    start = time.monotonic()
    time.sleep(sleep)
    with Path(os.environ["PARALLEL_LOG"]).open("a") as f:
        f.write(json.dumps([name, os.environ["PYTEST_XDIST_WORKER"], start,
                            time.monotonic()]) + "\\n")
'''
# two modules with serial tests (which, by module, would go to both workers), and one without
FIRST = '''
import pytest
from record import record

@pytest.mark.parametrize("i", range(3))
@pytest.mark.serial
def test_serial(i):
    record(f"serial{i}")

@pytest.mark.parametrize("i", range(3))
def test_free(i):
    record(f"free{i}")
'''
SECOND = '''
import pytest
from record import record

@pytest.mark.bench
def test_bench():
    record("bench")

@pytest.mark.serial
def test_serial_too():
    record("serial_too")

def test_free_too():
    record("free_too")
'''
THIRD = '''
from record import record

def test_a():
    record("modA", 0.05)

def test_b():
    record("modB", 0.05)
'''


def _run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> list[list]:
    log = pytester.path / "log.jsonl"
    monkeypatch.setenv("PARALLEL_LOG", str(log))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makepyfile(record=RECORD, test_first=FIRST, test_second=SECOND, test_third=THIRD)
    result = pytester.runpytest_subprocess("-p", "tests.markers", "-p", "tests.parallel",
                                           "-p", "no:cacheprovider", "-n", "2",
                                           "--dist", "loadgroup", "-v")
    result.assert_outcomes(passed=11)
    assert "@" not in result.stdout.str()   # node ids as collected
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_the_serial_group_runs_one_at_a_time_on_one_worker(pytester, monkeypatch):
    runs = _run(pytester, monkeypatch)
    serial = sorted((r for r in runs if r[0].startswith(("serial", "bench"))),
                    key=lambda r: r[2])
    assert len(serial) == 5 and len({r[1] for r in serial}) == 1
    for before, after in zip(serial, serial[1:]):
        assert before[3] <= after[2]   # one ended before the next began
    # the rest was spread: both workers ran tests
    assert len({r[1] for r in runs}) == 2


def test_a_module_is_one_unit(pytester, monkeypatch):
    runs = {r[0]: r[1] for r in _run(pytester, monkeypatch)}
    assert runs["modA"] == runs["modB"]


def test_a_busy_page_goes_serial_and_a_quiet_page_keeps_its_own_group():
    from tests.parallel import SERIAL, _BUSY_BLOCK
    assert _BUSY_BLOCK.search("torchrun --nproc_per_node 2 -m carla_wds.train")
    assert _BUSY_BLOCK.search(".venv/bin/python tools/bench_loader.py --workdir /tmp/x")
    assert not _BUSY_BLOCK.search("carla-wds pack raw/ shards/ --layout tcp")
    assert SERIAL == "serial"
