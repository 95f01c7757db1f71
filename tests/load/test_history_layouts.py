"""History windows on real Bench2Drive and garage packs (issue 38): `history_stride` in
seconds means seconds on both, and a window never spans a gap, even one that its stride hops
over.

The expected windows come from the synthetic writers' own clocks (Bench2Drive's 10 Hz source
frames, DT = 0.1 s, kept every 5th; garage's 4 Hz, DT = 0.25 s) and the frames the pack holds
(read with tarfile), not from load/stream/history.py: step j of the window of frame f is frame
f - j * delta, where delta = seconds / DT, and it is padding when any keyframe between it and
f (every `keyframe` frame numbers) is not in the pack.
"""
from __future__ import annotations

from pathlib import Path

import h5py  # noqa: F401 - first imported here: its import runs `uname -p` (platform), a
import pytest  # child process the suite's marker check would charge to the first test

from carla_wds import CARLAWebData
from carla_wds.pack.synth import synth_dataset
from carla_wds.pack.synth.bench2drive import DT as B2D_DT
from carla_wds.pack.synth.garage import GARAGE_DT

from ..conftest import run_pack
from ..helpers import all_keys, manifest_of

SIZE = (24, 32)


def _drop_frame(image: Path) -> None:
    """A frame whose image is unreadable is skipped at pack time: the route has a gap."""
    image.write_bytes(image.read_bytes()[:50])


@pytest.fixture(scope="module")
def b2d(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("hist_b2d")
    synth_dataset(root / "raw", "bench2drive", episodes=1, frames=100, seed=7,
                  image_size=(45, 80), progress=False)
    clip = sorted((root / "raw" / "v1").iterdir())[0]
    _drop_frame(clip / "camera" / "rgb_front" / "00040.jpg")   # keyframe 40 of 0, 5, ...
    run_pack(root / "raw" / "v1", root / "shards", layout="bench2drive", max_samples=6,
             sensors=("boxes",), on_error="skip", check_images=True)
    return root / "shards"


@pytest.fixture(scope="module")
def garage(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("hist_garage")
    synth_dataset(root / "raw", "garage", episodes=1, frames=60, seed=7, image_size=(48, 64),
                  progress=False)
    route = sorted((root / "raw").glob("*/*/*"))[0]
    _drop_frame(route / "rgb" / "0030.jpg")
    run_pack(root / "raw", root / "shards", layout="garage", max_samples=9, on_error="skip",
             check_images=True)
    return root / "shards"


PACKS = {"b2d": (B2D_DT, 5), "garage": (GARAGE_DT, 1)}   # (s a frame number, keyframe step)


def expected_window(key: str, keys: dict[tuple[str, int], str], history: int, delta: int,
                    keyframe: int) -> list[str]:
    route, frame = key.rsplit("__", 1)
    f = int(frame)
    out = []
    for j in range(1, history + 1):
        span = range(f - j * delta, f, keyframe)   # every keyframe from the step up to f
        whole = all((route, g) in keys for g in span)
        out.append(keys[(route, f - j * delta)] if whole else "")   # older steps: spans grow
    return out[::-1] + [key]


def pack_keys(shards: Path) -> dict[tuple[str, int], str]:
    out = {}
    for key in all_keys(shards):
        route, frame = key.rsplit("__", 1)
        out[(route, int(frame))] = key
    return out


def served_windows(shards: Path, **kw) -> dict[str, tuple[list[str], list[bool]]]:
    data = CARLAWebData(str(shards), batch_size=2, image_size=SIZE, **kw)
    return {b.keys[i]: (b.frame_keys[i], b.frame_valid[i].tolist())
            for b in data for i in range(len(b.keys)) if b.valid[i]}


@pytest.mark.parametrize("name", ["b2d", "garage"])
@pytest.mark.parametrize("seconds,history", [("1s", 2), ("2.5s", 1), ("0.5s", 3)])
def test_stride_in_seconds_is_seconds_apart_and_never_spans_the_gap(request, name, seconds,
                                                                     history):
    shards = request.getfixturevalue(name)
    dt, keyframe = PACKS[name]
    manifest = manifest_of(shards)
    assert manifest["sequence"]["gaps"] == 1 and manifest["sequence"]["frame_step"] == keyframe
    delta = round(float(seconds[:-1]) / dt)   # frame numbers that many seconds apart
    keys = pack_keys(shards)
    windows = served_windows(shards, mode="eval", history=history, history_stride=seconds)
    assert sorted(windows) == sorted(keys.values())
    whole = 0
    for key, (frame_keys, valid) in windows.items():
        want = expected_window(key, keys, history, delta, keyframe)
        assert frame_keys == want, key
        assert valid == [k != "" for k in want]
        if all(valid):
            frames = [int(k.rsplit("__", 1)[1]) for k in frame_keys]
            assert all(b - a == delta for a, b in zip(frames, frames[1:]))
            assert all(abs((b - a) * dt - float(seconds[:-1])) < 1e-9
                       for a, b in zip(frames, frames[1:]))
            whole += 1
    assert whole >= 2   # windows of real past frames were checked, not only padding


@pytest.mark.parametrize("name,history,stride,workers",
                         [("b2d", 1, 3, 0), ("b2d", 2, 2, 2), ("garage", 1, 4, 2),
                          ("garage", 3, 3, 0)])
def test_a_stride_that_hops_over_the_gap_is_cut_there(request, name, history, stride, workers):
    """Train mode too: the windows are assembled where the workers read, before the shuffle."""
    shards = request.getfixturevalue(name)
    _, keyframe = PACKS[name]
    keys = pack_keys(shards)
    windows = served_windows(shards, mode="train", num_workers=workers, seed=1,
                             history=history, history_stride=stride)
    hopped = 0
    for key, (frame_keys, valid) in windows.items():
        want = expected_window(key, keys, history, stride * keyframe, keyframe)
        assert frame_keys == want, key
        assert valid == [k != "" for k in want]
        # a window whose own steps all exist but whose span holds the missing frame
        route, f = key.rsplit("__", 1)[0], int(key.rsplit("__", 1)[1])
        steps_exist = all((route, f - j * stride * keyframe) in keys
                          for j in range(1, history + 1))
        if steps_exist and not all(valid):
            hopped += 1
    assert hopped >= 1   # the case the old code served whole


def test_seconds_that_are_no_whole_sample_step_are_refused_in_one_line(b2d, garage):
    assert CARLAWebData(str(b2d), batch_size=2, history=2, history_stride="1s").history_stride == 2
    assert CARLAWebData(str(b2d), batch_size=2, history=2,
                        history_stride="2.5s").history_stride == 5
    assert CARLAWebData(str(garage), batch_size=2, history=2,
                        history_stride="1s").history_stride == 4
    with pytest.raises(ValueError, match=r"multiple of 0\.5 s"):
        CARLAWebData(str(b2d), batch_size=2, history=2, history_stride="0.3s")
    with pytest.raises(ValueError, match=r"multiple of 0\.25 s"):
        CARLAWebData(str(garage), batch_size=2, history=2, history_stride="0.1s")
