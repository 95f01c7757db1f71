"""History windows (issue 27) on real shards: CARLAWebData(history=K, history_stride=S).

The expected windows are written here from the definition (the frames f - j*S*step of the
same route, oldest first, cut at the first one missing), not from load/stream/history.py.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from carla_wds import CARLAWebData
from carla_wds.load.decode.augment import augment_cameras, ramp
from carla_wds.load.stream.history import to_current

from ..helpers import SIZE, all_keys, make_pack


@pytest.fixture(scope="module")
def shards(zoo) -> Path:
    # 7 samples a shard: most routes span several shards, so windows reach across them
    return zoo(episodes=3, frames=30, max_samples=7)   # shared, read-only (conftest.zoo)


@pytest.fixture(scope="module")
def frames(shards) -> dict[str, dict]:
    """Every frame decoded on its own (history=0, eval): key -> images and speed."""
    out = {}
    for b in CARLAWebData(str(shards), batch_size=4, mode="eval", image_size=SIZE):
        for i, key in enumerate(b.keys):
            if b.valid[i]:
                out[key] = {"images": b.images[i].clone(), "speed": float(b.speed[i])}
    return out


def route_frames(keys: list[str]) -> dict[str, set[int]]:
    routes: dict[str, set[int]] = {}
    for key in keys:
        route, frame = key.rsplit("__", 1)
        routes.setdefault(route, set()).add(int(frame))
    return routes


def expected_window(key: str, routes: dict[str, set[int]], history: int, every: int
                    ) -> list[str]:
    route, frame = key.rsplit("__", 1)
    out, cut = [], False
    for j in range(1, history + 1):
        f = int(frame) - j * every
        cut = cut or f not in routes[route]
        out.append("" if cut else f"{route}__{f:04d}")
    return out[::-1] + [key]


def windows_of(shards, **kw) -> list:
    return list(CARLAWebData(str(shards), image_size=SIZE, **kw))


@pytest.mark.parametrize("mode,workers,history,stride",
                         [("eval", 0, 3, 1), ("eval", 2, 2, 3), ("train", 0, 3, 2),
                          ("train", 2, 4, 1)])
def test_windows_hold_the_routes_earlier_frames(shards, frames, mode, workers, history, stride):
    routes = route_frames(all_keys(shards))
    batches = windows_of(shards, batch_size=3, mode=mode, num_workers=workers, seed=3,
                         history=history, history_stride=stride)
    n = 0
    for b in batches:
        assert b.images.shape[:3] == (3, history + 1, 1)
        assert b.speed.shape == (3, history + 1) and b.frame_valid.shape == (3, history + 1)
        for i, key in enumerate(b.keys):
            if not b.valid[i]:
                continue
            n += 1
            want = expected_window(key, routes, history, stride)
            assert b.frame_keys[i] == want
            assert b.frame_valid[i].tolist() == [k != "" for k in want]
            for t, k in enumerate(want):
                if k:   # the very frame, decoded as it is on its own
                    assert torch.equal(b.images[i, t], frames[k]["images"])
                    assert float(b.speed[i, t]) == frames[k]["speed"]
                else:   # padding: zeros
                    assert not b.images[i, t].any() and float(b.speed[i, t]) == 0
    assert n == (len(frames) if mode == "eval" else len(batches) * 3)


def test_eval_serves_every_sample_once_and_len_is_unchanged(shards, frames):
    for world in (1, 2):
        served = []
        for rank in range(world):
            plain = CARLAWebData(str(shards), batch_size=4, mode="eval", rank=rank,
                                 world_size=world, image_size=SIZE)
            data = CARLAWebData(str(shards), batch_size=4, mode="eval", rank=rank,
                                world_size=world, image_size=SIZE, history=2)
            batches = list(data)
            assert len(batches) == len(data) == len(plain)
            served += [k for b in batches for k, v in zip(b.keys, b.valid) if v]
        assert sorted(served) == sorted(frames)


def test_train_ranks_get_equal_batches_of_distinct_samples(shards):
    per_rank = []
    for rank in range(2):
        data = CARLAWebData(str(shards), batch_size=4, num_workers=2, rank=rank, world_size=2,
                            image_size=SIZE, history=2, seed=9)
        per_rank.append([k for b in data for k in b.keys])
        assert len(per_rank[-1]) == len(data) * 4
    keys = per_rank[0] + per_rank[1]
    assert len(keys) == len(set(keys))


def test_resume_mid_epoch_gives_identical_windows(shards):
    kw = dict(batch_size=3, num_workers=2, image_size=SIZE, history=3, history_stride=2,
              seed=4, augment=True)
    whole = CARLAWebData(str(shards), **kw)
    whole.set_epoch(1)
    expected = list(whole)
    first = CARLAWebData(str(shards), **kw)
    first.set_epoch(1)
    it = iter(first)
    for _ in range(4):
        next(it)
    state = first.state_dict()
    it.close()
    resumed = CARLAWebData(str(shards), **kw)
    resumed.load_state_dict(state)
    resumed.set_epoch(1)
    rest = list(resumed)
    assert len(rest) == len(expected) - 4
    for a, b in zip(rest, expected[4:]):
        assert a.frame_keys == b.frame_keys and torch.equal(a.images, b.images)
        assert torch.equal(a.frame_valid, b.frame_valid)
    other = CARLAWebData(str(shards), **{**kw, "history": 2})
    with pytest.raises(ValueError, match="history was 3"):
        other.load_state_dict(state)


def test_augmentation_is_drawn_once_per_window(shards, frames):
    """Every frame of a window gets the draw of the window's own key and position."""
    seed, batch = 2, 3
    data = CARLAWebData(str(shards), batch_size=batch, image_size=SIZE, history=2, seed=seed,
                        augment=True, shuffle_buffer=1)
    iteration_of = ramp(0, batch, 1, 0, 0)
    checked = 0
    for n, b in enumerate(data):
        for i, key in enumerate(b.keys):
            pos = n * batch + i
            for t, k in enumerate(b.frame_keys[i]):
                if not k:
                    continue
                plain = frames[k]["images"].permute(0, 2, 3, 1).numpy()
                want = augment_cameras(list(plain), seed=seed, epoch=0, key=key,
                                       iteration=iteration_of(pos), per_camera=True)
                got = b.images[i, t].permute(0, 2, 3, 1).numpy()
                assert np.array_equal(got, np.stack(want)), (key, k)
                checked += 1
    assert checked > len(data) * batch   # past frames were checked too


