"""The pack wing's pickle opcode walker (carla_wds/pack/pickle_walk.py) on numpy object
arrays (issue 42: Bench2Drive's HD map `arr`): read only by Walk(objects=True), as nested lists
of the walked values; every state numpy would trust but its own pickles never give is refused.
(LEAD's pickles: tests/pack/datasets/lead/test_pickle_walker.py.)"""
from __future__ import annotations

import pickle

import numpy as np
import pytest

from carla_wds import limits
from carla_wds.pack.pickle_measure import measure
from carla_wds.pack.pickle_walk import Refused, Walk

PAIRS = [(5, {-1: [{"Points": [((1.0, -2.5, 0.0), (0.0, 0.0, 90.0), True)], "Type": "Center",
                    "Left": (None, None)}]}),
         (6, {"Trigger_Volumes": [{"Points": [[1.0, 2.0, 3.0]], "Type": "StopSign"}]})]


def object_array(pairs: list) -> np.ndarray:
    return np.array(pairs, dtype=object)   # as gen_hdmap.py l.364


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_an_object_array_reads_as_nested_lists(protocol):
    data = pickle.dumps(object_array(PAIRS), protocol)
    got = Walk(objects=True).run(data)
    measure(got)
    assert got == [list(p) for p in PAIRS]
    if protocol < 4:   # numpy 1.x's names, as the released maps spell them (GLOBAL opcodes)
        old = data.replace(b"numpy._core.", b"numpy.core.")
        assert Walk(objects=True).run(old) == got


@pytest.mark.parametrize("arr", [np.empty((0,), object), np.empty((2, 0), object),
                                 np.array(None, object), np.arange(6).astype(object)
                                 .reshape(1, 2, 3)], ids=["0", "2x0", "0-d", "1x2x3"])
def test_object_array_shapes_read_as_tolist(arr):
    assert Walk(objects=True).run(pickle.dumps(arr, 3)) == arr.tolist()


def test_the_default_walk_refuses_object_arrays():
    with pytest.raises(Refused, match="dtype 'O8'"):
        Walk().run(pickle.dumps(object_array(PAIRS), 3))


def _swap(data: bytes, old: bytes, new: bytes) -> bytes:
    assert data.count(old) == 1
    return data.replace(old, new)


def test_object_array_states_numpy_never_writes_are_refused():
    data = pickle.dumps(object_array(PAIRS), 3)
    # the flags of the object dtype's state (63) changed: not numpy's plain object dtype
    bad_flags = _swap(data, b"K?t", b"K>t")
    with pytest.raises(Refused, match="object dtype whose state"):
        Walk(objects=True).run(bad_flags)
    # a Fortran-order object array, and a shape its list does not fill
    fortran = pickle.dumps(np.asfortranarray(object_array(PAIRS)), 3)
    with pytest.raises(Refused, match="not a list of its items in C order"):
        Walk(objects=True).run(fortran)
    short = _swap(data, b"K\x02K\x02\x86", b"K\x03K\x02\x86")   # shape (2, 2) -> (3, 2)
    with pytest.raises(Refused, match=r"shape \(3, 2\)"):
        Walk(objects=True).run(short)


def test_an_object_dtype_over_raw_bytes_is_refused():
    """frombuffer of an object dtype would make pointers of the file's bytes."""
    data = pickle.dumps(np.arange(2.0), 5).replace(b"f8", b"O8")
    with pytest.raises(Refused):
        Walk(objects=True).run(data)


def test_a_container_shared_through_the_memo_counts_each_time_it_is_held():
    """Walk.shared() names the containers a memo GET reached; measure(value, shared)
    remembers only those and still counts a list held 1,000 times 1,000 times."""
    big = [float(i) for i in range(100)]
    walk = Walk(objects=True)
    value = walk.run(pickle.dumps(object_array([(k, {-1: [big]}) for k in range(1000)]), 3))
    held = value[0][1][-1][0]
    assert all(row[1][-1][0] is held for row in value) and id(held) in walk.shared()
    measure(value, walk.shared())   # ~105,000 values expanded: within the default
    with limits.using(limits.active().with_overrides({"pickle_values": 50_000})):
        with pytest.raises(limits.LimitError, match="pickle_values"):
            measure(value, walk.shared())
