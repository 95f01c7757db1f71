"""Resume after the number of ranks or workers changed (issue 29; load/plan/reshape.py)."""
from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from carla_wds import CARLAWebData

from ..helpers import SIZE, all_keys
from ..ranks import run_script
from .test_history import expected_window, route_frames

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "reshape_resume.py"


@pytest.fixture(scope="module")
def shards(zoo) -> Path:
    return zoo(episodes=4, frames=30, max_samples=9)   # shared, read-only (conftest.zoo)


def loaders(shards, world, workers, state=None, **kw):
    out = []
    for rank in range(world):
        data = CARLAWebData(str(shards), batch_size=4, num_workers=workers, rank=rank,
                            world_size=world, image_size=SIZE, seed=3, shuffle_buffer=16, **kw)
        data.set_epoch(2)
        if state is not None:
            data.load_state_dict(state)
        out.append(data)
    return out


def stop_after(shards, world, workers, k):
    """Every rank takes k batches; the keys they were served and rank 0's state."""
    served, state = [], None
    for data in loaders(shards, world, workers):
        it = iter(data)
        served += [key for b in itertools.islice(it, k) for key in b.keys]
        it.close()
        state = state or data.state_dict()
    return served, state


@pytest.mark.parametrize("old,new", [((2, 2), (1, 2)), ((1, 2), (2, 0)), ((2, 2), (2, 3)),
                                     ((3, 1), (2, 2)), ((1, 0), (3, 1))])
def test_the_rest_of_the_epoch_in_another_split(shards, old, new):
    total = len(all_keys(shards))
    served, state = stop_after(shards, *old, k=3)
    assert len(served) == 3 * 4 * old[0] and len(set(served)) == len(served)
    rest_loaders = loaders(shards, *new, state=state)
    lens = {len(d) for d in rest_loaders}
    rest = [key for d in rest_loaders for b in d for key in b.keys]
    # equal batches per rank; nothing served twice in the epoch; fewer than one global batch
    # of the new split unseen
    assert len(lens) == 1 and len(rest) == lens.pop() * 4 * new[0]
    assert len(set(rest)) == len(rest) and not set(rest) & set(served)
    assert 0 <= total - len(served) - len(rest) < 4 * new[0]


def test_a_state_saved_in_the_rest_resumes_in_the_same_split(shards):
    _, state = stop_after(shards, 2, 2, k=2)
    whole = [[key for b in d for key in b.keys] for d in loaders(shards, 1, 2, state=state)][0]
    first = loaders(shards, 1, 2, state=state)[0]
    it = iter(first)
    head = [key for b in itertools.islice(it, 3) for key in b.keys]
    it.close()
    again = loaders(shards, 1, 2, state=first.state_dict())[0]
    assert head + [key for b in again for key in b.keys] == whole
    with pytest.raises(ValueError, match="already resumed in another split"):
        loaders(shards, 2, 2, state=first.state_dict())


def test_the_next_epoch_is_whole_again(shards):
    _, state = stop_after(shards, 2, 1, k=2)
    data = loaders(shards, 1, 1, state=state)[0]
    plain = loaders(shards, 1, 1)[0]
    assert len(data) < len(plain)
    list(data)
    data.set_epoch(3)
    plain.set_epoch(3)
    assert len(data) == len(plain)
    assert [b.keys for b in data] == [b.keys for b in plain]


def test_history_windows_resume_in_another_split(shards):
    routes = route_frames(all_keys(shards))
    served, state = [], None
    for data in loaders(shards, 2, 1, history=2):
        it = iter(data)
        served += [k for b in itertools.islice(it, 2) for k in b.keys]
        it.close()
        state = state or data.state_dict()
    rest = []
    for b in loaders(shards, 1, 2, state=state, history=2)[0]:
        for i, key in enumerate(b.keys):   # each window still the route's frames before
            assert b.frame_keys[i] == expected_window(key, routes, 2, 1)
        rest += b.keys
    assert len(set(served + rest)) == len(served + rest)
    assert 0 <= len(routes_keys(routes)) - len(served) - len(rest) < 4


def routes_keys(routes: dict[str, set[int]]) -> list[str]:
    return [f"{r}__{f:04d}" for r, frames in routes.items() for f in frames]


def test_a_split_change_is_refused_where_the_rest_cannot_be_planned(shards):
    _, state = stop_after(shards, 2, 1, k=1)
    with pytest.raises(ValueError, match="batches_per_epoch"):
        stateful = loaders(shards, 2, 1, batches_per_epoch=4)[0].state_dict()
        loaders(shards, 1, 1, state=stateful, batches_per_epoch=4)
    # an eval loader ignores where a train run stopped: its passes always run whole
    assert len(loaders(shards, 1, 1, state={**state, "mode": "eval"}, mode="eval")[0]) > 0


@pytest.mark.ddp
@pytest.mark.parametrize("old,new", [(2, 1), (1, 2)])
def test_torchrun_resumes_with_another_number_of_ranks(shards, tmp_path, old, new):
    run_script(str(SCRIPT), str(shards), str(tmp_path), "stop", "3", "2", nproc=old)
    run_script(str(SCRIPT), str(shards), str(tmp_path), "rest", "0", "1", nproc=new)
    served = [k for r in range(old)
              for k in json.loads((tmp_path / f"stop-rank{r}.json").read_text())["keys"]]
    parts = [json.loads((tmp_path / f"rest-rank{r}.json").read_text()) for r in range(new)]
    rest = [k for p in parts for k in p["keys"]]
    assert len({p["len"] for p in parts}) == 1
    assert len(set(served + rest)) == len(served + rest)
    assert 0 <= len(all_keys(shards)) - len(served) - len(rest) < 3 * new


def test_a_state_saved_at_an_epochs_end_stays_at_its_end(shards):
    data = loaders(shards, 2, 1)[0]
    list(data)
    state = data.state_dict()
    resumed = loaders(shards, 1, 2, state=state)[0]
    assert resumed.consumed == len(resumed)   # the epoch is over, in any split
    resumed.set_epoch(3)
    assert len(resumed) == len(loaders(shards, 1, 2)[0])
