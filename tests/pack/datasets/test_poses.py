"""Ego poses of the route layouts (issue 27): each sample's ego2world.npy equals the pose
written here from the formula (docs/poses.md) on the frame's raw measurement file; the relative
transform of two frames moves a world point as the labels and boxes say; the loader serves it
as fields ego2world / ego2world_rh (B, 4, 4) float64; packs without it say to re-pack."""
from __future__ import annotations

import gzip
import io
import json
import math
from pathlib import Path

import numpy as np
import pytest

from carla_wds.load import CARLAWebData
from tests.conftest import make_raw, read_pack, run_pack

LAYOUTS = {"tcp": "gnss", "tcp_roach": "gnss", "transfuser4": "gnss",
           "transfuser2022": "matrix", "garage": "matrix"}
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def _measurement(raw: Path, episode: str, frame: int) -> dict:
    folder = raw / episode / "measurements"
    for name in (f"{frame:04d}.json", f"{frame:04d}.json.gz"):
        if (folder / name).is_file():
            data = (folder / name).read_bytes()
            return json.loads(gzip.decompress(data) if name.endswith(".gz") else data)
    raise FileNotFoundError(folder / f"{frame:04d}")


def _expected(m: dict, how: str) -> np.ndarray:
    """The pose from the raw values, written from the conventions (not from the package):
    GNSS x = north = -y_world, y = east = x_world, compass = CARLA yaw + pi/2 (NaN: 0)."""
    if how == "matrix":
        return np.array(m["ego_matrix"], np.float64)
    theta = 0.0 if m["theta"] is None or math.isnan(m["theta"]) else m["theta"]
    yaw = theta - math.pi / 2
    return np.array([[math.cos(yaw), -math.sin(yaw), 0, m["y"]],
                     [math.sin(yaw), math.cos(yaw), 0, -m["x"]],
                     [0, 0, 1, 0], [0, 0, 0, 1]], np.float64)


@pytest.fixture(scope="module", params=sorted(LAYOUTS))
def packed(request, tmp_path_factory):
    layout = request.param
    raw = make_raw(tmp_path_factory.mktemp(f"raw_{layout}"), layout, episodes=2, frames=14,
                   seed=5)
    out = tmp_path_factory.mktemp(f"pack_{layout}") / "shards"
    kw = {"allow_pickle_input": True} if layout in ("transfuser2022", "tcp_roach") else {}
    run_pack(raw, out, layout=layout, all_frames=True, **kw)
    return layout, raw, out


def _samples(out: Path):
    for key, s in read_pack(out).items():
        meta = json.loads(s["meta.json"])
        yield key, meta, s


def test_each_frames_pose_is_the_formula_of_its_raw_measurement(packed):
    layout, raw, out = packed
    n = 0
    for _, meta, s in _samples(out):
        pose = np.load(io.BytesIO(s["ego2world.npy"]))
        assert pose.dtype == np.float64 and pose.shape == (4, 4)
        want = _expected(_measurement(raw, meta["episode"], meta["frame"]), LAYOUTS[layout])
        np.testing.assert_allclose(pose, want, atol=1e-9)
        n += 1
    assert n > 4


def _tcp_frame(p_fr: np.ndarray) -> np.ndarray:
    """(forward, right) -> TCP's (right, -forward) (docs/coordinates.md)."""
    return np.stack([p_fr[..., 1], -p_fr[..., 0]], -1)


def test_the_relative_transform_moves_future_positions_onto_the_waypoints(packed):
    """inv(pose_t) @ pose_{t+i} puts frame t+i's origin where the layout's own waypoint label
    (computed by its project's formula, tests/test_reference.py) says it is."""
    layout, raw, out = packed
    samples = {(m["episode"], m["frame"]): s for _, m, s in _samples(out)}
    checked = 0
    for (ep, t), s in samples.items():
        wps = np.load(io.BytesIO(s["waypoints.npy"]))
        now = np.load(io.BytesIO(s["ego2world.npy"]))
        for i in range(1, len(wps) + 1):
            later = _expected(_measurement(raw, ep, t + i), LAYOUTS[layout])
            ego = np.linalg.inv(now) @ later[:, 3]          # its origin in frame t's ego
            want = {"tcp": _tcp_frame, "tcp_roach": _tcp_frame, "transfuser4": _tcp_frame,
                    "garage": lambda p: p,
                    "transfuser2022": lambda p: p - np.array([1.3, 0.0])}[layout](ego[:2])
            np.testing.assert_allclose(wps[i - 1], want, atol=2e-3)
            checked += 1
    assert checked > 8


def test_tf2022_boxes_agree_with_the_pose(packed):
    """TransFuser 2022's label_raw boxes carry each car's world matrix: the pose puts it where
    the box row says (virtual LiDAR frame: forward - 1.3, left)."""
    layout, raw, out = packed
    if layout != "transfuser2022":
        pytest.skip("only transfuser2022's boxes carry their world matrix")
    seen = 0
    for _, meta, s in _samples(out):
        rows = np.load(io.BytesIO(s["boxes.npy"]))
        entries = json.loads(s["boxes_raw.json"])
        world2ego = np.linalg.inv(np.load(io.BytesIO(s["ego2world.npy"])))
        for row, e in zip(rows[1:], entries[1:]):
            f, r, _, _ = world2ego @ np.array(e["ego_matrix"])[:, 3]
            np.testing.assert_allclose(row[1:3], (f - 1.3, -r), atol=1e-3)
            seen += 1
    assert seen


def test_the_loader_serves_both_handednesses(packed):
    layout, _, out = packed
    data = CARLAWebData(str(out), batch_size=2, mode="eval", image_size=(48, 64),
                        fields=["ego2world", "ego2world_rh"])
    batch = next(iter(data))
    left, right = batch.fields["ego2world"], batch.fields["ego2world_rh"]
    assert left.shape == (2, 4, 4) and str(left.dtype) == "torch.float64"
    mirror = np.diag([1.0, -1.0, 1.0, 1.0])
    np.testing.assert_allclose(right.numpy(), mirror @ left.numpy() @ mirror)
    # right-handed: a right-turning yaw (CARLA) is a negative one
    yaw_l = np.arctan2(left[:, 1, 0].numpy(), left[:, 0, 0].numpy())
    yaw_r = np.arctan2(right[:, 1, 0].numpy(), right[:, 0, 0].numpy())
    np.testing.assert_allclose(yaw_r, -yaw_l, atol=1e-12)
    only = next(iter(CARLAWebData(str(out), batch_size=2, mode="eval", image_size=(48, 64),
                                  fields=["ego2world_rh"])))
    assert set(only.fields) >= {"ego2world_rh"} and "ego2world" not in only.fields


def test_a_pack_made_before_poses_says_to_repack():
    with pytest.raises(ValueError, match=r"'ego2world' \(ego poses\) is in packs made by this "
                                         r"carla-wds version .*: re-pack the raw data") as info:
        CARLAWebData(str(FIXTURES / "v1_tcp"), batch_size=2, mode="eval", fields=["ego2world"])
    assert "\n" not in str(info.value)
