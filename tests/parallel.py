"""How `make test` spreads the suite over CI's two cores (pytest-xdist, issue 39).

`make test` runs `pytest -n 2 --dist loadgroup`. Work goes to the two workers in units:
- **one test module** per unit, by default, so that a module's fixtures (its packs) are built
  once, on one worker, as in a serial run;
- **the serial group** (`xdist_group("serial")`): tests that use both cores themselves, run
  one at a time on one worker while the other worker takes the rest. They are the tests
  marked `ddp` (torchrun), `bench` (a benchmark tool, whose doc block and test_bench_* test
  then share one run: tests/benchruns.py), `browser`, those marked `serial` by hand (the
  fork-hang guard's timing), and every block of a documented page that launches torchrun or
  a benchmark tool;
- **one documented page** per unit otherwise (`xdist_group("docs:<page>")`): a page's blocks
  share a working folder and run in order (tests/test_docs_blocks.py).

The groups travel from the workers' collection to the controller's scheduler in a side file,
so every node id stays as collected (`pytest <id>`, `-k` and the junit report are unchanged). Without `-n` (a single file, `make quick`) none of
this applies and the suite runs as before.
"""
from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

SERIAL = "serial"
SERIAL_MARKERS = ("ddp", "bench", "browser", SERIAL)
# a documented command that occupies both cores: torchrun, a benchmark tool, make demo
_BUSY_BLOCK = re.compile(r"torchrun|torch\.distributed\.run|bench_\w+\.py|make demo")


def _page(item: pytest.Item) -> str | None:
    """The documented page of a doc block's test, else None."""
    block = getattr(getattr(item, "callspec", None), "params", {}).get("block")
    return getattr(block, "page", None)


def group_of(item: pytest.Item, busy_pages: set[str]) -> str | None:
    """The xdist group `item` joins, or None for its module's unit."""
    page = _page(item)
    if page is not None:
        return SERIAL if page in busy_pages else f"docs:{page}"
    if any(item.get_closest_marker(m) for m in SERIAL_MARKERS):
        return SERIAL
    return None


def _busy_pages(items: list[pytest.Item]) -> set[str]:
    """Pages with any block that occupies both cores: all their blocks go serial, since a
    page's blocks must stay together and in order."""
    busy: dict[str, bool] = defaultdict(bool)
    for item in items:
        page = _page(item)
        if page is None:
            continue
        block = item.callspec.params["block"]
        busy[page] |= bool(_BUSY_BLOCK.search(block.code)) or bool(
            item.get_closest_marker("bench"))
    return {p for p, b in busy.items() if b}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "serial: uses both cores itself or depends on timing; "
                            "under -n it runs in the one serial group (tests/parallel.py)")
    if config.pluginmanager.hasplugin("xdist"):   # its hooks exist only with it
        config.pluginmanager.register(_Controller(), "carla_wds_parallel")


def assign_groups(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In a worker of `-n N --dist loadgroup`: write each test's group where the controller's
    scheduler reads it. Called by tests/markers.py's collection hook once the cost markers
    are on. (pytest-xdist's own loadgroup renames node ids, which pytest 9 ignores; a side
    file keeps the ids as they are.)"""
    where = getattr(config, "workerinput", {}).get(GROUPS_KEY)
    if not where:
        return
    busy = _busy_pages(items)
    groups = {item.nodeid: g for item in items if (g := group_of(item, busy)) is not None}
    out = Path(f"{where}.{config.workerinput['workerid']}")
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(groups))
    tmp.replace(out)   # whole or absent: the controller reads it after collection


GROUPS_KEY = "carla_wds_groups"


class _Controller:
    """The controller's side: tell each worker where to write its groups, and schedule by
    them (loadgroup's scheduling, with a module as the unit of every ungrouped test)."""

    def __init__(self) -> None:
        self.where = Path(tempfile.mkdtemp(prefix="carla_wds_groups_")) / "groups"

    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput[GROUPS_KEY] = str(self.where)

    def pytest_unconfigure(self) -> None:
        shutil.rmtree(self.where.parent, ignore_errors=True)

    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        if config.getvalue("dist") != "loadgroup":
            return None
        from xdist.scheduler import LoadScopeScheduling
        where = self.where

        class ModuleOrGroup(LoadScopeScheduling):
            groups: dict[str, str] | None = None

            def _split_scope(self, nodeid: str) -> str:
                if self.groups is None:   # every worker wrote the same map; any one will do
                    found = sorted(where.parent.glob(where.name + ".gw*"))
                    self.groups = json.loads(found[0].read_text()) if found else {}
                return self.groups.get(nodeid) or nodeid.split("::", 1)[0]

        return ModuleOrGroup(config, log)