def test_a_gap_inside_a_route_cuts_the_window(tmp_path):
    raw = tmp_path / "raw"
    shards = make_pack(tmp_path, episodes=1, frames=30, max_samples=100, on_error="skip")
    # a frame whose image is unreadable is skipped: the route then has a gap
    manifest = json.loads((shards / "manifest.json").read_text())
    assert manifest["sequence"]["gaps"] == 0
    shutil.rmtree(shards)
    image = sorted(raw.glob("*/*/rgb/0010.png"))[0]
    image.write_bytes(image.read_bytes()[:50])
    from carla_wds.pack.packer import PackOptions, pack
    pack(raw, shards, PackOptions.of(layout="tcp", max_samples=100, progress=False,
                                     on_error="skip", check_images=True))
    manifest = json.loads((shards / "manifest.json").read_text())
    assert manifest["sequence"]["gaps"] == 1 and manifest["counts"]["route_gaps"] == 1
    windows = {b.keys[i]: (b.frame_keys[i], b.frame_valid[i].tolist())
               for b in windows_of(shards, batch_size=2, mode="eval", history=3)
               for i in range(len(b.keys)) if b.valid[i]}
    route = next(iter(windows)).rsplit("__", 1)[0]
    keys, valid = windows[f"{route}__0012"]
    # frame 11 is there; frame 10 is missing, so 10 and the older 9 are padding
    assert keys == ["", "", f"{route}__0011", f"{route}__0012"]
    assert valid == [False, False, True, True]
    assert windows[f"{route}__0011"][1] == [False, False, False, True]


def test_a_history_longer_than_the_route_is_all_flagged(shards, frames):
    batches = windows_of(shards, batch_size=4, mode="eval", history=40)
    served = [(k, fv) for b in batches for k, v, fv in zip(b.keys, b.valid, b.frame_valid) if v]
    assert sorted(k for k, _ in served) == sorted(frames)
    for key, fv in served:
        frame = int(key.rsplit("__", 1)[1])
        assert int(fv.sum()) == frame + 1 and fv[-1]   # synth routes start at frame 0


def test_route_shards_let_the_epoch_shuffle_shards(tmp_path, caplog):
    linked = make_pack(tmp_path / "a", episodes=4, frames=24, max_samples=5)
    with caplog.at_level("WARNING"):
        CARLAWebData(str(linked), batch_size=2, image_size=SIZE, history=1)
    assert "--route-shards" in caplog.text
    split = make_pack(tmp_path / "b", episodes=4, frames=24, max_samples=40, route_shards=True)
    manifest = json.loads((split / "manifest.json").read_text())
    assert manifest["sequence"]["continuing_shards"] == 0 and len(manifest["shards"]) == 4
    orders = []
    for epoch in range(3):
        data = CARLAWebData(str(split), batch_size=2, image_size=SIZE, history=1,
                            shuffle_buffer=1, seed=1)
        data.set_epoch(epoch)
        routes = [k.rsplit("__", 1)[0] for b in data for k in b.keys]
        orders.append(tuple(dict.fromkeys(routes)))
    assert len(set(orders)) > 1   # the routes come in another order from epoch to epoch


