"""Bench2Drive's temporal members (issue 27), each against its formula written here from
Bench2DriveZoo@uniad/vad 10a2e5d (prepare_B2D.py, B2D_e2e_dataset.py), on synthetic clips
whose actors move known paths: ego2world is the inverse of the ego box's world2ego and puts
every box where the box table says; can_bus is get_data_info's 18 values; tracks follow each
box's actor by id through the clip's anno files (and the crossing walker's straight path)."""
from __future__ import annotations

import gzip
import io
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from carla_wds.load import CARLAWebData
from carla_wds.pack.synth import synth_dataset
from tests.conftest import read_pack, run_pack_all_frames as run_pack

FRAMES, STEP, PAST, FUTURE = 70, 5, 4, 12
ID, WALKER = 11, 3000          # box-table id column; synth's walker id (+ episode)


def _anno(raw: Path, clip: str, t: int) -> dict | None:
    path = raw / "v1" / clip / "anno" / f"{t:05d}.json.gz"
    return json.loads(gzip.decompress(path.read_bytes())) if path.is_file() else None


def _npy(data: bytes) -> np.ndarray:
    return np.load(io.BytesIO(data), allow_pickle=False)


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("b2d_temporal_raw")
    synth_dataset(out, "bench2drive", episodes=2, frames=FRAMES, seed=11, image_size=(36, 64),
                  progress=False)
    return out


@pytest.fixture(scope="module", params=["left", "right"])
def packed(raw, tmp_path_factory, request):
    out = tmp_path_factory.mktemp(f"b2d_temporal_{request.param}") / "shards"
    run_pack(raw / "archives", out, layout="bench2drive", sensors=("boxes",),
             handedness=request.param)
    samples = [(json.loads(s["meta.json"]), s) for s in read_pack(out).values()]
    assert len(samples) > 10
    return request.param, out, samples


def _world2ego(a: dict) -> np.ndarray:
    ego = next(e for e in a["bounding_boxes"] if e["class"] in ("ego_vehicle", "vehicle"))
    return np.array(ego["world2ego"], np.float64)


def test_ego2world_is_the_inverse_world2ego_and_places_the_boxes(raw, packed):
    hand, _, samples = packed
    flip = np.array([1.0, -1.0 if hand == "right" else 1.0, 1.0])
    for meta, s in samples:
        a = _anno(raw, meta["episode"], meta["frame"])
        pose = _npy(s["ego2world.npy"])
        assert pose.dtype == np.float64
        np.testing.assert_allclose(pose, np.linalg.inv(_world2ego(a)), atol=1e-9)
        by_id = {int(e["id"]): e for e in a["bounding_boxes"]}
        for row in _npy(s["boxes.npy"]):
            centre = np.array(by_id[int(row[ID])]["center"] + [1.0])
            np.testing.assert_allclose(row[1:4], (np.linalg.solve(pose, centre)[:3]) * flip,
                                       atol=2e-3)


def _can_bus(a: dict, speed: float) -> np.ndarray:
    """get_data_info's can_bus from prepare_B2D's values, transcribed."""
    yaw = -np.nan_to_num(a["theta"], nan=np.pi) + np.pi / 2
    rotation = [np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2)]   # Quaternion(axis=z, radians=yaw)
    out = np.zeros(18)
    out[:3] = [a["x"], -a["y"], 0]
    out[3:7] = rotation
    out[7:10] = [speed, 0, 0]
    acc = a["acceleration"]
    out[10:13] = [acc[0], -acc[1], acc[2]]
    out[13:16] = -np.array(a["angular_velocity"])
    if yaw < 0:
        yaw += 2 * np.pi
    out[16], out[17] = yaw, yaw / np.pi * 180
    return out


def test_can_bus_is_get_data_infos_vector(raw, packed):
    _, _, samples = packed
    nan_seen = False
    for meta, s in samples:
        a = _anno(raw, meta["episode"], meta["frame"])
        speed = json.loads(s["speed.json"])   # a null speed: the one the positions give
        nan_seen |= math.isnan(a["theta"])
        np.testing.assert_allclose(_npy(s["can_bus.npy"]), _can_bus(a, speed), atol=1e-9)
    assert nan_seen   # the synth's NaN compass is among them: read as pi, as theirs


