"""--future-boxes F (issue 42): UniAD's future box sets, the boxes of the F infos after frame t
each in its own frame, with the transform into frame t's.

Their rule (Thinklab-SJTU/Bench2DriveZoo@uniad/vad 10a2e5d B2D_e2e_dataset.py l.255-277),
written out here again: the future frames are the infos index .. index + occ_n_future (6),
consecutive infos (10 Hz frames less those where prepare_B2D keeps no box, prepare_B2D.py
l.336), -1 (here: not valid) past the clip's last info; each one's boxes in its own frame.
Two checks of every sample: (a) a future frame's boxes are that frame's own `boxes` member in
a pack made without the option, and the transform is the two frames' `ego2world` members';
(b) the same values derived here from the raw anno files, without carla-wds's code: the
kept boxes (distance <= 75 m, |dz| <= 10 m; --box-visibility off), their ids, classes,
extents, centres by world2ego, and in frame t by frame t's world2ego and their CARLA yaws.
"""
from __future__ import annotations

import gzip
import io
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from carla_wds.load import CARLAWebData
from carla_wds.pack import PackOptions
from carla_wds.pack.datasets.bench2drive.vocab import B2D_BOX_COLUMNS
from carla_wds.pack.errors import PackError
from tests.conftest import read_pack, run_pack
from tests.helpers import shared_raw
from tests.pack.datasets.bench2drive.test_future_labels import clip_without_boxes

FRAMES, EPISODES, F = 30, 3, 6
KW = dict(layout="bench2drive", stride=1, sensors=("boxes", "expert"), box_visibility="off",
          future_labels="masked")
COL = {name: i for i, name in enumerate(B2D_BOX_COLUMNS)}
CLASSES = {"ego_vehicle": 4, "vehicle": 0, "walker": 1, "traffic_light": 2, "traffic_sign": 5}


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> Path:
    # shared_raw's clips of test_future_labels / test_map_vectors / test_hdmap
    return shared_raw(tmp_path_factory, "bench2drive", episodes=EPISODES, frames=FRAMES,
                      seed=5, image_size=(54, 96)) / "v1"


@pytest.fixture(scope="module")
def packs(raw, tmp_path_factory) -> dict[str, tuple[dict, dict, Path]]:
    """name -> (manifest, key -> member -> bytes, folder)."""
    root = tmp_path_factory.mktemp("future_boxes")
    out = {}
    for name, extra in (("plain", {}), ("boxes", {"future_boxes": F})):
        manifest = run_pack(raw, root / name, **KW, **extra)
        out[name] = (manifest, read_pack(root / name), root / name)
    return out


def _npy(data: bytes) -> np.ndarray:
    return np.load(io.BytesIO(data), allow_pickle=False)


def anno(raw: Path, clip: str, t: int) -> dict:
    return json.loads(gzip.decompress((raw / clip / "anno" / f"{t:05d}.json.gz").read_bytes()))


