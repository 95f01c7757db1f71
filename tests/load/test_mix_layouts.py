"""Mixing packs of different layouts (issue 40): a tcp + garage + bench2drive mix is served in
one common view (load/stream/common_view.py, docs/mixing.md): the selected cameras under one name at
one image_size; speed, command, target point and waypoints in one ego frame, right-handed,
x forward, y left; the waypoints resampled to one rate and cut to one pred_len.

Checked on real packs: exact len() and every sample once in eval over 2 ranks x 2 workers
(and the rest of an epoch resumed in another split);
each sample's common fields equal to the independent conversion of that pack's own fields,
loaded alone (the formulas written here from docs/coordinates.md's table, not the loader's
Frame table); identical batches after a mid-epoch resume; refusals in one line naming what
differs where no common view exists."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from carla_wds.load import CARLAWebData, Decode
from carla_wds.load.plan.mix import MixError
from tests.conftest import run_pack
from tests.helpers import all_keys, shared_raw

from ..overlaykit import resumed_epoch
from .test_digests import ZOO

S = (24, 32)


# docs/coordinates.md, "Conversions": each pack's (x, y) -> b2d (forward, left)
def to_common(points: np.ndarray, layout: str) -> np.ndarray:
    x, y = points[..., 0], points[..., 1]
    if layout == "tcp":          # tcp (x, y) -> b2d (-y, -x)
        return np.stack([-y, -x], -1)
    return np.stack([x, -y], -1)   # garage (f, r) -> b2d (f, -r); bench2drive packs in garage


# waypoints per second of each pack (its layout's rate_hz, Bench2Drive's waypoint_rate_hz)
RATE = {"tcp": 2, "garage": 4, "bench2drive": 2}


@pytest.fixture(scope="module")
def packs(zoo, tmp_path_factory) -> dict[str, str]:
    raw = shared_raw(tmp_path_factory, "bench2drive", episodes=2, frames=30, seed=7,
                     image_size=(180, 320))   # shared with test_b2d_loader
    b2d = tmp_path_factory.mktemp("mix_layouts") / "b2d"
    run_pack(raw / "archives", b2d, layout="bench2drive", max_samples=6)
    return {"tcp": str(zoo(**ZOO["tcp"])), "garage": str(zoo(**ZOO["garage"])),
            "bench2drive": str(b2d)}


def spec(packs: dict[str, str], **more) -> dict:
    return {"entries": [{"source": packs[n], "weight": w} for n, w in
                        (("tcp", 2), ("garage", 1), ("bench2drive", 1))], **more}


def loader(packs, **kw) -> CARLAWebData:
    return CARLAWebData(mix=spec(packs), image_size=S, cameras=["front"], seed=4, batch_size=3,
                        **kw)


def alone(path: str) -> dict[str, dict]:
    """key -> the pack's own labels and front image, loaded alone (decoded whole, as the view
    decodes packs of other image formats)."""
    out = {}
    for b in CARLAWebData(path, batch_size=4, mode="eval", image_size=S, cameras=["front"],
                          decode=Decode(exact_resize=True)):
        for i, k in enumerate(b.keys):
            if b.valid[i]:
                out[k] = dict(speed=b.speed[i], command=b.command[i],
                              target_point=b.target_point[i].numpy(),
                              waypoints=b.waypoints[i].numpy(), image=b.images[i])
    return out


def test_eval_serves_every_sample_once_in_the_common_view(packs):
    own = {name: alone(p) for name, p in packs.items()}
    pack_of = {k: name for name, keys in own.items() for k in keys}
    seen = Counter()
    for rank in range(2):
        data = loader(packs, mode="eval", rank=rank, world_size=2, num_workers=2)
        assert data.pred_len == 4 and data.spec.cameras == ("front",)
        batches = list(data)
        assert len(batches) == len(data)
        for b in batches:
            assert b.images.shape[1:] == (1, 3, *S) and b.waypoints.shape[1:] == (4, 2)
            for i, key in enumerate(b.keys):
                if not b.valid[i]:
                    continue
                seen[key] += 1
                _check_sample(b, i, own[pack_of[key]][key], pack_of[key])
    assert seen == Counter({k: 1 for k in pack_of})


def _check_sample(b, i: int, mine: dict, layout: str) -> None:
    """One served sample against its pack's own fields, converted here."""
    every = RATE[layout] // 2   # the view's rate: the lowest, 2 Hz
    want_wp = to_common(mine["waypoints"][every - 1::every][:4], layout)
    assert np.allclose(b.waypoints[i].numpy(), want_wp, atol=1e-5)
    assert np.allclose(b.target_point[i].numpy(), to_common(mine["target_point"], layout),
                       atol=1e-5)
    diff = np.diff(np.concatenate([np.zeros((1, 2)), want_wp]), axis=0)
    assert np.allclose(b.waypoints_diff[i].numpy(), diff, atol=1e-5)
    assert torch.equal(b.speed[i], mine["speed"])
    assert torch.equal(b.command[i], mine["command"])
    assert torch.equal(b.images[i], mine["image"])


