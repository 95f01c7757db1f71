"""Cost markers, assigned by rule from what a test starts (issue 39), and the house rule that
keeps them honest.

`make test` runs every tier; `make quick` deselects the costly ones (`-m "not (proc or
ddp or s3 or docs or bench or browser or workers)"`), the inner loop of a developer's day.

Assignment (at collection, so `-m` can select on it): the code a test reaches is walked, the
test function, every fixture it uses, and every function of the tests package those call
(through globals, module attributes and nested functions), and the names and strings in it
decide:
- `ddp`: reaches tests.helpers.torchrun, or tests/ranks.py (DDP ranks forked from pytest);
- `proc`: names `subprocess`, `Popen` or `sys.executable` (the CLI or a tool as a child), or
  holds a `pipe:` URL (a command the loader runs);
- `bench`: a string naming a benchmark tool (`bench_*.py`), or a block of docs/benchmarks.md;
- `docs`: a documented block (tests/test_docs_blocks.py);
- `browser`: a string naming Chromium;
- `s3`: uses moto's server (the `s3_endpoint` fixture).
A test may also carry a marker by hand (`@pytest.mark.proc`).

The rule: `subprocess.Popen` and `multiprocessing`'s process starts are watched while each
test sets up, runs and tears down. A test
in which this repository's code (tests, carla_wds, tools; not a library's, such as ctypes
running ldconfig) started a child process but that carries none of the process markers fails, naming the
command, as tests/test_sizes.py fails a module over its lines. So a process the walk cannot
see (one that library code starts) is caught the first time the suite runs it.
"""
from __future__ import annotations

import multiprocessing.process
import os
import re
import subprocess
import sys
import types
from pathlib import Path
from typing import Any, Iterator

import pytest

from .parallel import assign_groups

MARKERS: dict[str, str] = {
    "proc": "starts a child process (the CLI or a tool through subprocess / sys.executable)",
    "ddp": "launches DDP ranks (tests.helpers.torchrun, or forked by tests/ranks.py)",
    "s3": "uses moto's S3 server on 127.0.0.1 (the s3_endpoint fixture)",
    "docs": "runs a block of README.md or docs/ (tests/test_docs_blocks.py)",
    "bench": "runs a benchmark tool (tools/bench_*.py)",
    "browser": "drives headless Chromium",
    "workers": "forks worker processes (DataLoader num_workers > 0, pack workers, a pool)",
}
# the markers that say "this test may start processes"; s3's server is a thread
STARTS_PROCESSES = ("proc", "ddp", "docs", "bench", "browser", "workers")
FAST = "not (" + " or ".join(MARKERS) + ")"

_BENCH = re.compile(r"bench_\w+\.py")
_PROC_NAMES = {"subprocess", "Popen", "executable", "check_output"}
# a worker count in a call's keywords, a dict or a parameter; a pool of processes
_WORKER_COUNTS = {"num_workers", "workers", "--workers"}
# what forks them given a count: the loader, torch's DataLoader, a pack (API, CLI, fixture)
_WORKER_STARTERS = {"CARLAWebData", "DataLoader", "pack", "packer", "main", "Trainer"}
_POOLS = {"Pool", "ProcessPoolExecutor", "Process"}
# a worker count of 0 keeps a test in this process (a pack's 1 may still use a pool)
_IN_PROCESS = {"num_workers": (0,), "workers": (0,)}


def _own(obj: Any) -> bool:
    """Code of this test suite (walked further), not of a library."""
    module = getattr(obj, "__module__", None) or ""
    return module.startswith(("tests", "test_")) or module.endswith("conftest")


def _codes(func: types.FunctionType) -> Iterator[types.CodeType]:
    stack = [func.__code__]
    while stack:
        code = stack.pop()
        yield code
        stack.extend(c for c in code.co_consts if isinstance(c, types.CodeType))


def _reached(roots: list[Any]) -> tuple[set[str], set[str], set[Any]]:
    """Names and strings in the code reachable from `roots`, and the functions reached."""
    names: set[str] = set()
    strings: set[str] = set()
    seen: set[Any] = set()
    todo = [f for f in roots if isinstance(f, types.FunctionType)]
    while todo:
        func = todo.pop()
        if func in seen:
            continue
        seen.add(func)
        for code in _codes(func):
            names.update(code.co_names)
            strings.update(c for c in code.co_consts if isinstance(c, str))
            # a call's keyword names are a tuple of strings among the constants
            strings.update(s for c in code.co_consts if isinstance(c, tuple)
                           for s in c if isinstance(s, str))
            todo.extend(_callees(func.__globals__, code.co_names))
    return names, strings, seen


def _callees(scope: dict[str, Any], used: tuple[str, ...]) -> Iterator[types.FunctionType]:
    for name in used:
        value = scope.get(name)
        if isinstance(value, types.FunctionType) and _own(value):
            yield value
        elif isinstance(value, type) and _own(value):
            yield from (v for v in vars(value).values() if isinstance(v, types.FunctionType))
        elif isinstance(value, types.ModuleType) and value.__name__.startswith("tests"):
            yield from (getattr(value, n) for n in used
                        if isinstance(getattr(value, n, None), types.FunctionType))


