"""Agent tracks of the garage layout (issue 27; pack/datasets/routes/tracks.py), against the
formula written here: carla_garage's boxes give each actor's position and yaw in that frame's
ego frame and its id (carla_garage@1448bed team_code/data_agent.py get_bounding_boxes), the
frame's ego_matrix places it in the world, so in frame t: inv(M_t) @ M_f @ [p_f, 1], yaw_f +
yaw(M_f) - yaw(M_t), at f = t + 2k (0.5 s at 4 Hz), k = -4..-1, 1..12."""
from __future__ import annotations

import gzip
import io
import json
import math
from pathlib import Path

import numpy as np
import pytest

from carla_wds.load import CARLAWebData
from tests.conftest import read_pack, run_pack

OFFSETS = [*range(-4, 0), *range(1, 13)]


def _json(path: Path):
    return json.loads(gzip.decompress(path.read_bytes())) if path.is_file() else None


@pytest.fixture(scope="module")
def garage(tmp_path_factory, zoo):
    # the raw routes of the zoo's 2 x 40-frame garage pack (also test_buckets'), read only
    raw = zoo(layout="garage", episodes=2, frames=40, max_samples=50).parent / "raw"
    out = tmp_path_factory.mktemp("garage_tracks") / "shards"
    run_pack(raw, out, layout="garage", all_frames=True)
    samples = [(json.loads(s["meta.json"]), s) for s in read_pack(out).values()]
    assert len(samples) > 20
    return raw, out, samples


def _expected(route: Path, t: int, ids: list[int]):
    m_t = np.array(_json(route / "measurements" / f"{t:04d}.json.gz")["ego_matrix"])
    xyyaw, valid = np.zeros((len(ids), len(OFFSETS), 3)), np.zeros((len(ids), len(OFFSETS)), bool)
    for j, k in enumerate(OFFSETS):
        f = t + 2 * k
        meas, boxes = (_json(route / d / f"{f:04d}.json.gz") for d in ("measurements", "boxes"))
        if meas is None or boxes is None:
            continue
        m_f = np.array(meas["ego_matrix"])
        turn = math.atan2(m_f[1, 0], m_f[0, 0]) - math.atan2(m_t[1, 0], m_t[0, 0])
        for i, actor in enumerate(ids):
            e = next((e for e in boxes if e.get("id") == actor), None)
            if e is None:
                continue
            p = np.linalg.inv(m_t) @ m_f @ np.array([*e["position"], 1.0])
            yaw = e["yaw"] + turn
            xyyaw[i, j] = p[0], p[1], math.atan2(math.sin(yaw), math.cos(yaw))
            valid[i, j] = True
    return xyyaw, valid


def test_garage_tracks_follow_each_box_by_id(garage):
    raw, _, samples = garage
    partial = 0
    for meta, s in samples:
        boxes = np.load(io.BytesIO(s["boxes.npy"]))
        tracks = np.load(io.BytesIO(s["tracks.npy"]))
        assert tracks.shape == (len(boxes), 16, 4) and tracks.dtype == np.float32
        want, valid = _expected(raw / meta["episode"], meta["frame"],
                                [int(i) for i in boxes[:, 11]])
        np.testing.assert_array_equal(tracks[..., 3], valid)
        np.testing.assert_allclose(tracks[..., :3], want, atol=2e-3)
        partial += valid.any() and not valid.all()
    assert partial


def test_the_ego_rows_track_is_the_egos_own_path(garage):
    """Row 0 (ego_car, position 0) moves as the poses say: frame f's origin in frame t."""
    _, _, samples = garage
    by_frame = {(m["episode"], m["frame"]): s for m, s in samples}
    poses = {key: np.load(io.BytesIO(s["ego2world.npy"])) for key, s in by_frame.items()}
    checked = 0
    for (ep, t), pose in poses.items():
        tracks = np.load(io.BytesIO(by_frame[(ep, t)]["tracks.npy"]))
        for j, k in enumerate(OFFSETS):
            if (ep, t + 2 * k) in poses:
                assert tracks[0, j, 3] == 1
                want = (np.linalg.inv(pose) @ poses[(ep, t + 2 * k)][:, 3])[:2]
                np.testing.assert_allclose(tracks[0, j, :2], want, atol=2e-3)
                checked += 1
    assert checked


def test_the_loader_pads_garage_tracks_like_its_boxes(garage):
    _, out, _ = garage
    batch = next(iter(CARLAWebData(str(out), batch_size=4, mode="eval", image_size=(48, 64),
                                   fields=["boxes", "tracks"])))
    k = int(batch.boxes_len.max())
    assert tuple(batch.fields["tracks"].shape) == (4, k, 16, 3)
    assert tuple(batch.fields["tracks_valid"].shape) == (4, k, 16)
    assert batch.fields["tracks_len"].tolist() == batch.boxes_len.tolist()
