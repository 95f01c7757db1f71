"""The loader on a Bench2Drive pack: calibration in the batch, intrinsics that follow the resize
(a box projected with them lands on its car in the loaded image and semantics), reduced-DCT
decode against cv2 on the same bytes, and the variable-length fields padded."""
from __future__ import annotations

import tarfile
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from carla_wds.calib import project
from carla_wds.load import CARLAWebData
from tests.conftest import run_pack
from tests.helpers import shared_raw

CAMS = ("front", "front_left", "front_right", "back", "back_left", "back_right")


@pytest.fixture(scope="module")
def b2d(tmp_path_factory) -> Path:
    # the clips are shared_raw's (test_batch_table imports this fixture: one synth a session)
    raw = shared_raw(tmp_path_factory, "bench2drive", episodes=2, frames=30, seed=7,
                     image_size=(180, 320))
    out = tmp_path_factory.mktemp("b2d_load") / "shards"
    run_pack(raw / "archives", out, layout="bench2drive", stride=1,
             max_samples=8, sensors=("lidar", "boxes", "expert", "radar", "semantic", "depth",
                                     "instance"))
    return out


def corners(row: np.ndarray) -> np.ndarray:
    """(8, 3) corners of a box-table row (x, y, z centre, half extents, yaw) in the ego frame."""
    x, y, z, hx, hy, hz, yaw = row[1:8]
    sx, sy, sz = np.meshgrid([-1, 1], [-1, 1], [-1, 1], indexing="ij")
    lx, ly = sx.ravel() * hx, sy.ravel() * hy
    c, s = np.cos(yaw), np.sin(yaw)
    return np.stack([x + c * lx - s * ly, y + s * lx + c * ly, z + sz.ravel() * hz], axis=1)


def _alone(rects: list[np.ndarray], j: int, margin: float = 3.0) -> bool:
    """No other projected box comes within `margin` px of box j."""
    a = rects[j]
    return all(b is a or (b[1] + margin < a[0]).any() or (a[1] + margin < b[0]).any()
               for b in rects)


@pytest.mark.parametrize("size", [(45, 80), (90, 160), (120, 200), (60, 240), (90, 300)])
def test_boxes_project_onto_their_cars_in_the_loaded_images(b2d, size):
    """Each car box, projected with the batch's intrinsics and cam2ego, covers exactly its
    car's pixels in the loaded (resized) semantics: the rectangle of Car pixels around it
    equals the projection's within the 1 px a nearest-neighbour resize may move an edge; and
    its centre is the car's red in the loaded camera image."""
    data = CARLAWebData(str(b2d), batch_size=4, mode="eval", image_size=size,
                        fields=["calibration", "boxes", "semantic_front"])
    hits, tol = 0, 1.0 + 2.0 * max(size[0] / 180, size[1] / 320)
    for batch in data:
        assert batch.intrinsics.shape == (4, 6, 3, 3) and batch.cam2ego.shape == (4, 6, 4, 4)
        for i in np.flatnonzero(batch.valid.numpy()):
            k, c2e = batch.intrinsics[i, 0].double().numpy(), batch.cam2ego[i, 0].double().numpy()
            sem = batch.extras["semantic_front"][i, 0].numpy()
            rgb = batch.images[i, 0].permute(1, 2, 0).numpy().astype(int)
            rects = []
            for row in batch.boxes[i, 1:int(batch.boxes_len[i])].numpy():
                uvz = project(corners(row), k, c2e)
                if (uvz[:, 2] > 0.5).all():   # what synth draws (every corner in front)
                    rects.append(np.stack([uvz[:, :2].min(axis=0), uvz[:, :2].max(axis=0)]))
            for j, (lo, hi) in enumerate(rects):
                inside = (lo >= 2).all() and hi[0] < size[1] - 2 and hi[1] < size[0] - 2
                if not inside or (hi - lo).min() < 3 or not _alone(rects, j):
                    continue
                v0, u0 = int(lo[1]) - 2, int(lo[0]) - 2
                window = sem[v0:int(hi[1]) + 3, u0:int(hi[0]) + 3] == 14
                vs, us = np.nonzero(window)
                got = np.array([[us.min() + u0, vs.min() + v0], [us.max() + u0 + 1,
                                                                vs.max() + v0 + 1]])
                np.testing.assert_allclose(got, np.stack([lo, hi]), atol=tol)
                u, v = (lo + hi) / 2
                r, g, b = rgb[int(v), int(u)]
                assert r > g + 40 and r > b + 40   # the car's red, through JPEG q20
                hits += 1
    assert hits >= 3