def test_each_future_frame_is_that_frames_own_boxes_member(packs):
    """(a) For all 90 samples: offset k's rows are frame t + k's `boxes` member exactly,
    valid while t + k is in the clip; future_boxes_to_t[k] is inv(E_t) @ E_t+k of the
    frames' `ego2world` members; every other member is the plain pack's, byte for byte."""
    (plain_manifest, plain, _), (manifest, got, _) = packs["plain"], packs["boxes"]
    assert sorted(got) == sorted(plain) and len(got) == EPISODES * FRAMES
    rows = 0
    for key, sample in got.items():
        clip, _, t = key.rpartition("__")
        t = int(t)
        record, table = _npy(sample["measurements.npy"]), _npy(sample["future_boxes.npy"])
        want = [t + k if t + k < FRAMES else -1 for k in range(F + 1)]
        np.testing.assert_array_equal(record["future_boxes_frames"], want)
        np.testing.assert_array_equal(record["future_boxes_valid"], np.array(want) >= 0)
        assert table.shape[1] == len(B2D_BOX_COLUMNS) + 1 and table.dtype == np.float32
        assert set(table[:, -1].astype(int)) == {k for k in range(1, F + 1) if want[k] >= 0}
        pose_t = _npy(plain[key]["ego2world.npy"])
        for k, f in enumerate(want):
            if f < 0:
                assert not record["future_boxes_to_t"][k].any()
                continue
            later = plain[f"{clip}__{f:04d}"]
            if k:
                np.testing.assert_array_equal(table[table[:, -1] == k, :-1],
                                              _npy(later["boxes.npy"]))
            np.testing.assert_allclose(record["future_boxes_to_t"][k], np.linalg.inv(pose_t)
                                       @ _npy(later["ego2world.npy"]), atol=2e-5)
        rows += len(table)
        others = ("future_boxes.npy", "measurements.npy")
        assert {m: v for m, v in sample.items() if m not in others} == \
            {m: v for m, v in plain[key].items() if m not in others}
        before = _npy(plain[key]["measurements.npy"])
        assert all(np.array_equal(record[n], before[n]) for n in before.dtype.names)
    assert rows > 0
    assert "future_boxes" not in plain_manifest["pack_args"]
    assert "future_boxes" not in json.dumps(plain_manifest["spec"])
    assert manifest["pack_args"]["future_boxes"] == F


def _kept(boxes: list[dict]) -> list[dict]:
    """The ego, then the boxes prepare_B2D keeps (l.263-264; no visibility test here)."""
    ego = boxes[0]
    return [ego] + [b for b in boxes[1:] if b["distance"] <= 75
                    and abs(b["location"][2] - ego["location"][2]) <= 10]


def _wrap(a: np.ndarray) -> np.ndarray:
    return (a + math.pi) % (2 * math.pi) - math.pi


def test_future_boxes_served_equal_the_raw_annos_in_frame_t(packs, raw):
    """(b) Through CARLAWebData: per sample and offset, the rows' ids, classes and extents
    are the kept boxes of anno t + k, their centres world2ego_t+k @ centre, and moved by
    future_boxes_to_t[k] they are world2ego_t @ centre with yaw (CARLA yaw - ego yaw at t)."""
    data = CARLAWebData(str(packs["boxes"][2]), batch_size=16, mode="eval", image_size=(27, 48),
                        cameras=["front"], fields=["measurements", "future_boxes"])
    seen = boxes = 0
    for batch in data:
        for i, key in enumerate(batch.keys):
            if not batch.valid[i]:
                continue
            clip, _, t = key.rpartition("__")
            t = int(t)
            table = batch.fields["future_boxes"][i, :int(batch.fields["future_boxes_len"][i])]
            table = table.double().numpy()
            to_t = batch.measurements["future_boxes_to_t"][i].double().numpy()
            now = anno(raw, clip, t)
            world2ego_t = np.array(now["bounding_boxes"][0]["world2ego"])
            ego_yaw = math.radians(now["bounding_boxes"][0]["rotation"][2])
            for k in range(1, F + 1):
                rows = table[table[:, -1] == k]
                if t + k >= FRAMES:
                    assert len(rows) == 0 and not batch.measurements["future_boxes_valid"][i, k]
                    continue
                later = anno(raw, clip, t + k)
                kept = _kept(later["bounding_boxes"])
                world2ego = np.array(later["bounding_boxes"][0]["world2ego"])
                centres = np.array([b["center"] + [1.0] for b in kept])
                assert [int(b["id"]) for b in kept] == rows[:, COL["id"]].astype(int).tolist()
                assert [CLASSES[b["class"]] for b in kept] == rows[:, COL["class"]].tolist()
                np.testing.assert_allclose(rows[:, COL["extent_x"]:COL["extent_z"] + 1],
                                           [b["extent"] for b in kept], atol=1e-6)
                np.testing.assert_allclose(rows[:, COL["x"]:COL["z"] + 1],
                                           (centres @ world2ego.T)[:, :3], atol=2e-4)
                moved = np.column_stack([rows[:, COL["x"]:COL["z"] + 1], np.ones(len(rows))])
                np.testing.assert_allclose(moved @ to_t[k].T, centres @ world2ego_t.T,
                                           atol=2e-4)
                yaw = rows[1:, COL["yaw"]] + math.atan2(to_t[k][1, 0], to_t[k][0, 0])
                want = [math.radians(b["rotation"][2]) - ego_yaw for b in kept[1:]]
                assert np.abs(_wrap(yaw - np.array(want))).max(initial=0) < 1e-4
                boxes += len(rows)
            seen += 1
    assert seen == EPISODES * FRAMES and boxes > 0