def test_train_epoch_is_exact_on_two_ranks_and_resumes_identically(packs):
    lens, keys = [], Counter()
    for rank in range(2):
        data = loader(packs, rank=rank, world_size=2, num_workers=2)
        batches = list(data)
        lens.append((len(data), len(batches)))
        keys.update(k for b in batches for k, ok in zip(b.keys, b.valid) if ok)
    assert lens[0] == lens[1] and lens[0][0] == lens[0][1] > 0
    whole, head, rest = resumed_epoch(lambda: loader(packs, num_workers=2), head=2)
    assert [b.keys for b in head + rest] == [b.keys for b in whole]
    for a, b in zip(head + rest, whole):
        assert torch.equal(a.images, b.images) and torch.equal(a.waypoints, b.waypoints)


def _one_line(exc: pytest.ExceptionInfo) -> str:
    msg = str(exc.value)
    assert "\n" not in msg and "Fix:" in msg, msg
    return msg


def test_refused_where_no_common_view_exists(packs):
    # no camera in common: bench2drive's front taken as another name
    b2d_back = {"entries": [{"source": packs["tcp"], "weight": 1},
                            {"source": packs["bench2drive"], "weight": 1,
                             "cameras": {"back": "front"}}]}
    with pytest.raises(MixError) as exc:
        CARLAWebData(mix={"entries": [{"source": packs["tcp"], "weight": 1},
                                      {"source": packs["garage"], "weight": 1}]},
                     batch_size=2, image_size=S, cameras=["rear"])
    assert "cameras ['rear'] are not in" in _one_line(exc)
    with pytest.raises(MixError) as exc:
        CARLAWebData(mix=b2d_back, batch_size=2, image_size=S)
    msg = _one_line(exc)
    assert "no camera in common" in msg and packs["tcp"] in msg and "['front']" in msg
    for kw, says in [({"fields": ["lidar"]}, "field 'lidar'"),
                     ({"adapter": "tcp"}, "adapter='tcp'")]:
        with pytest.raises(ValueError) as exc:
            loader(packs, **kw)
        assert says in _one_line(exc)
    with pytest.raises(MixError) as exc:
        CARLAWebData(mix=spec(packs, view={"waypoint_hz": 3}), batch_size=2, image_size=S)
    assert "cannot all be resampled to 3 Hz" in _one_line(exc)


def test_the_view_is_named_and_sizes_must_agree(packs):
    data = CARLAWebData(mix=spec(packs, view={"pred_len": 2}), batch_size=2, image_size=S,
                        mode="eval")
    assert data.pred_len == 2 and next(iter(data)).waypoints.shape[1:] == (2, 2)
    # the common frame is the table's right-handed (forward, left) one
    assert dict(data.spec.frames) == {"target_point": "b2d", "waypoints": "b2d"}
    with pytest.raises(MixError) as exc:   # 48x64 and 180x320 cameras: one size is asked
        CARLAWebData(mix=spec(packs), batch_size=2)
    assert "image_size=(H, W)" in _one_line(exc)


def test_a_mix_of_one_layout_is_served_as_before(zoo):
    a, b = str(zoo(**ZOO["tcp"])), str(zoo(**ZOO["tcp_b"]))
    data = CARLAWebData(mix={"entries": [{"source": a, "weight": 1}, {"source": b, "weight": 1}]},
                        batch_size=2, image_size=S)
    assert data._view is None and dict(data.spec.frames)["waypoints"] == "tcp"


def test_bench2drive_rate_is_read_from_the_manifest(packs):
    """The rates the test assumes are the packs' own records."""
    from carla_wds.manifest import read_manifest
    for name, path in packs.items():
        spec_doc = read_manifest(path).doc["spec"]
        assert spec_doc.get("waypoint_rate_hz", spec_doc["rate_hz"]) == RATE[name]
    assert Path(packs["tcp"]).exists()


def _fn(sample: dict, rng) -> dict:
    """A caller's transform over the view's samples (adapter=fn)."""
    return {"wp": sample["waypoints"], "tp": sample["target_point"]}   # the loader adds key


