"""Issue 38 Low 13: load_state_dict holds a state's counters to their ranges, naming the field,
its value and the range, in the split it was saved in and in another one."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from carla_wds import CARLAWebData

SIZE = (32, 48)


def _loader(shards: Path, **kw) -> CARLAWebData:
    return CARLAWebData(str(shards), batch_size=4, image_size=SIZE, seed=3, **kw)


@pytest.mark.parametrize("field,value,expected", [
    ("consumed", -1, "consumed=-1 is invalid: expected a whole number from 0 to"),
    ("consumed", 1.5, "consumed=1.5 is invalid"),
    ("consumed", True, "consumed=True is invalid"),
    ("epoch", -1, "epoch=-1 is invalid: expected a whole number from 0 to 10,000,000"),
    ("epoch", 10 ** 30, "epoch=1000000000000000000000000000000 is invalid"),
    ("epoch", "3", "epoch='3' is invalid"),
    ("step_at_epoch_start", -5, "step_at_epoch_start=-5 is invalid: expected a whole number "
                                "from 0 to 9,007,199,254,740,992"),
    ("world_size", 10 ** 9, "world_size=1000000000 is invalid: expected a whole number from 1 "
                            "to 65,536"),
    ("num_workers", -1, "num_workers=-1 is invalid"),
    ("shuffle_buffer", 10 ** 12, "shuffle_buffer=1000000000000 is invalid"),
    ("reshape", {"world_size": 2}, "reshape is {'world_size': 2}: expected null or a mapping of "
                                   "world_size, num_workers, consumed, shuffle_buffer"),
    ("reshape", {"world_size": 2, "num_workers": 0, "consumed": -3, "shuffle_buffer": 0},
     "reshape.consumed=-3 is invalid"),
])
def test_counters_out_of_range_name_the_field(packed_tf4, field, value, expected):
    data = _loader(packed_tf4)
    state = {**data.state_dict(), field: value}
    with pytest.raises(ValueError, match=re.escape(expected)) as exc:
        data.load_state_dict(state)
    assert str(exc.value).startswith("cannot resume: the loader state's ")
    assert "Fix: resume from a state that CARLAWebData.state_dict() wrote" in str(exc.value)
    with pytest.raises(ValueError, match="the loader state is a list"):
        data.load_state_dict([state])


def test_consumed_is_held_to_the_batches_of_its_epoch(packed_tf4):
    data = _loader(packed_tf4)
    n = len(data)
    data.load_state_dict({**data.state_dict(), "consumed": n})   # a whole epoch: allowed
    with pytest.raises(ValueError, match=re.escape(
            f"consumed={n + 1} is invalid: expected a whole number from 0 to {n} (the batches "
            "of epoch 0 for world_size 1, num_workers 0)")):
        _loader(packed_tf4).load_state_dict({**data.state_dict(), "consumed": n + 1})


def test_consumed_is_held_to_the_old_splits_epoch_in_a_resume_in_another_split(packed_tf4):
    old = _loader(packed_tf4, rank=0, world_size=2)
    state = {**old.state_dict(), "consumed": len(old) + 1}   # len(old) < len of world_size 1
    new = _loader(packed_tf4)
    assert len(new) > len(old) + 1
    with pytest.raises(ValueError, match=re.escape(
            f"consumed={len(old) + 1} is invalid: expected a whole number from 0 to {len(old)} "
            "(the batches of epoch 0 for world_size 2, num_workers 0)")):
        new.load_state_dict(state)
    new.load_state_dict({**state, "consumed": len(old)})   # the old split's whole epoch
    assert new.consumed == len(new)