def test_frames_without_boxes_are_stepped_over(raw, tmp_path):
    """Their future frames count infos: with frames 7 and 12 emptied to the ego alone (no
    info, prepare_B2D.py l.336), frame 5's future frames are 6, 8, 9, 10, 11, 13."""
    clip = clip_without_boxes(raw, tmp_path / "v1", (7, 12))
    run_pack(tmp_path / "v1", tmp_path / "p", **KW, future_boxes=F)
    infos = [t for t in range(FRAMES) if t not in (7, 12)]
    got = read_pack(tmp_path / "p")
    assert len(got) == len(infos)
    for key, sample in got.items():
        t = int(key.rpartition("__")[2])
        at = infos.index(t)
        want = [infos[at + k] if at + k < len(infos) else -1 for k in range(F + 1)]
        record = _npy(sample["measurements.npy"])
        np.testing.assert_array_equal(record["future_boxes_frames"], want)
        table = _npy(sample["future_boxes.npy"])
        for k, f in enumerate(want[1:], 1):
            n = len(_kept(anno(tmp_path / "v1", clip, f)["bounding_boxes"])) if f >= 0 else 0
            assert (table[:, -1] == k).sum() == n
    assert _npy(got[f"{clip}__0005"]["measurements.npy"])["future_boxes_frames"].tolist() == \
        [5, 6, 8, 9, 10, 11, 13]


@pytest.mark.parametrize("given, expected", [
    ({"future_boxes": -1}, "--future-boxes -1: expected a whole number 0..50. Fix: "),
    ({"future_boxes": 6, "sensors": ("expert",)},
     "--future-boxes 6: expected boxes in --sensors. Fix: ")])
def test_bad_future_boxes_are_refused_in_one_line(given, expected):
    with pytest.raises(PackError) as info:
        PackOptions(layout="bench2drive", dataset_options=given).validate()
    assert str(info.value).startswith(expected) and "\n" not in str(info.value)


def test_right_handed_boxes_get_the_mirrored_transform(raw, tmp_path):
    """--handedness right: the rows are in prepare_B2D's right-handed ego frame (y and yaw
    negated), and future_boxes_to_t moves them to frame t's, i.e. the mirrored world2ego_t
    @ centre of the raw anno (y negated)."""
    clip = sorted(p.name for p in raw.iterdir())[1]
    shutil.copytree(raw / clip, tmp_path / "v1" / clip)
    run_pack(tmp_path / "v1", tmp_path / "p", **KW, future_boxes=F, handedness="right")
    checked = 0
    for key, sample in read_pack(tmp_path / "p").items():
        t = int(key.rpartition("__")[2])
        record, table = _npy(sample["measurements.npy"]), _npy(sample["future_boxes.npy"])
        world2ego_t = np.array(anno(raw, clip, t)["bounding_boxes"][0]["world2ego"])
        for k in range(1, F + 1):
            if t + k >= FRAMES:
                continue
            kept = _kept(anno(raw, clip, t + k)["bounding_boxes"])
            rows = table[table[:, -1] == k]
            moved = np.column_stack([rows[:, COL["x"]:COL["z"] + 1], np.ones(len(rows))])
            want = np.array([b["center"] + [1.0] for b in kept]) @ world2ego_t.T
            np.testing.assert_allclose(moved @ record["future_boxes_to_t"][k].T,
                                       want * [1, -1, 1, 1], atol=2e-4)
            checked += len(rows)
    assert checked > 0
