"""The transfuser2022 layout end to end on synthetic raw files in TransFuser 2022's own format:
pack refuses the pickled LiDAR without --allow-pickle-input; with it, no shard member is a
pickle, every member equals what TransFuser 2022's own code reads from the raw files (decoders
transcribed in the tests, labels from tests/reference.py), and CARLAWebData(fields=[...]) gives
the README's batch shapes. The np.load(allow_pickle=True) calls read the test's own synthetic
files (trusted), as data.py does."""
from __future__ import annotations

import io
import json
from pathlib import Path

import cv2
import numpy as np
import pytest

from carla_wds.boxes import BOX_CLASSES, BOX_COLUMNS
from carla_wds.load import CARLAWebData
from carla_wds.datasets.transfuser import BevTf2022Codec
from carla_wds.modalities import DepthCarla24Codec, SemanticsCodec
from carla_wds.pack.synth import transfuser2022 as synth_tf2022
from carla_wds.pack.errors import PackError
from tests import reference
from tests.conftest import make_raw, read_pack, run_pack
from tests.pack.synth.test_synth_tf2022_roach import tf_decode_pil_to_npy, tf_get_depth_metres
from tests.modalities.test_lidar import tf2022_loader_points, tf2022_reference

FRAMES = 12
SIZE = (32, 96)               # (H, W); conftest.make_raw's IMAGE_SIZE would split into 21-px views
PRED_LEN = 4                  # the layout's 2 s horizon at 2 Hz
COL = {name: i for i, name in enumerate(BOX_COLUMNS)}
FIELDS = ["depth", "semantics", "bev", "lidar", "boxes", "boxes_raw", "measurements"]


@pytest.fixture(scope="module")
def raw_tf(tmp_path_factory) -> Path:
    raw = tmp_path_factory.mktemp("raw_tf2022")
    from carla_wds.pack.synth import synth_dataset
    synth_dataset(raw, "transfuser2022", episodes=2, frames=FRAMES, seed=1, image_size=SIZE,
                  progress=False)
    return raw