def test_a_function_and_stratified_batches_compose_with_the_view(packs):
    plain = {k: (b.waypoints[i], b.target_point[i]) for b in loader(packs, mode="eval")
             for i, k in enumerate(b.keys) if b.valid[i]}
    for b in loader(packs, mode="eval", adapter=_fn):
        for i, k in enumerate(b["key"]):
            if k in plain:
                assert torch.equal(b["wp"][i], plain[k][0]) and torch.equal(b["tp"][i],
                                                                           plain[k][1])
    strat = CARLAWebData(mix=spec(packs, stratify=True, epoch_size=24), image_size=S, seed=4,
                         batch_size=4, cameras=["front"])
    batches = list(strat)
    assert len(batches) == len(strat) and strat.waypoint_hz == 2
    quotas = strat._mixer.quotas(0, 4)   # each batch holds each entry's share
    sources = [set(own) for own in (alone(packs[n]) for n in ("tcp", "garage", "bench2drive"))]
    for b in batches:
        got = [sum(k in s for k in b.keys) for s in sources]
        assert got == quotas


def test_resumed_in_another_split_serves_the_rest_of_the_draw(packs):
    """States of 2 ranks x 2 workers after 2 batches, resumed on 1 rank x 1 worker: equal
    batches per rank and, with what was served, no sample more often than the epoch drew it
    (keys are unique across these packs, so the draw is counted by key)."""
    served, state = Counter(), None
    for rank in range(2):
        data = loader(packs, rank=rank, world_size=2, num_workers=2)
        data.set_epoch(1)
        it = iter(data)
        served.update(k for b in [next(it), next(it)] for k, ok in zip(b.keys, b.valid) if ok)
        it.close()
        state = state or data.state_dict()
    again = loader(packs, num_workers=1)
    again.set_epoch(1)
    again.load_state_dict(state)
    batches = list(again)
    assert len(batches) == len(again) > 0
    rest = Counter(k for b in batches for k, ok in zip(b.keys, b.valid) if ok)
    keys = [k for name in ("tcp", "garage", "bench2drive") for k in all_keys(Path(packs[name]))]
    plan = Counter(keys[int(p)] for p in again._mixer.epoch_samples(4, 1, 3))
    assert not (served + rest) - plan and sum(rest.values()) >= len(batches) * 3 - 3


def _pack_of(packs) -> dict[str, str]:
    return {k: name for name in packs for k in all_keys(Path(packs[name]))}


def test_history_over_packs_of_other_rates_spans_one_time_in_each(packs):
    """history x a mix of 2 and 4 Hz packs and a 10 Hz-keyed one with history_stride='0.5s':
    each pack steps by its own samples (tcp 1, garage 2, bench2drive 5), so every window's
    steps are 0.5 s apart in every pack; eval serves each sample once, over 2 ranks x 2
    workers, each as its window's own frame."""
    pack_of, seen = _pack_of(packs), Counter()
    for rank in range(2):
        data = CARLAWebData(mix=spec(packs), image_size=S, cameras=["front"], batch_size=3,
                            mode="eval", rank=rank, world_size=2, num_workers=2,
                            history=2, history_stride="0.5s")
        for b in data:
            assert b.frame_valid.shape == (3, 3)
            for i, frames in enumerate(b.frame_keys):
                if not b.valid[i]:
                    continue
                seen[b.keys[i]] += 1
                name = pack_of[b.keys[i]]
                gap = {"tcp": 1, "garage": 2, "bench2drive": 5}[name]
                numbers = [int(k.rsplit("_", 1)[-1]) for k, ok in
                           zip(frames, b.frame_valid[i]) if ok]
                assert all(pack_of[k] == name for k in frames if k)
                assert numbers and numbers[-1] == int(b.keys[i].rsplit("_", 1)[-1])
                assert all(y - x == gap for x, y in zip(numbers, numbers[1:])), (name, frames)
    assert set(seen) == set(pack_of) and set(seen.values()) == {1}


def test_history_over_packs_of_other_rates_resumes_identically(packs):
    make = lambda: CARLAWebData(mix=spec(packs), image_size=S, cameras=["front"],  # noqa: E731
                                batch_size=3, seed=4, num_workers=2, history=1,
                                history_stride="0.5s")
    whole, head, rest = resumed_epoch(make, head=2)
    assert [b.frame_keys for b in head + rest] == [b.frame_keys for b in whole]
    for a, b in zip(head + rest, whole):
        assert torch.equal(a.images, b.images)


def test_a_stride_in_samples_over_packs_of_other_rates_is_refused(packs):
    with pytest.raises(ValueError) as exc:
        CARLAWebData(mix=spec(packs), image_size=S, cameras=["front"], batch_size=3,
                     history=2, history_stride=1)
    msg = _one_line(exc)
    assert "history_stride=1" in msg and "'0.5s'" in msg
    # 0.25 s is no whole number of tcp's 0.5 s samples: refused, naming the pack
    with pytest.raises(ValueError, match=r"0.25s.*tcp|choose a whole multiple of 0.5 s"):
        CARLAWebData(mix=spec(packs), image_size=S, cameras=["front"], batch_size=3,
                     history=2, history_stride="0.25s")
