"""--layout bench2drive end to end on synthetic clips in the real structure: archives and folders
give the same shards; labels equal the Bench2DriveZoo TCP port's formula and calibration the
anno's (and prepare_B2D.py's right-handed conversion), both transcribed independently here;
expert assessments are paired at frame - 1; boxes, quirks, stride, split and sensors."""
from __future__ import annotations

import gzip
import io
import json
import math
from pathlib import Path

import numpy as np
import pytest

from carla_wds.codecs import codec_named
from carla_wds.pack.synth import synth_dataset
from carla_wds.pack.synth.bench2drive import clip_name
from tests.conftest import read_pack
# every keyframe with a full future: these tests follow frames to the end of 30-frame clips
from tests.conftest import run_pack_all_frames as run_pack

EPISODES, FRAMES, SIZE = 4, 30, (90, 160)   # SIZE: (height, width)
CAMS = ("front", "front_left", "front_right", "back", "back_left", "back_right")
SIDS = ("CAM_FRONT", "CAM_FRONT_LEFT", "CAM_FRONT_RIGHT", "CAM_BACK", "CAM_BACK_LEFT",
        "CAM_BACK_RIGHT")


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("b2d_raw")
    synth_dataset(out, "bench2drive", episodes=EPISODES, frames=FRAMES, seed=3, image_size=SIZE,
                  progress=False)
    return out