def _jpegs(shards: Path, cam: str) -> dict[str, bytes]:
    out = {}
    for tar in sorted(shards.glob("*.tar")):
        with tarfile.open(tar) as t:
            out.update({m.name.split(".")[0]: t.extractfile(m).read() for m in t
                        if m.name.endswith(f".{cam}.jpg")})
    return out


@pytest.mark.parametrize(("exact", "flag"), [(False, cv2.IMREAD_REDUCED_COLOR_4),
                                             (True, cv2.IMREAD_COLOR)])
def test_reduced_decode_equals_cv2_on_the_same_bytes(b2d, exact, flag):
    jpegs = _jpegs(b2d, "back")
    data = CARLAWebData(str(b2d), batch_size=4, mode="eval", image_size=(45, 80),
                        exact_resize=exact)
    checked = 0
    for batch in data:
        for i, key in enumerate(batch.keys):
            if not batch.valid[i]:
                continue
            bgr = cv2.imdecode(np.frombuffer(jpegs[key], np.uint8), flag)
            want = cv2.resize(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB), (80, 45),
                              interpolation=cv2.INTER_LINEAR)
            got = batch.images[i, CAMS.index("back")].permute(1, 2, 0).numpy()
            np.testing.assert_array_equal(got, want)
            checked += 1
    assert checked == len(jpegs)


def test_camera_subsets_keep_their_calibration(b2d):
    full = next(iter(CARLAWebData(str(b2d), batch_size=2, mode="eval", image_size=(45, 80),
                                  fields=["calibration"])))
    sub = next(iter(CARLAWebData(str(b2d), batch_size=2, mode="eval", image_size=(45, 80),
                                 cameras=["back", "front"], fields=["calibration"])))
    assert sub.intrinsics.shape == (2, 2, 3, 3)
    for j, cam in enumerate(("back", "front")):
        np.testing.assert_array_equal(sub.intrinsics[:, j], full.intrinsics[:, CAMS.index(cam)])
        np.testing.assert_array_equal(sub.cam2ego[:, j], full.cam2ego[:, CAMS.index(cam)])


def test_radar_lidar_boxes_padded_and_raw_json_listed(b2d):
    batch = next(iter(CARLAWebData(str(b2d), batch_size=4, mode="eval", image_size=(45, 80),
                                   fields=["radar", "lidar", "boxes", "boxes_raw"])))
    radar, n = batch.extras["radar"], batch.extras["radar_len"]
    assert radar.shape[2] == 5 and int(n.max()) == radar.shape[1]
    for i in range(4):
        assert not radar[i, int(n[i]):].any() and (radar[i, :int(n[i]), 0] <= 4).all()
        assert batch.lidar[i, int(batch.lidar_len[i]):].abs().sum() == 0
    raw = batch.extras["boxes_raw"]
    assert isinstance(raw, list) and len(raw) == 4
    # every row is one of the raw entries (prepare_B2D's rules drop some: test_b2d_parity.py)
    for r, k, rows in zip(raw, batch.boxes_len, batch.boxes):
        assert 1 <= int(k) <= len(r)
        assert {int(i) for i in rows[:int(k), 11]} <= {int(e["id"]) for e in r}


def test_per_camera_images_stack_in_camera_order(b2d):
    kinds = ["depth", "semantic", "instance"]
    each = [f"{k}_{cam}" for k in kinds for cam in CAMS]
    one = next(iter(CARLAWebData(str(b2d), batch_size=2, mode="eval", image_size=(45, 80),
                                 fields=each)))
    stacked = next(iter(CARLAWebData(str(b2d), batch_size=2, mode="eval", image_size=(45, 80),
                                     fields=kinds)))
    assert stacked.depth.shape == (2, 6, 45, 80) and stacked.depth.dtype == torch.float32
    assert stacked.semantics.shape == (2, 6, 45, 80) and stacked.semantics.dtype == torch.uint8
    assert stacked.extras["instance"].shape == (2, 6, 45, 80, 3)
    for i, cam in enumerate(CAMS):
        np.testing.assert_array_equal(stacked.depth[:, i], one.extras[f"depth_{cam}"][:, 0])
        np.testing.assert_array_equal(stacked.semantics[:, i],
                                      one.extras[f"semantic_{cam}"][:, 0])
        np.testing.assert_array_equal(stacked.extras["instance"][:, i],
                                      one.extras[f"instance_{cam}"][:, 0])
    np.testing.assert_array_equal(stacked.extras["instance"][..., 0], stacked.semantics)
    sub = next(iter(CARLAWebData(str(b2d), batch_size=2, mode="eval", image_size=(45, 80),
                                 cameras=["back", "front"], fields=["depth"])))
    assert sub.depth.shape == (2, 2, 45, 80)
    np.testing.assert_array_equal(sub.depth[:, 0], stacked.depth[:, CAMS.index("back")])
