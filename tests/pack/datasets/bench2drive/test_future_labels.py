"""--future-labels masked (issue 42): UniAD's and VAD's sample set, every 10 Hz frame of a clip
with the future labels past its end masked, and their ego future gt_sdc_fut_traj.

Their rules (Thinklab-SJTU/Bench2DriveZoo@uniad/vad 10a2e5d), written out here again:
- every anno frame is an info (prepare_B2D.py l.205; l.336 drops only frames without boxes);
- a future lookup stops at the clip's end and leaves 0 with mask 0 (B2D_e2e_dataset.py
  l.545-572 get_ego_future_xy, B2D_vad_dataset.py l.367-395 get_ego_trajs);
- gt_sdc_fut_traj follows the LiDAR origin: frame t + 5j's in frame t's LiDAR frame (x right,
  y forward), yaw -atan2(R10, R00) - pi wrapped, j = 1..12 (predict_frames).
The expected path below is derived another way than carla-wds's (futures.py composes their
world2lidar matrices): the ego box's world2ego and the LiDAR's mounting location, the
relative heading from the two frames' yaws.
"""
from __future__ import annotations

import gzip
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from carla_wds.load import CARLAWebData
from carla_wds.pack import PackOptions
from carla_wds.pack.datasets.bench2drive.futures import kept_boxes
from carla_wds.pack.datasets.bench2drive.vocab import B2D_BOX_COLUMNS
from carla_wds.pack.errors import PackError
from tests.conftest import read_pack, run_pack
from tests.helpers import shared_raw
from tests.pack.test_sample_set import packed_frames

FRAMES, EPISODES, STEP, PRED_LEN, SDC_STEPS = 30, 3, 5, 4, 12
# the TCP port's range at --stride 1 (the default sample set): t + 4*5 + 6 <= the last frame
PORT = [t for t in range(FRAMES) if t + PRED_LEN * STEP + 6 <= FRAMES - 1]
KW = dict(layout="bench2drive", stride=1, sensors=("boxes", "expert"), box_visibility="off")


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> Path:
    # shared_raw's clips of test_map_vectors / test_hdmap / test_clips_hostile
    return shared_raw(tmp_path_factory, "bench2drive", episodes=EPISODES, frames=FRAMES,
                      seed=5, image_size=(54, 96)) / "v1"


@pytest.fixture(scope="module")
def packs(raw, tmp_path_factory) -> dict[str, tuple[dict, Path]]:
    root = tmp_path_factory.mktemp("future_labels")
    return {name: (run_pack(raw, root / name, **KW, **extra), root / name)
            for name, extra in (("full", {}), ("masked", {"future_labels": "masked"}))}


def anno(raw: Path, clip: str, t: int) -> dict | None:
    path = raw / clip / "anno" / f"{t:05d}.json.gz"
    return json.loads(gzip.decompress(path.read_bytes())) if path.exists() else None


def test_masked_keeps_every_frame_and_the_default_keeps_the_ports(packs):
    """A clip of N = 30 frames gives 30 samples with --future-labels masked; without it, at
    --stride 1, the TCP port's range 0..3 (4 of 30), as before."""
    full, masked = (packs[k][0] for k in ("full", "masked"))
    got, before = packed_frames(packs["masked"][1]), packed_frames(packs["full"][1])
    assert len(got) == len(before) == EPISODES
    assert all(ts == list(range(FRAMES)) for ts in got.values())
    assert all(ts == PORT == [0, 1, 2, 3] for ts in before.values())
    assert masked["total_samples"] == EPISODES * FRAMES
    assert masked["counts"]["tail_frames"] == masked["counts"]["loader_tail_frames"] == 0
    assert masked["sample_rule"]["tail"] == 0 and "uniad/vad" in masked["sample_rule"]["loader"]
    assert masked["pack_args"]["future_labels"] == "masked"
    assert full["total_samples"] == EPISODES * len(PORT) == EPISODES * 4
    # a pack made without the option: no new pack_args key, member, record field or spec key
    assert "future_labels" not in full["pack_args"] and "future_labels" not in full["spec"]
    assert "gt_sdc_fut_traj" not in json.dumps(full["members"])
    assert "future_valid" not in json.dumps(full["spec"])