@pytest.fixture(scope="module")
def packed(raw, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("b2d_packed") / "shards"
    run_pack(raw / "archives", out, layout="bench2drive", max_samples=3,
             sensors=("lidar", "boxes", "expert", "radar", "depth", "semantic", "instance"))
    return out


def anno(raw: Path, clip: str, t: int) -> dict:
    return json.loads(gzip.decompress((raw / "v1" / clip / "anno" / f"{t:05d}.json.gz")
                                      .read_bytes()))


def tcp_port_labels(annos: list[dict]) -> dict:
    """Bench2DriveZoo@tcp/admlp TCP/data.py, transcribed: ego_theta = theta - pi/2 (NaN -> 0),
    R = [[cos, sin], [-sin, cos]], local = R.dot([x - ego_x, y - ego_y])."""
    now = annos[0]
    theta = 0.0 if math.isnan(now["theta"]) else now["theta"]
    ego_theta = theta - np.pi / 2
    r = np.array([[np.cos(ego_theta), np.sin(ego_theta)], [-np.sin(ego_theta), np.cos(ego_theta)]])
    wps = [r.dot([a["x"] - now["x"], a["y"] - now["y"]]) for a in annos[1:]]
    tp = r.dot([now["x_target"] - now["x"], now["y_target"] - now["y"]])
    command = now["next_command"]
    if command < 0:
        command = 4
    onehot = [0] * 6
    onehot[command - 1] = 1
    return {"waypoints": np.array(wps), "target_point": tp, "target_command": np.array(onehot)}


def npy(data: bytes) -> np.ndarray:
    return np.load(io.BytesIO(data), allow_pickle=False)


def test_archives_and_folders_give_the_same_shards(raw, packed, tmp_path):
    folders = tmp_path / "from_folders"
    run_pack(raw / "v1", folders, layout="bench2drive", max_samples=3,
             sensors=("lidar", "boxes", "expert", "radar", "depth", "semantic", "instance"))
    a, b = (json.loads((p / "manifest.json").read_text()) for p in (packed, folders))
    assert a == b
    for shard in a["shards"]:
        assert (packed / shard["name"]).read_bytes() == (folders / shard["name"]).read_bytes()


def test_every_keyframe_accounted_and_every_key_once(packed):
    m = json.loads((packed / "manifest.json").read_text())
    c = m["counts"]
    keyframes = EPISODES * len(range(0, FRAMES, 5))
    assert c["frames"] == keyframes and c["between"] == EPISODES * FRAMES - keyframes
    assert c["frames"] == c["samples"] + c["tail_frames"] + c["skipped"]
    samples = read_pack(packed)
    # a keyframe t is a sample when t + 4 x 5 is a frame of its clip
    clips = sorted({k.rsplit("__", 1)[0] for k in samples})
    want = {f"{c}__{t:04d}" for c in clips for t in range(0, FRAMES - 20, 5)}
    assert len(clips) == EPISODES and set(samples) == want and len(samples) == c["samples"]
    assert m["spec"]["handedness"] == "left" and m["spec"]["frames"]["waypoints"] == "garage"


def test_labels_equal_the_tcp_port_formula(raw, packed):
    for key, s in read_pack(packed).items():
        clip, t = key.rsplit("__", 1)
        annos = [anno(raw, clip, int(t) + 5 * k) for k in range(5)]
        ref = tcp_port_labels(annos)
        np.testing.assert_allclose(npy(s["waypoints.npy"]), ref["waypoints"], atol=1e-4)
        np.testing.assert_allclose(npy(s["target_point.npy"]), ref["target_point"], atol=1e-4)
        np.testing.assert_array_equal(npy(s["target_command.npy"]), ref["target_command"])
        if annos[0]["speed"] is not None:
            assert json.loads(s["speed.json"]) == pytest.approx(annos[0]["speed"], abs=1e-6)


def test_quirks_are_handled_and_counted(raw, packed):
    m = json.loads((packed / "manifest.json").read_text())
    # synth: clip 1 has a NaN theta at frame 5, clip 2 a null speed at frame 5, clip 3 an ego
    # written 'vehicle' in every frame (2 samples per clip at 30 frames)
    assert m["counts"]["nan_theta"] == 1 and m["counts"]["null_speed"] == 1
    assert m["counts"]["ego_as_vehicle"] == 2
    samples = read_pack(packed)
    clip2 = clip_name(2)
    moved = [anno(raw, clip2, t) for t in (4, 6)]
    speed = math.dist((moved[0]["x"], moved[0]["y"]), (moved[1]["x"], moved[1]["y"])) / 0.2
    assert json.loads(samples[f"{clip2}__0005"]["speed.json"]) == pytest.approx(speed, rel=1e-6)


def test_expert_assessment_is_paired_at_frame_minus_one(raw, packed):
    fields = None
    for key, s in read_pack(packed).items():
        clip, t = key.rsplit("__", 1)
        rec = codec_named("record").decode(s["measurements.npy"])
        fields = rec.dtype.names
        with np.load(raw / "v1" / clip / "expert_assessment" / f"{int(t) - 1:05d}.npz") as z:
            arr = z["arr_0"]
        feature = npy(s["expert_feature.npy"])   # its own member: the file's length
        np.testing.assert_allclose(feature, arr[:-2])
        assert rec["expert_value"] == pytest.approx(arr[-2]) and rec["expert_action"] == arr[-1]
        assert feature[0] == int(t)   # synth writes the frame number there
    assert "expert_value" in fields


def test_calibration_round_trip_and_right_handed(raw, packed, tmp_path):
    right = tmp_path / "right"
    run_pack(raw / "v1", right, layout="bench2drive", max_samples=50, handedness="right")
    left_s, right_s = read_pack(packed), read_pack(right)
    left2right = np.diag([1.0, -1.0, 1.0, 1.0])
    stand_to_ue4 = np.array([[0, 0, 1, 0], [1, 0, 0, 0], [0, -1, 0, 0], [0, 0, 0, 1]])
    lidar_to_rh = np.array([[0, 1, 0, 0], [-1, 0, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]])
    for key, s in left_s.items():
        clip, t = key.rsplit("__", 1)
        sensors = anno(raw, clip, int(t))["sensors"]
        rec = codec_named("record").decode(s["measurements.npy"])
        rrec = codec_named("record").decode(right_s[key]["measurements.npy"])
        for i, sid in enumerate(SIDS):
            k, c2e = np.array(sensors[sid]["intrinsic"]), np.array(sensors[sid]["cam2ego"])
            np.testing.assert_allclose(rec["intrinsics"][i], k, rtol=1e-6)
            np.testing.assert_allclose(rec["cam2ego"][i], c2e, atol=1e-6)
            # prepare_B2D.py: left2right @ cam2ego @ stand_to_ue4_rotate
            np.testing.assert_allclose(rrec["cam2ego"][i], left2right @ c2e @ stand_to_ue4,
                                       atol=1e-6)
        l2e = np.array(sensors["LIDAR_TOP"]["lidar2ego"])
        np.testing.assert_allclose(rec["lidar2ego"], l2e, atol=1e-6)
        np.testing.assert_allclose(rrec["lidar2ego"], left2right @ l2e @ left2right @ lidar_to_rh,
                                   atol=1e-6)
        wl, wr = npy(s["waypoints.npy"]), npy(right_s[key]["waypoints.npy"])
        np.testing.assert_allclose(wr, wl * [1, -1], atol=1e-6)   # y -> -y
        pl = codec_named("points").decode(s["lidar.npy"])
        pr = codec_named("points").decode(right_s[key]["lidar.npy"])
        np.testing.assert_array_equal(pr, pl * np.float32([1, -1, 1]))
        bl, br = npy(s["boxes.npy"]), npy(right_s[key]["boxes.npy"])
        np.testing.assert_array_equal(br[:, 2], -bl[:, 2])   # y
        np.testing.assert_allclose(br[:, 7], -bl[:, 7], atol=1e-6)   # yaw
    m = json.loads((right / "manifest.json").read_text())
    assert m["spec"]["handedness"] == "right" and m["spec"]["frames"]["waypoints"] == "b2d"
    assert m["spec"]["frames"]["lidar"] == m["spec"]["frames"]["boxes"] == "b2d"


def test_boxes_in_the_ego_frame_within_the_radius(raw, packed, tmp_path):
    near = tmp_path / "near"
    run_pack(raw / "v1", near, layout="bench2drive", max_samples=50, box_radius=10.0)
    near_s = read_pack(near)
    for key, s in read_pack(packed).items():
        clip, t = key.rsplit("__", 1)
        entries = anno(raw, clip, int(t))["bounding_boxes"]
        table = npy(s["boxes.npy"])
        assert json.loads(s["boxes_raw.json"]) == entries
        world2ego = np.array(entries[0]["world2ego"])
        # the ego, first; Bench2Drive writes ids as str(actor.id)
        assert table[0, 0] == 4 and table[0, 11] == int(entries[0]["id"])
        for entry in entries[1:]:
            if entry["class"] != "vehicle" or entry["location"][2] > 10:
                continue   # walkers, lights, cars on overpasses: test_b2d_parity.py
            row = table[table[:, 11] == int(entry["id"])][0]
            centre = (world2ego @ np.append(entry["center"], 1.0))[:3]
            np.testing.assert_allclose(row[1:4], centre, atol=1e-3)
            np.testing.assert_allclose(row[4:7], entry["extent"], atol=1e-6)
            assert row[10] == entry["num_points"] and row[0] == 0   # class car
        kept = npy(near_s[key]["boxes.npy"])
        assert (np.hypot(kept[1:, 1], kept[1:, 2]) <= 10.0).all()
        assert len(kept) == 1 + int((np.hypot(table[1:, 1], table[1:, 2]) <= 10.0).sum())


def test_sensors_decode_to_what_the_clip_holds(raw, packed):
    import cv2
    laspy = pytest.importorskip("laspy")
    h5py = pytest.importorskip("h5py")
    key, s = next(iter(read_pack(packed).items()))
    clip, t = key.rsplit("__", 1)
    src = raw / "v1" / clip
    name = f"{int(t):05d}"
    for cam in CAMS:
        assert s[f"{cam}.jpg"] == (src / "camera" / f"rgb_{cam}" / f"{name}.jpg").read_bytes()
        sem = cv2.imread(str(src / "camera" / f"semantic_{cam}" / f"{name}.png"), -1)
        np.testing.assert_array_equal(codec_named("semantics").decode(s[f"semantic_{cam}.png"]),
                                      sem)
        depth = codec_named("depth_b2d8").decode(s[f"depth_{cam}.png"])
        assert depth.dtype == np.float32 and depth.max() == 255.0   # the sky saturates
        inst = codec_named("instance").decode(s[f"instance_{cam}.png"])
        np.testing.assert_array_equal(inst[..., 0], sem)   # R holds the class tag
    las = laspy.read(io.BytesIO((src / "lidar" / f"{name}.laz").read_bytes()))
    # decoded once at pack time: the shard holds laspy's points as float32
    np.testing.assert_array_equal(codec_named("points").decode(s["lidar.npy"]),
                                  np.float32(las.xyz))
    radar = npy(s["radar.npy"])
    with h5py.File(src / "radar" / f"{name}.h5") as f:
        for i, ds in enumerate(("radar_front", "radar_front_left", "radar_front_right",
                                "radar_back_left", "radar_back_right")):
            np.testing.assert_array_equal(radar[radar[:, 0] == i][:, 1:],
                                          f[ds][()].astype(np.float32))


def test_stride_one_and_other_horizons(raw, tmp_path):
    m = run_pack(raw / "v1", tmp_path / "s1", layout="bench2drive", stride=1, pred_len=2,
                 max_samples=500)
    # every frame t with t + 2 x 5 inside the clip
    assert m["counts"]["frames"] == EPISODES * FRAMES and m["counts"]["between"] == 0
    assert m["pred_len"] == 2 and m["counts"]["samples"] == EPISODES * (FRAMES - 10)
    m = run_pack(raw / "v1", tmp_path / "s1b", layout="bench2drive", stride=1, max_samples=500)
    assert m["counts"]["samples"] == EPISODES * (FRAMES - 20)


def test_split_subsets(raw, tmp_path):
    split = raw / "bench2drive_base_train_val_split.json"
    val = run_pack(raw / "archives", tmp_path / "val", layout="bench2drive", split=str(split),
                   subset="val", max_samples=50)
    train = run_pack(raw / "archives", tmp_path / "train", layout="bench2drive",
                     split=str(split), subset="train", max_samples=50)
    val_clip = Path(json.loads(split.read_text())["val"][0]).name
    assert {k.rsplit("__", 1)[0] for k in read_pack(tmp_path / "val")} == {val_clip}
    assert val_clip not in {k.rsplit("__", 1)[0] for k in read_pack(tmp_path / "train")}
    assert val["counts"]["routes"] == 1 and train["counts"]["routes"] == EPISODES - 1