def markers_for(item: pytest.Item) -> set[str]:
    """The cost markers the rule gives `item` (besides any it carries by hand)."""
    fixtures = getattr(item, "_fixtureinfo", None)
    defs = fixtures.name2fixturedefs.values() if fixtures else ()
    roots = [getattr(item, "function", None)] + [d[-1].func for d in defs if d]
    names, strings, funcs = _reached(roots)
    found = set()
    # real torchrun, or ranks forked from pytest (tests/ranks.py): the runtime watch below
    # sees Popen, not fork, so this rule is what keeps a forked-ranks test out of make quick
    if any((f.__module__, getattr(f, "__name__", "")) == ("tests.helpers", "torchrun")
           or f.__module__ == "tests.ranks" for f in funcs):
        found.add("ddp")
    if names & _PROC_NAMES or any(s.startswith("pipe:") for s in strings):
        found.add("proc")   # a pipe: URL is a command the loader runs
    text = " ".join(strings) + " " + item.nodeid
    if _BENCH.search(text) or "benchmarks.md" in item.nodeid:
        found.add("bench")
    if item.nodeid.startswith("tests/test_docs_blocks.py::test_block"):
        found.add("docs")
    if "chromium" in text.lower():
        found.add("browser")
    if "s3_endpoint" in getattr(item, "fixturenames", ()):
        found.add("s3")
    if _forks_workers(item, names | strings):
        found.add("workers")
    return found


def _forks_workers(item: pytest.Item, words: set[str]) -> bool:
    """Whether `item` may start worker processes: it names a pool, or reaches what forks
    workers and names a worker count that its parameters do not pin to 0."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    if any(params.get(k) in values for k, values in _IN_PROCESS.items() if k in params):
        return False
    counted = bool(words & _WORKER_COUNTS) or any(
        isinstance(params.get(k), int) for k in _IN_PROCESS)
    return bool(words & _POOLS) or bool(counted and words & _WORKER_STARTERS) or \
        _counts_in(list(params.values()))


def _counts_in(values: list[Any]) -> bool:
    """A parameter holding keywords with a worker count above 0 (a dict, or one inside a
    tuple or list), as a table of configurations does."""
    while values:
        value = values.pop()
        if isinstance(value, dict):
            if any(isinstance(value.get(k), int) and value[k] > 0 for k in _IN_PROCESS):
                return True
            values.extend(value.values())
        elif isinstance(value, (tuple, list)):
            values.extend(value)
    return False


def pytest_configure(config: pytest.Config) -> None:
    for name, why in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {why}")
    _watch_popen()
    _watch_processes()


# first, so that tests/parallel.py's groups (which read these markers) are set before
# pytest-xdist's hook turns them into node ids
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for name in sorted(markers_for(item)):
            item.add_marker(name)
    assign_groups(config, items)


_started: list[str] = []


def _watch_popen() -> None:
    """Record every child process started in this pytest process (once per process)."""
    if getattr(subprocess.Popen.__init__, "_watched", False):
        return
    real = subprocess.Popen.__init__

    def init(self: subprocess.Popen, args: Any, *rest: Any, **kw: Any) -> None:
        if _ours(sys._getframe(1)):
            _started.append(args if isinstance(args, str) else " ".join(map(str, args)))
        real(self, args, *rest, **kw)
    init._watched = True   # type: ignore[attr-defined]
    subprocess.Popen.__init__ = init   # type: ignore[method-assign]


def _watch_processes() -> None:
    """Record every multiprocessing process started in this pytest process: DataLoader's and
    a pack's workers start there through library code, so no caller check applies."""
    real = multiprocessing.process.BaseProcess.start
    if getattr(real, "_watched", False):
        return

    def start(self: multiprocessing.process.BaseProcess) -> None:
        _started.append(f"a multiprocessing process ({self.name}, target {self._target!r})")
        real(self)
    start._watched = True   # type: ignore[attr-defined]
    multiprocessing.process.BaseProcess.start = start   # type: ignore[method-assign]


_ROOT = str(Path(__file__).resolve().parents[1]) + os.sep


def _ours(frame: types.FrameType | None) -> bool:
    """Whether the code that asked subprocess for the process is this repository's (tests,
    carla_wds, tools), not a library's: ctypes.util.find_library runs ldconfig the first time
    some import needs it, in whichever test that happens to be."""
    while frame is not None and frame.f_code.co_filename == subprocess.__file__:
        frame = frame.f_back
    if frame is None:
        return False
    name = frame.f_code.co_filename
    module = frame.f_globals.get("__name__", "")
    return (name.startswith(_ROOT) and f"{os.sep}.venv{os.sep}" not in name) or \
        module.startswith(("tests", "test_"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    _started.clear()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if call.when != "teardown" or not _started or report.failed:
        return
    if any(item.get_closest_marker(m) for m in STARTS_PROCESSES):
        return
    report.outcome = "failed"
    report.longrepr = (
        f"{item.nodeid} started {len(_started)} child process(es), first: {_started[0][:300]!r}, "
        f"but carries none of the markers {', '.join(STARTS_PROCESSES)} (tests/markers.py). "
        "Fix: mark it (@pytest.mark.proc, or the marker of what it starts) so `make quick` "
        "leaves it out, or teach markers_for the helper that starts it")


__all__ = ["FAST", "MARKERS", "STARTS_PROCESSES", "markers_for"]
