"""Two iterators of one CARLAWebData (issue 38, Low 10).

The loader's position in the epoch (`consumed`, what state_dict saves) is one per loader, so
two live passes cannot both follow it: before, a second iterator started at the first's
position and served 7 of len() = 8 batches without a word, and the two then took batches from
each other. Now the second live pass is refused in one line naming the fix, and the first goes
on, whole. A pass that ended (exhausted, closed, or dropped) frees the loader: the next one
goes on from its position, as a resumed one does.
"""
from __future__ import annotations

import gc
from pathlib import Path

import pytest

from carla_wds import CARLAWebData

from ..helpers import SIZE


@pytest.fixture(scope="module")
def shards(zoo) -> Path:
    return zoo(episodes=2, frames=30, max_samples=7)   # shared, read-only (conftest.zoo)


def loader(shards: Path, workers: int) -> CARLAWebData:
    return CARLAWebData(str(shards), batch_size=4, num_workers=workers, seed=3,
                        image_size=SIZE)


def whole_pass(shards: Path, workers: int) -> list[list[str]]:
    return [b.keys for b in loader(shards, workers)]


@pytest.mark.parametrize("workers", [0, 2])
def test_a_second_live_iterator_is_refused_and_the_first_goes_on_whole(shards, workers):
    expected = whole_pass(shards, workers)
    data = loader(shards, workers)
    assert len(expected) == len(data) >= 6
    first = iter(data)
    got = [next(first).keys for _ in range(3)]
    second = iter(data)
    with pytest.raises(RuntimeError, match=r"still running.*3 of \d+ batches.*Fix: .*close"):
        next(second)
    got += [b.keys for b in first]   # the first pass lost nothing to the refused one
    assert got == expected
    assert [b.keys for b in data] == expected   # that epoch was whole: the next pass is too


@pytest.mark.parametrize("workers", [0, 2])
def test_a_pass_closed_early_frees_the_loader_to_go_on_from_there(shards, workers):
    expected = whole_pass(shards, workers)
    data = loader(shards, workers)
    first = iter(data)
    got = [next(first).keys for _ in range(2)]
    first.close()
    rest = [b.keys for b in data]
    assert got + rest == expected   # nothing served twice, nothing lost


def test_a_dropped_iterator_held_in_a_reference_cycle_does_not_block_the_next(shards):
    expected = whole_pass(shards, 0)
    data = loader(shards, 0)
    cycle: list = []
    cycle.append(cycle)
    it = iter(data)
    cycle.append(it)
    got = [next(it).keys]
    del it, cycle   # unreachable, but only the collector can close it
    got += [b.keys for b in data]
    assert got == expected
    gc.collect()


@pytest.mark.parametrize("workers", [0, 2])
def test_eval_passes_may_overlap_each_whole(shards, workers):
    """Eval has no position to share: every pass runs whole, so two at once are allowed."""
    data = CARLAWebData(str(shards), batch_size=4, num_workers=workers, mode="eval",
                        image_size=SIZE)
    expected = [b.keys for b in data]
    kept = iter(data)
    early = [next(kept).keys]
    assert [b.keys for b in data] == expected
    assert early + [b.keys for b in kept] == expected
