"""History windows through an adapter (issue 40): `adapter=NAME` or your function with
`history=K` gives the codebase's dict with a time axis, every per-sample tensor (B, K + 1,
...) oldest frame first, `frame_valid` (B, K + 1) and `frame_keys`; `valid` and `key` are each
row's own (current) frame's. Each frame goes through the transform as it would without
history; a frame the window lacks is a copy of the next real one, marked in `frame_valid`.

Checked on real packs, for each registered adapter that applies to them, with 0 and 2
workers: exact len(), every sample once in eval, each time step equal to its frame loaded
without history (an independent load), and identical batches after a mid-epoch resume."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from carla_wds.load import CARLAWebData

from ..overlaykit import resumed_epoch
from .adapters.test_b2d_tcp_model import small as b2d  # noqa: F401 - a fixture

K = 2   # earlier frames per window
PICKLE = {"allow_pickle_input": True}
# adapter -> the zoo's pack it applies to (the digest test's packs: shared in a session)
PACKS = {"tcp": dict(layout="tcp_roach", episodes=2, frames=16, max_samples=6, **PICKLE),
         "garage": dict(layout="garage", episodes=1, frames=40, max_samples=6),
         "transfuser2022": dict(layout="transfuser2022", episodes=2, frames=16, max_samples=6,
                                **PICKLE),
         "simlingo": dict(layout="garage_lb2_simlingo", episodes=1, frames=40, max_samples=6),
         "b2d_tcp": None}   # Bench2Drive clips as b2d_tcp needs them (its test's fixture)
ADDED = ("valid", "key", "frame_valid", "frame_keys")
# what an adapter draws even in eval (SimLingo picks its prompt's form and commentary): a
# window's frames all draw from its own frame's generator, so an earlier frame's draws are not
# those of the frame loaded alone (its own frame's are)
DRAWN = {"simlingo": ("prompt", "answer")}
# the b2d_tcp stitch's bilinear resize can differ in the last bit of a grey level between
# torch thread counts (tests/conftest.py): its image is compared to one level
LEVEL = {"b2d_tcp": ("front_img", 1 / 255 / 0.2)}   # std >= 0.224 in its normalisation


@pytest.fixture(scope="module")
def pack(zoo, b2d):
    return lambda name: str(b2d) if PACKS[name] is None else str(zoo(**PACKS[name]))


def _loader(pack, name: str, **kw) -> CARLAWebData:
    return CARLAWebData(pack(name), adapter=name, batch_size=2, seed=4, **kw)


def _collated(value: Any) -> bool:
    """A list collate made per position (its items batched: tensors, dicts, such lists), not
    one value per row (or with windows one list per row)."""
    return isinstance(value, (list, tuple)) and bool(value) and all(
        isinstance(v, (torch.Tensor, dict)) or _collated(v) for v in value)


def _frame(value: Any, row: int, step: int | None = None) -> Any:
    """Row `row` (and time step `step`) of a collated value."""
    if isinstance(value, torch.Tensor):
        return value[row] if step is None else value[row, step]
    if isinstance(value, dict):
        return {k: _frame(v, row, step) for k, v in value.items()}
    if _collated(value):
        return [_frame(v, row, step) for v in value]
    return value[row] if step is None else value[row][step]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _differ(a: dict, b: dict) -> dict[str, Any]:
    """The keys whose values differ, with the largest difference of a tensor's."""
    return {k: float((a[k].double() - b[k].double()).abs().max())
            if isinstance(a[k], torch.Tensor) and a[k].shape == b[k].shape else None
            for k in a if not _same(a[k], b[k])}


def _without_added(batch: dict) -> dict:
    return {k: v for k, v in batch.items() if k not in ADDED}


