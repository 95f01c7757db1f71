"""carla_wds.datasets.bench2drive.can_bus_relative against UniAD/VAD's union2one, transcribed
here (Bench2DriveZoo@uniad/vad 10a2e5d mmcv/datasets/B2D_e2e_dataset.py l.110-129): a scene's
first frame gets can_bus[:3] = 0 and can_bus[-1] = 0, each later one minus the previous
frame's absolute values."""
from __future__ import annotations

import copy

import numpy as np
import pytest

from carla_wds.datasets.bench2drive import can_bus_relative


def union2one(cans: list[np.ndarray], folders: list[str]) -> list[np.ndarray]:
    metas = [c.copy() for c in cans]
    prev_scene = prev_pos = prev_angle = None
    for i, folder in enumerate(folders):
        if folder != prev_scene:
            prev_scene = folder
            prev_pos = copy.deepcopy(metas[i][:3])
            prev_angle = copy.deepcopy(metas[i][-1])
            metas[i][:3] = 0
            metas[i][-1] = 0
        else:
            tmp_pos = copy.deepcopy(metas[i][:3])
            tmp_angle = copy.deepcopy(metas[i][-1])
            metas[i][:3] -= prev_pos
            metas[i][-1] -= prev_angle
            prev_pos = copy.deepcopy(tmp_pos)
            prev_angle = copy.deepcopy(tmp_angle)
    return metas


def _window(rng: np.random.Generator, n: int) -> np.ndarray:
    w = rng.normal(size=(n, 18)) * 100
    w[:, 17] = rng.uniform(0, 360, n)
    return w


def test_a_window_gets_union2ones_relative_step():
    rng = np.random.default_rng(0)
    for n in (1, 2, 4, 5):
        w = _window(rng, n)
        before = w.copy()
        got = can_bus_relative(w)
        np.testing.assert_array_equal(got, np.stack(union2one(list(w), ["a"] * n)))
        np.testing.assert_array_equal(w, before)   # the input is not changed
        np.testing.assert_array_equal(got[:, 3:17], w[:, 3:17])   # absolute entries stay


def test_invalid_steps_are_zero_and_restart_the_chain_as_a_new_scene():
    rng = np.random.default_rng(1)
    w = _window(rng, 5)
    valid = np.array([False, False, True, True, True])
    got = can_bus_relative(w, valid)
    assert not got[:2].any()
    np.testing.assert_array_equal(got[2:], np.stack(union2one(list(w[2:]), ["b"] * 3)))
    batch = can_bus_relative(np.stack([w, w]), np.stack([valid, np.ones(5, bool)]))
    np.testing.assert_array_equal(batch[0], got)
    np.testing.assert_array_equal(batch[1], can_bus_relative(w))


def test_a_window_of_another_shape_is_refused():
    with pytest.raises(ValueError, match=r"expected \(K\+1, 18\)"):
        can_bus_relative(np.zeros((3, 17)))