def _expected_tracks(raw: Path, clip: str, t: int, ids: np.ndarray, right: bool):
    """Per id, at t + 5k (k = -4..-1, 1..12): the same id's centre in frame t's ego frame and
    its yaw relative to the ego's, where that frame exists and holds it within 75 m and 10 m
    of height (prepare_B2D's rules; the ego row is always its own)."""
    now = _anno(raw, clip, t)
    w2e = _world2ego(now)
    ego_yaw = math.radians(now["bounding_boxes"][0]["rotation"][2])
    offsets = [*range(-PAST, 0), *range(1, FUTURE + 1)]
    xyz, valid = np.zeros((len(ids), len(offsets), 3)), np.zeros((len(ids), len(offsets)), bool)
    for j, k in enumerate(offsets):
        a = _anno(raw, clip, t + k * STEP)
        if a is None:
            continue
        ego = a["bounding_boxes"][0]
        for i, actor in enumerate(ids):
            e = next((e for e in a["bounding_boxes"] if int(e["id"]) == actor), None)
            if e is None or e is not ego and (
                    np.linalg.norm(np.subtract(e["location"], ego["location"])) > 75 or
                    abs(e["location"][2] - ego["location"][2]) > 10):
                continue
            p = w2e @ np.array(e["center"] + [1.0])
            yaw = math.radians(e["rotation"][2]) - ego_yaw
            xyz[i, j] = p[0], p[1], math.atan2(math.sin(yaw), math.cos(yaw))
            valid[i, j] = True
    if right:
        xyz[..., 1:] *= -1
    return xyz, valid


def test_tracks_follow_each_box_by_id_through_the_clip(raw, packed):
    hand, _, samples = packed
    edges = 0
    for meta, s in samples:
        boxes, tracks = _npy(s["boxes.npy"]), _npy(s["tracks.npy"])
        assert tracks.shape == (len(boxes), PAST + FUTURE, 4) and tracks.dtype == np.float32
        want, valid = _expected_tracks(raw, meta["episode"], meta["frame"],
                                       boxes[:, ID].astype(int), hand == "right")
        np.testing.assert_array_equal(tracks[..., 3], valid)
        np.testing.assert_allclose(tracks[..., :3], want, atol=2e-3)
        assert not tracks[..., :3][~valid].any()   # invalid steps hold zeros
        edges += (~valid).any()
    assert edges   # windows reaching past a clip's start or end are flagged


def test_the_walkers_track_is_its_straight_crossing(raw, packed):
    """The synth's walker crosses at 1.4 m/s along the ego's frame-0 left axis (synth
    bench2drive_actors.py): its track is that line, seen from frame t's ego."""
    hand, _, samples = packed
    seen = 0
    for meta, s in samples:
        boxes, tracks = _npy(s["boxes.npy"]), _npy(s["tracks.npy"])
        rows = np.flatnonzero((boxes[:, ID] >= WALKER) & (boxes[:, ID] < WALKER + 100))
        if not len(rows):
            continue
        a0, now = _anno(raw, meta["episode"], 0), _anno(raw, meta["episode"], meta["frame"])
        yaw0 = math.radians(a0["bounding_boxes"][0]["rotation"][2])
        fwd, left = np.array([math.cos(yaw0), math.sin(yaw0)]), np.array([math.sin(yaw0),
                                                                          -math.cos(yaw0)])
        w2e = _world2ego(now)
        for j, k in enumerate([*range(-PAST, 0), *range(1, FUTURE + 1)]):
            f = meta["frame"] + k * STEP
            if not tracks[rows[0], j, 3]:
                continue
            walk = np.array([a0["x"], a0["y"]]) + 18 * fwd + (4 - 1.4 * 0.1 * f) * left
            p = w2e @ np.array([*walk, 0.9, 1.0])
            want = p[:2] * (1, -1 if hand == "right" else 1)
            np.testing.assert_allclose(tracks[rows[0], j, :2], want, atol=2e-3)
            seen += 1
    assert seen


def test_the_loader_serves_pose_can_bus_and_padded_tracks(packed):
    _, out, _ = packed
    batch = next(iter(CARLAWebData(str(out), batch_size=3, mode="eval", image_size=(36, 64),
                                   fields=["boxes", "tracks", "can_bus", "ego2world_rh"])))
    f = batch.fields
    assert f["can_bus"].shape == (3, 18) and str(f["can_bus"].dtype) == "torch.float64"
    assert f["ego2world_rh"].shape == (3, 4, 4)
    k = int(batch.boxes_len.max())
    assert f["tracks"].shape == (3, k, PAST + FUTURE, 3) and str(f["tracks"].dtype) == \
        "torch.float32"
    assert f["tracks_valid"].shape == (3, k, PAST + FUTURE)
    assert f["tracks_valid"].dtype == torch.bool
    assert f["tracks_len"].tolist() == batch.boxes_len.tolist()
    for i, n in enumerate(f["tracks_len"].tolist()):   # the padding rows: no valid step
        assert not f["tracks_valid"][i, n:].any()