@pytest.fixture(scope="module")
def packed_tf(raw_tf, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("packed_tf2022") / "shards"
    # every frame with a full future (TF's own range is tests/pack/test_sample_set.py's), so
    # every frame's members are compared
    run_pack(raw_tf, out, layout="transfuser2022", allow_pickle_input=True, max_samples=5,
             all_frames=True)
    return out


@pytest.fixture(scope="module")
def samples(packed_tf) -> dict[str, dict[str, bytes]]:
    return read_pack(packed_tf)


def _where(raw: Path, key: str) -> tuple[Path, int]:
    episode, frame = key.rsplit("__", 1)
    return raw / episode.replace("__", "/"), int(frame)


def _json(path: Path):
    return json.loads(path.read_text())


def _npy(data: bytes) -> np.ndarray:
    return np.load(io.BytesIO(data), allow_pickle=False)


def test_pickled_lidar_is_refused_without_the_flag(raw_tf, tmp_path):
    out = tmp_path / "shards"
    with pytest.raises(PackError) as err:
        run_pack(raw_tf, out, layout="transfuser2022", all_frames=True)
    msg = str(err.value)
    assert "lidar/0000.npy" in msg and "--allow-pickle-input" in msg
    assert not out.exists()   # a rejected pack leaves nothing behind


def test_manifest_names_the_frames_and_counts(packed_tf, samples):
    m = json.loads((packed_tf / "manifest.json").read_text())
    assert m["spec"]["frames"] == {"waypoints": "transfuser2022", "target_point": "tcp",
                                   "boxes": "transfuser2022_boxes",
                                   "lidar": "transfuser2022_lidar"}
    extras = {e["name"]: e for e in m["spec"]["extras"]}
    assert extras["lidar"]["frame"] == "transfuser2022_lidar"
    assert extras["boxes"]["frame"] == "transfuser2022_boxes"
    assert m["pred_len"] == PRED_LEN and m["spec"]["rate_hz"] == 2.0
    assert m["total_samples"] == len(samples) == 2 * (FRAMES - PRED_LEN)


def test_no_shard_member_is_a_pickle(samples):
    for key, members in samples.items():
        assert {"lidar.npy", "boxes.npy", "measurements.npy", "bev.png"} <= set(members)
        for name, data in members.items():
            assert name.rsplit(".", 1)[-1] in ("png", "npy", "json"), name
            assert not data.startswith(b"\x80"), name   # a pickle's PROTO opcode
            if name.endswith(".npy"):
                assert not _npy(data).dtype.hasobject, name
            elif name.endswith(".json"):
                json.loads(data)


def test_lidar_is_the_pickled_points_as_float32(raw_tf, samples):
    for key, members in samples.items():
        route, t = _where(raw_tf, key)
        want = np.load(route / "lidar" / f"{t:04d}.npy", allow_pickle=True)[1]
        got = _npy(members["lidar.npy"])
        assert got.dtype == np.float32 and got.shape == want.shape and got.shape[1] == 4
        np.testing.assert_array_equal(got, want)


def test_waypoints_and_target_point_are_transfuser2022s(raw_tf, samples):
    for key, members in samples.items():
        route, t = _where(raw_tf, key)
        labels = [_json(p) for p in sorted((route / "label_raw").glob("*.json"))]
        meas = [_json(p) for p in sorted((route / "measurements").glob("*.json"))]
        # the loader reads ego_matrix from label_raw; the target point from measurements
        ref = reference.transfuser2022_waypoints(labels, t, pred_len=PRED_LEN, meas=meas)
        np.testing.assert_allclose(_npy(members["waypoints.npy"]), ref["ego_waypoint"],
                                   rtol=0, atol=1e-5)
        np.testing.assert_allclose(_npy(members["target_point.npy"]), ref["target_point"],
                                   rtol=0, atol=1e-4)


def test_topdown_decodes_to_the_synths_channels(raw_tf, samples):
    codec = BevTf2022Codec()
    for key, members in list(samples.items())[::3]:
        route, t = _where(raw_tf, key)
        path = route / "topdown" / f"encoded_{t:04d}.png"
        assert members["bev.png"] == path.read_bytes()   # passed through
        got = codec.decode(members["bev.png"])
        assert got.shape == (15, 500, 500) and got.dtype == np.uint8
        # data.py's decode of the same file: its planes 10-14 / 5-9 / 0-4 are the packed
        # bytes 0 / 1 / 2 (cv2 BGR, then its BGR2RGB)
        img = np.moveaxis(cv2.cvtColor(cv2.imread(str(path), cv2.IMREAD_UNCHANGED),
                                       cv2.COLOR_BGR2RGB), -1, 0)
        proj = tf_decode_pil_to_npy(img)
        np.testing.assert_array_equal(got, np.concatenate([proj[10:15], proj[5:10], proj[0:5]]))
        # and the synth's own encoder gives the file back from these channels, byte for byte
        again = cv2.imencode(".png", np.moveaxis(synth_tf2022.encode_npy_to_pil(got), 0, 2))[1]
        assert again.tobytes() == path.read_bytes()
        assert got[0, 250, 250] == 1   # the ego is on the road


def test_boxes_columns_equal_label_raw(raw_tf, samples):
    for key, members in samples.items():
        route, t = _where(raw_tf, key)
        entries = _json(route / "label_raw" / f"{t:04d}.json")
        boxes = _npy(members["boxes.npy"])
        assert boxes.dtype == np.float32 and boxes.shape == (len(entries), 14)
        assert json.loads(members["boxes_raw.json"]) == entries
        # label_raw holds cars only, with no affects_ego or light state (FILL)
        assert (boxes[:, [COL["affects_ego"], COL["light_state"]]] == -1).all()
        for i, e in enumerate(entries):
            h, length, w = e["extent"]   # TF2022: full sizes, height first
            want = {"class": BOX_CLASSES["ego" if i == 0 else "car"],
                    "x": e["position"][0], "y": e["position"][1], "z": e["position"][2],
                    "extent_x": length / 2, "extent_y": w / 2, "extent_z": h / 2,
                    "yaw": e["yaw"], "speed": e["speed"], "brake": e["brake"],
                    "num_points": e["num_points"], "id": e["id"]}
            for name, value in want.items():
                assert boxes[i, COL[name]] == np.float32(value), (key, i, name)


def test_depth_and_semantics_members(raw_tf, samples):
    want_depth = synth_tf2022.strip_depth(SIZE)
    step = 1000.0 / (2 ** 24 - 1)
    for key, members in list(samples.items())[::4]:
        route, t = _where(raw_tf, key)
        depth = DepthCarla24Codec().decode(members["depth.png"])
        assert depth.dtype == np.float32 and depth.shape == SIZE
        np.testing.assert_allclose(depth, want_depth, rtol=2e-7, atol=step)
        np.testing.assert_allclose(depth, tf_get_depth_metres(route / "depth" / f"{t:04d}.png"),
                                   rtol=2e-7, atol=step)
        sem = SemanticsCodec().decode(members["semantics.png"])
        raw_sem = cv2.imread(str(route / "semantics" / f"{t:04d}.png"), cv2.IMREAD_UNCHANGED)
        assert sem.dtype == np.uint8
        np.testing.assert_array_equal(sem, raw_sem)


def _batches(packed: Path, **kw) -> list:
    data = CARLAWebData(str(packed), batch_size=4, mode="eval", image_size=SIZE,
                        **kw)
    return list(data)


def test_loader_fields_shapes_and_values(raw_tf, packed_tf):
    batches = _batches(packed_tf, fields=FIELDS)
    assert batches
    for batch in batches:
        b = len(batch.keys)
        assert batch.images.shape == (b, 1, 3, *SIZE)
        assert batch.depth.shape == (b, 1, *SIZE) and str(batch.depth.dtype) == "torch.float32"
        assert batch.semantics.shape == (b, 1, *SIZE)
        assert str(batch.semantics.dtype) == "torch.uint8"
        assert batch.bev.shape == (b, 15, 500, 500) and str(batch.bev.dtype) == "torch.uint8"
        assert batch.lidar.ndim == 3 and batch.lidar.shape[2] == 4 and batch.lidar_len.shape == (b,)
        assert batch.boxes.shape[0] == b and batch.boxes.shape[2] == len(BOX_COLUMNS)
        assert batch.waypoints.shape == (b, PRED_LEN, 2)
        assert set(batch.measurements) >= {"steer", "throttle", "brake", "theta", "junction"}
        for i, key in enumerate(batch.keys):
            if not batch.valid[i]:
                continue
            route, t = _where(raw_tf, key)
            points = np.load(route / "lidar" / f"{t:04d}.npy", allow_pickle=True)[1]
            n = int(batch.lidar_len[i])
            assert n == len(points)
            np.testing.assert_array_equal(batch.lidar[i, :n].numpy(), points)
            assert not batch.lidar[i, n:].any()   # padding is zeros past the count
            entries = _json(route / "label_raw" / f"{t:04d}.json")
            assert int(batch.boxes_len[i]) == len(entries)
            meas = _json(route / "measurements" / f"{t:04d}.json")
            assert float(batch.measurements["steer"][i]) == pytest.approx(meas["steer"])
            assert bool(batch.measurements["brake"][i]) == meas["brake"]


def test_loader_lidar_histogram_is_transfuser2022s(raw_tf, packed_tf):
    """lidar_histogram="transfuser2022" in the workers equals data.py's histogram of the file."""
    seen = 0
    for batch in _batches(packed_tf, fields=["lidar"], lidar_histogram="transfuser2022"):
        assert batch.lidar.shape[1:] == (2, 256, 256)
        for i, key in enumerate(batch.keys):
            if not batch.valid[i]:
                continue
            route, t = _where(raw_tf, key)
            points = np.load(route / "lidar" / f"{t:04d}.npy", allow_pickle=True)[1]
            want = tf2022_reference(tf2022_loader_points(points))
            np.testing.assert_array_equal(batch.lidar[i].numpy(), want)
            assert want[1].sum() > 0   # the road ahead is in the below-split channel
            seen += 1
    assert seen == 2 * (FRAMES - PRED_LEN)


def test_make_raw_writes_this_layout(tmp_path):
    """conftest.make_raw (tests' shared generator) works for transfuser2022 too."""
    make_raw(tmp_path, "transfuser2022", episodes=1, frames=2)
    assert len(list(tmp_path.rglob("topdown/encoded_0001.png"))) == 1
