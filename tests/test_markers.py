"""The cost markers (tests/markers.py, issue 39): given by rule from what a test starts, and a
test that starts a process the rule cannot see fails until it is marked."""
from __future__ import annotations

import pytest

from tests.markers import FAST

pytestmark = pytest.mark.proc   # the inner sessions below start a python child process

SUITE = '''
import importlib, subprocess, sys
import pytest

def test_direct():
    subprocess.run([sys.executable, "-c", "pass"], check=True)

def _helper():
    return subprocess.run([sys.executable, "-c", "pass"], check=True)

def test_through_a_helper():
    _helper()

def _hidden():   # names neither subprocess nor sys.executable: the walk cannot see it
    python = getattr(sys, "exec" + "utable")
    importlib.import_module("sub" + "process").run([python, "-c", "pass"], check=True)

def test_hidden():
    _hidden()

@pytest.mark.proc
def test_hidden_but_marked():
    _hidden()

def test_plain():
    assert sum(range(4)) == 6
'''


def test_the_rule_marks_what_it_sees_and_fails_what_it_cannot(pytester):
    pytester.makepyfile(test_inner=SUITE)
    result = pytester.runpytest("-p", "tests.markers", "-p", "no:cacheprovider")
    # test_hidden passes its call and errors at teardown: counted in both
    result.assert_outcomes(passed=5, errors=1)
    result.stdout.fnmatch_lines(["*test_hidden*started 1 child process*carries none of the "
                                 "markers*"])
    assert "test_hidden_but_marked" not in "\n".join(
        line for line in result.stdout.lines if "carries none" in line)


def test_the_fast_tier_leaves_out_every_process(pytester):
    pytester.makepyfile(test_inner=SUITE)
    result = pytester.runpytest("-p", "tests.markers", "-p", "no:cacheprovider", "-m", FAST)
    # test_hidden slips past the walk, and the runtime rule fails it: the fast tier is
    # never silently slow
    result.assert_outcomes(passed=2, errors=1, deselected=3)


WORKERS = '''
import importlib
import pytest

def _start(n):   # names neither a pool nor a worker count: the walk cannot see it
    ctx = importlib.import_module("multi" + "processing").get_context("fork")
    procs = [getattr(ctx, "".join(["Pro", "cess"]))(target=int) for _ in range(n)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()

def DataLoader(num_workers):   # stands in for the loader: what forks, given a count
    _start(num_workers)

def test_keyword():
    DataLoader(num_workers=2)

@pytest.mark.parametrize("num_workers", [0, 2])
def test_parameter(num_workers):
    DataLoader(num_workers)

def test_hidden():
    _start(1)
'''


def test_worker_processes_are_marked_and_an_unmarked_one_fails(pytester):
    pytester.makepyfile(test_inner=WORKERS)
    result = pytester.runpytest("-p", "tests.markers", "-p", "no:cacheprovider", "-m", FAST)
    # test_keyword and test_parameter[2] start workers: out of the fast tier; [0] stays
    result.assert_outcomes(passed=2, errors=1, deselected=2)
    result.stdout.fnmatch_lines(["*test_hidden*started 1 child process*multiprocessing*"])
    marked = pytester.runpytest("-p", "tests.markers", "-p", "no:cacheprovider",
                                "-m", "workers")
    marked.assert_outcomes(passed=2, deselected=2)