@pytest.fixture(scope="module")
def frames(pack):
    """name -> {key: that frame's values}, loaded without history (eval, in process)."""
    cache: dict[str, dict[str, Any]] = {}

    def get(name: str) -> dict[str, Any]:
        if name not in cache:
            out = {}
            for b in _loader(pack, name, mode="eval"):
                values = _without_added(b)
                for i, (key, ok) in enumerate(zip(b["key"], b["valid"].tolist())):
                    if ok:
                        out[key] = _frame(values, i)
            cache[name] = out
        return cache[name]
    return get


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("name", sorted(PACKS))
def test_eval_windows_are_the_frames_loaded_alone(pack, frames, name, workers):
    plain = frames(name)
    data = _loader(pack, name, mode="eval", history=K, num_workers=workers)
    batches = list(data)
    assert len(batches) == len(data)
    served = []
    for b in batches:
        values, n = _without_added(b), len(b["key"])
        assert b["frame_valid"].shape == (n, K + 1) and len(b["frame_keys"]) == n
        for r in range(n):
            if not b["valid"][r]:
                continue
            served.append(b["key"][r])
            keys, ok = b["frame_keys"][r], b["frame_valid"][r].tolist()
            assert ok[-1] and keys[-1] == b["key"][r]
            for t in range(K + 1):
                # a missing step is the next real frame's copy (its own frame at the latest)
                want = keys[t] if ok[t] else next(k for k, v in zip(keys[t:], ok[t:]) if v)
                got, same = _frame(values, r, t), dict(plain[want])
                if t < K:
                    for k in DRAWN.get(name, ()):
                        got.pop(k), same.pop(k)
                if name in LEVEL:
                    k, tol = LEVEL[name]
                    assert torch.allclose(got.pop(k), same.pop(k), rtol=0, atol=tol * 1.01)
                assert _same(got, same), (name, b["key"][r], t, _differ(got, same))
    assert sorted(served) == sorted(plain)   # every sample once
    assert any(all(b["frame_valid"][r]) for b in batches for r in range(len(b["key"])))


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("name", ["garage", "tcp"])
def test_a_train_epoch_resumed_mid_way_serves_the_same_batches(pack, name, workers):
    want, head, rest = resumed_epoch(lambda: _loader(pack, name, history=K,
                                                     num_workers=workers), head=2)
    assert len(want) == len(_loader(pack, name, history=K)) == len(head) + len(rest)
    assert all(b["frame_valid"].shape == (2, K + 1) for b in want)
    assert all(_same(a, b) for a, b in zip(want, head + rest))


def _mine(sample: dict, rng: np.random.Generator) -> dict:
    """A user's function: each frame's own key and speed, and one draw."""
    return {"frame": int(sample["key"].rsplit("__", 1)[1]), "speed": sample["speed"],
            "draw": float(rng.random())}


@pytest.mark.parametrize("workers", [0, 2])
def test_a_function_gets_each_frame_and_one_rng_per_window(pack, workers):
    kw = dict(batch_size=3, seed=2, image_size=(16, 32), history=K, num_workers=workers)
    batches = list(CARLAWebData(pack("garage"), adapter=_mine, **kw))
    alone = {k: (s, d) for b in CARLAWebData(pack("garage"), adapter=_mine, batch_size=3,
                                             seed=2, image_size=(16, 32))
             for k, s, d in zip(b["key"], b["speed"].tolist(), b["draw"].tolist())}
    for b in batches:
        assert b["frame"].shape == b["speed"].shape == b["draw"].shape == (3, K + 1)
        for r, key in enumerate(b["key"]):
            if not b["valid"][r]:
                continue
            # one generator per window, seeded by its own frame's key: the same draws for
            # every frame, those of the frame loaded alone
            assert set(b["draw"][r].tolist()) == {alone[key][1]}
            for t, (k, ok) in enumerate(zip(b["frame_keys"][r], b["frame_valid"][r].tolist())):
                if ok:
                    assert int(b["frame"][r, t]) == int(k.rsplit("__", 1)[1])
                    assert float(b["speed"][r, t]) == pytest.approx(alone[k][0])