def test_refusals_name_the_fix(shards, tmp_path):
    with pytest.raises(ValueError, match="0 <= history <= 256"):
        CARLAWebData(str(shards), batch_size=2, history=-1)
    with pytest.raises(ValueError, match="1 <= history_stride <= 1000"):
        CARLAWebData(str(shards), batch_size=2, history=1, history_stride=0)
    old = tmp_path / "old"
    shutil.copytree(shards, old)
    doc = json.loads((old / "manifest.json").read_text())
    for s in doc["shards"]:
        del s["first_key"], s["last_key"], s["steps"]
    (old / "manifest.json").write_text(json.dumps(doc))
    CARLAWebData(str(old), batch_size=2)   # without history an older pack loads as before
    with pytest.raises(ValueError, match="re-pack"):
        CARLAWebData(str(old), batch_size=2, history=2)


def test_to_current_is_the_inverse_of_the_current_pose_times_each_pose():
    rng = np.random.default_rng(0)
    poses = torch.zeros(2, 3, 4, 4, dtype=torch.float64)
    for b in range(2):
        for t in range(3):
            yaw = rng.uniform(-3, 3)
            c, s = np.cos(yaw), np.sin(yaw)
            poses[b, t] = torch.tensor([[c, -s, 0, rng.uniform(-50, 50)],
                                        [s, c, 0, rng.uniform(-50, 50)],
                                        [0, 0, 1, rng.uniform(0, 2)], [0, 0, 0, 1]])
    valid = torch.tensor([[True, True, True], [False, True, True]])
    poses[1, 0] = 0   # padding
    rel = to_current(poses, valid)
    want = torch.linalg.inv(poses[0, 2]) @ poses[0, 0]
    assert torch.allclose(rel[0, 0], want) and torch.allclose(rel[0, 2], torch.eye(4, dtype=rel.dtype))
    assert not rel[1, 0].any()
    # a point in frame 0's ego coordinates lands where the world says, seen from frame 2
    point = torch.tensor([1.0, 2.0, 0.5, 1.0], dtype=torch.float64)
    world = poses[0, 0] @ point
    assert torch.allclose(rel[0, 0] @ point, torch.linalg.inv(poses[0, 2]) @ world)


def test_history_stride_in_seconds_is_a_whole_number_of_samples(shards):
    # synth TCP routes: 2 Hz, every frame a sample
    data = CARLAWebData(str(shards), batch_size=2, image_size=SIZE, history=2,
                        history_stride="1s")
    assert data.history_stride == 2
    with pytest.raises(ValueError, match="0.75 sample"):
        CARLAWebData(str(shards), batch_size=2, history=2, history_stride="0.375s")
    with pytest.raises(ValueError, match="seconds such as"):
        CARLAWebData(str(shards), batch_size=2, history=2, history_stride="fast")


@pytest.mark.parametrize("history,stride,match", [
    (10 ** 6, 1, r"0 <= history <= 256"),            # issue 38: no bound before
    (True, 1, r"whole numbers"),                      # a bool is no count of frames
    (2, 10 ** 9, r"1 <= history_stride <= 1000"),
    (2, "nans", r"positive, finite number of seconds"),   # was float's own NaN error
    (2, "infs", r"positive, finite number of seconds"),   # was an OverflowError
    (2, "-1s", r"positive, finite number of seconds"),
    (2, "1e308s", r"at most 1000"),                   # finite, but past the bound
    (2, "5000s", r"at most 1000")])
def test_history_settings_out_of_bounds_are_refused_in_one_line(shards, history, stride, match):
    with pytest.raises(ValueError, match=match) as caught:
        CARLAWebData(str(shards), batch_size=2, history=history, history_stride=stride)
    assert "\n" not in str(caught.value) and "history" in str(caught.value)


def test_ego_poses_get_a_time_axis_and_the_transform_to_the_current_frame(shards):
    batches = windows_of(shards, batch_size=3, mode="eval", history=2,
                         fields=["ego2world"])
    poses = {}
    for b in CARLAWebData(str(shards), batch_size=3, mode="eval", image_size=SIZE,
                          fields=["ego2world"]):
        poses.update({k: b.fields["ego2world"][i] for i, k in enumerate(b.keys) if b.valid[i]})
    for b in batches:
        pose, rel = b.fields["ego2world"], b.fields["ego2current"]
        assert pose.shape == (3, 3, 4, 4) and rel.shape == (3, 3, 4, 4)
        for i in range(3):
            for t, k in enumerate(b.frame_keys[i]):
                if not k:
                    assert not rel[i, t].any()
                    continue
                assert torch.equal(pose[i, t], poses[k])
                now = poses[b.frame_keys[i][-1]]
                assert torch.allclose(rel[i, t], torch.linalg.inv(now) @ poses[k], atol=1e-9)


def test_sampling_with_replacement_reads_each_drawn_shards_context(shards):
    routes = route_frames(all_keys(shards))
    data = CARLAWebData(str(shards), batch_size=3, image_size=SIZE, history=3,
                        batches_per_epoch=6, num_workers=2, seed=5)
    batches = list(data)
    assert len(batches) == 6
    for b in batches:
        for i, key in enumerate(b.keys):
            assert b.frame_keys[i] == expected_window(key, routes, 3, 1)