def test_future_labels_are_masked_past_the_clips_end(packs, raw):
    """future_valid[k] is whether frame t + 5(k + 1) is in the clip; waypoints there are the
    port's formula R(theta - pi/2) (p - o), 0 elsewhere, and so are the future expert values;
    frames the default pack also has are the same sample there."""
    full = read_pack(packs["full"][1])
    for key, sample in read_pack(packs["masked"][1]).items():
        clip, _, t = key.rpartition("__")
        t = int(t)
        record = np.load(_io(sample["measurements.npy"]), allow_pickle=False)
        want = np.array([t + STEP * k <= FRAMES - 1 for k in range(1, PRED_LEN + 1)])
        np.testing.assert_array_equal(record["future_valid"], want)
        wps = np.load(_io(sample["waypoints.npy"]))
        feats = np.load(_io(sample["future_expert_feature.npy"]))
        now = anno(raw, clip, t)
        a = np.nan_to_num(now["theta"], nan=0.0) - math.pi / 2   # the port's NaN compass: 0
        rot = np.array([[math.cos(a), math.sin(a)], [-math.sin(a), math.cos(a)]])
        for k, real in enumerate(want):
            if real:
                fut = anno(raw, clip, t + STEP * (k + 1))
                np.testing.assert_allclose(wps[k], rot @ (np.array([fut["x"], fut["y"]]) - [
                    now["x"], now["y"]]), atol=1e-4)
                assert feats[k].any()
            else:
                assert not wps[k].any() and not feats[k].any()
                assert record["future_expert_action"][k] == 0
        if t in PORT:
            for member in ("waypoints.npy", "future_expert_feature.npy", "tracks.npy",
                           "boxes.npy", "front.jpg"):
                assert sample[member] == full[key][member], (key, member)


def expected_sdc(raw: Path, clip: str, t: int, infos: list[int] | None = None
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(12, 3) x, y, yaw and (12,) valid of frame t's ego future as UniAD's, derived from the
    ego box's world2ego and the LiDAR's location: the LiDAR origin of the info 5j after t
    (`infos`: the clip's frames with a box; None: every frame) in frame t's LiDAR axes (left-handed x forward, y right -> theirs: x right, y forward), yaw the
    heading change (CARLA's yaw turns right; theirs -phi - pi with phi the right-handed one)."""
    def pose(a: dict) -> tuple[np.ndarray, float]:
        ego2world = np.linalg.inv(np.array(a["bounding_boxes"][0]["world2ego"]))
        lidar = ego2world @ np.append(a["sensors"]["LIDAR_TOP"]["location"], 1.0)
        return lidar[:3], math.atan2(ego2world[1, 0], ego2world[0, 0])

    now = anno(raw, clip, t)
    p0, yaw0 = pose(now)
    # the LiDAR is mounted unrotated: its axes are the ego's
    lidar_rot = np.linalg.inv(np.array(now["bounding_boxes"][0]["world2ego"]))[:3, :3]
    out, valid = np.zeros((SDC_STEPS, 3)), np.zeros(SDC_STEPS, bool)
    infos = list(range(FRAMES)) if infos is None else infos
    for j in range(1, SDC_STEPS + 1):
        if infos.index(t) + STEP * j >= len(infos):
            break
        a = anno(raw, clip, infos[infos.index(t) + STEP * j])
        p, yaw = pose(a)
        fwd, right, _ = lidar_rot.T @ (p - p0)
        phi = -(yaw - yaw0)
        theirs = (-phi - math.pi + math.pi) % (2 * math.pi) - math.pi
        out[j - 1], valid[j - 1] = (right, fwd, theirs), True
    return out, valid


def test_gt_sdc_fut_traj_is_their_lidar_origins_path(packs, raw):
    """Every sample's gt_sdc_fut_traj (served by the loader) equals the path derived in this
    test from the raw annos, with its mask; at the clip's end it is 0 and masked."""
    data = CARLAWebData(str(packs["masked"][1]), batch_size=16, mode="eval",
                        image_size=(27, 48), cameras=["front"],
                        fields=["gt_sdc_fut_traj", "tracks"])
    seen = 0
    for batch in data:
        got, ok = batch.fields["gt_sdc_fut_traj"], batch.fields["gt_sdc_fut_traj_valid"]
        assert got.shape[1:] == (1, SDC_STEPS, 3) and ok.shape[1:] == (1, SDC_STEPS)
        for i, key in enumerate(batch.keys):
            if not batch.valid[i]:
                continue
            clip, _, t = key.rpartition("__")
            want, valid = expected_sdc(raw, clip, int(t))
            np.testing.assert_array_equal(ok[i, 0].numpy(), valid)
            assert valid.sum() == min(SDC_STEPS, (FRAMES - 1 - int(t)) // STEP)
            yaw_err = (got[i, 0, :, 2].double().numpy() - want[:, 2] + math.pi) % (
                2 * math.pi) - math.pi
            np.testing.assert_allclose(got[i, 0, :, :2].double().numpy(), want[:, :2],
                                       atol=2e-5)
            assert np.abs(yaw_err[valid]).max(initial=0) < 1e-5 and not got[i, 0][~valid].any()
            seen += 1
    assert seen == EPISODES * FRAMES


def clip_without_boxes(raw: Path, dest: Path, frames: tuple[int, ...]) -> str:
    """A copy of the first clip of `raw` under `dest` with `frames` emptied to the ego box
    alone (no info of prepare_B2D's, l.336); returns the clip's name."""
    clip = sorted(p.name for p in raw.iterdir())[0]
    shutil.copytree(raw / clip, dest / clip)
    for t in frames:
        path = dest / clip / "anno" / f"{t:05d}.json.gz"
        doc = json.loads(gzip.decompress(path.read_bytes()))
        doc["bounding_boxes"] = doc["bounding_boxes"][:1]
        path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return clip


def test_frames_without_boxes_are_no_infos_and_their_steps_skip_them(raw, tmp_path):
    """prepare_B2D keeps no info for a frame without boxes (l.336), and their index arithmetic
    counts infos: with frames 7 and 12 emptied to the ego alone, those two are no samples
    (counted as frames their loader leaves out) and frame 0's path steps over them."""
    clip = clip_without_boxes(raw, tmp_path / "v1", (7, 12))
    manifest = run_pack(tmp_path / "v1", tmp_path / "p", **KW, future_labels="masked")
    infos = [t for t in range(FRAMES) if t not in (7, 12)]
    assert packed_frames(tmp_path / "p") == {clip: infos}
    assert manifest["counts"]["loader_tail_frames"] == 2
    for key, sample in read_pack(tmp_path / "p").items():
        t = int(key.rpartition("__")[2])
        got = np.load(_io(sample["gt_sdc_fut_traj.npy"]))[0]
        want, valid = expected_sdc(tmp_path / "v1", clip, t, infos)
        np.testing.assert_array_equal(got[:, 3] > 0, valid)
        np.testing.assert_allclose(got[:, :2], want[:, :2], atol=2e-5)
    assert valid.sum() == 0 and expected_sdc(tmp_path / "v1", clip, 0, infos)[1].sum() == 5


def test_tcp_port_pairing_leaves_the_last_frame_out(raw, tmp_path):
    """--expert-pairing tcp_port reads frame t's own expert file t, which the last frame lacks
    (data_collect.py names frame t's file t - 1): with the option that frame is a route tail,
    the other 29 samples, their future steps masked where the file t + 5k is past the end."""
    manifest = run_pack(raw, tmp_path / "p", layout="bench2drive", stride=1,
                        sensors=("expert",), expert_pairing="tcp_port", future_labels="masked")
    assert manifest["total_samples"] == EPISODES * (FRAMES - 1)
    assert manifest["counts"]["tail_frames"] == EPISODES
    for key, sample in read_pack(tmp_path / "p").items():
        t = int(key.rpartition("__")[2])
        record = np.load(_io(sample["measurements.npy"]), allow_pickle=False)
        want = [t + STEP * k <= FRAMES - 2 for k in range(1, PRED_LEN + 1)]
        np.testing.assert_array_equal(record["future_valid"], want)


def test_kept_boxes_counts_the_visible_ones_with_flag():
    """--box-visibility flag keeps every box, marked: an info needs one prepare_B2D would keep
    (FILTER_INVISINLE, l.301-326), i.e. one whose `visible` column is 1; the ego row is none."""
    table = np.zeros((3, len(B2D_BOX_COLUMNS)), np.float32)
    table[:, B2D_BOX_COLUMNS.index("visible")] = (1, 0, 0)   # the ego, two unseen boxes
    assert kept_boxes(table, "flag") == 0 and kept_boxes(table, "off") == 2
    assert kept_boxes(table[:1], "filter") == 0


def test_a_bad_future_labels_value_is_refused_in_one_line():
    with pytest.raises(PackError) as info:
        PackOptions(layout="bench2drive", dataset_options={"future_labels": "all"}).validate()
    assert str(info.value).startswith("--future-labels all: expected full or masked. Fix: ")
    assert "\n" not in str(info.value)


def _io(data: bytes):
    import io
    return io.BytesIO(data)
