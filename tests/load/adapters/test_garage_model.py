"""adapter="garage": batches equal carla_garage's own DataLoader(CARLA_Data) after default
collate (TransFuser++, autonomousvision/carla_garage@1448bed team_code/data.py).

The golden (tests/golden/garage_batches.npz) is their loader, batch 4, augment=0,
use_color_aug=0, use_wp_gru=True, on synth garage routes at TransFuser++'s 1024x256
(tools/golden/garage_batches.py, not run here). The same routes are synthesised again (hash
checked), packed, and served with adapter="garage" in eval mode. Every key is compared: the
same dtype and shape per batch, the same keys in their order; per sample (their batches follow
os.listdir's folder order, ours the shards'), values within float32 rounding (the shards store
float32), the per-pixel keys (rgb, depth, semantic, bev_semantic, lidar) by the sha256 of
their float32 bytes, i.e. bit-identical; and the same sample set. The CenterNet formulas are
also checked against an independent computation written here for single boxes.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from carla_wds.load import CARLAWebData
from carla_wds.load.adapters.centernet import centernet_targets
from carla_wds.load.adapters.garage_model import camera, garage_boxes
from carla_wds.modalities.boxes import BOX_CLASSES, BOX_COLUMNS, FILL
from tools.golden.garage_batches import add_signals

from ...helpers import SCRIPTS, make_pack
from ...ranks import run_script
from .batch_goldens import (read_golden, row_sha256, sample_id, served,
                            shared_golden_shards)

GOLDEN = Path(__file__).parents[2] / "golden" / "garage_batches.npz"
ATOL = 2e-5   # metres, m/s, rad, pixels/4: theirs float64 from JSON, ours float32 in the shards


@pytest.fixture(scope="module")
def golden():
    return read_golden(GOLDEN)


@pytest.fixture(scope="module")
def shards(golden, tmp_path_factory) -> Path:
    return shared_golden_shards(tmp_path_factory, golden[0], add_signals, max_samples=4)


def _rows(batches: list, ids_of) -> dict[str, dict[str, np.ndarray]]:
    """id -> key -> that sample's row (a numpy array) across all batches."""
    out: dict[str, dict[str, np.ndarray]] = {}
    for b, batch in enumerate(batches):
        for i, ident in enumerate(ids_of(b, batch)):
            if ident:   # "" is a padding row
                out[ident] = {k: v[i] for k, v in batch.items()}
    return out


def _theirs(meta: dict, arrays: dict) -> dict[str, dict[str, np.ndarray]]:
    batches = []
    for b in range(len(meta["structure"])):
        batches.append({k: arrays[f"b{b}/{k}#sha256"] if k in meta["large"]
                        else arrays[f"b{b}/{k}"] for k in meta["keys"]})
    return _rows(batches, lambda b, _: arrays[f"b{b}/#ids"].tolist())


def _compare(meta: dict, arrays: dict, batches: list) -> None:
    """Their keys in their order, dtypes and shapes per batch; per sample, every value."""
    for batch in batches:
        assert list(batch) == meta["keys"] + ["valid", "key"]
        for key in meta["keys"]:
            got, want = batch[key], meta["structure"][0][key]
            assert isinstance(got, torch.Tensor), key
            assert str(got.dtype).replace("torch.", "") == want["dtype"], key
            assert list(got.shape)[1:] == want["shape"][1:], key
    ours = _rows([{k: v.numpy() for k, v in b.items() if k != "key"} for b in batches],
                 lambda b, _: [sample_id(k) if k else "" for k in batches[b]["key"]])
    theirs = _theirs(meta, arrays)
    assert sorted(ours) == sorted(theirs)   # the same samples
    for ident, want in theirs.items():
        for key in meta["keys"]:
            got = ours[ident][key]
            if key in meta["large"]:
                assert row_sha256(got) == str(want[key]), f"{ident} {key}: bytes differ"
            elif got.dtype.kind in "iub":
                np.testing.assert_array_equal(got, want[key], err_msg=f"{ident} {key}")
            else:
                np.testing.assert_allclose(got, want[key], rtol=1e-6, atol=ATOL,
                                           err_msg=f"{ident} {key}")


def test_garage_batches_equal_their_dataloader(golden, shards):
    meta, arrays = golden
    _, batches = served(meta, shards, "garage")
    for batch, want in zip(batches, meta["structure"]):
        # eval pads the last batch to the batch size with copies of a real row, valid False
        assert batch["valid"].sum() == want["brake"]["shape"][0]
    _compare(meta, arrays, batches)


def test_twin_camera_samples_equal_theirs(shards):
    """Their loader with augment=1, augment_percentage=1.0 (every sample from the augmented
    camera set: tools/golden/garage_batches.py --twin) against adapter="garage" in training
    with the camera twin at p=1: the twin's camera, depth, semantics, BEV, LiDAR moved into
    its frame, boxes and CenterNet targets, route, target point, aim point and waypoints."""
    meta, arrays = read_golden(GOLDEN.with_name("garage_batches_twin.npz"))
    # batch 2: training drops a short last batch, and 10 samples fill 5 batches of 2
    data = CARLAWebData(str(shards), batch_size=2, adapter="garage",
                        adapters={"garage_camera_twin": 1.0})
    _compare(meta, arrays, list(data))


def _box(cls: str, x: float, y: float, **kw) -> np.ndarray:
    row = np.full(len(BOX_COLUMNS), FILL, np.float32)
    values = {"class": BOX_CLASSES[cls], "x": x, "y": y, "z": 0.5, "extent_x": 2.4,
              "extent_y": 1.0, "extent_z": 0.8, "yaw": 0.3, "speed": 4.0, "brake": 0.0, **kw}
    for name, v in values.items():
        row[BOX_COLUMNS.index(name)] = v
    return row


def test_box_filter_keeps_what_theirs_keeps():
    """parse_bounding_boxes: no ego; > 7 LiDAR hits where counted; lights that affect the ego
    and are not Green (state 2); stop signs that affect the ego; centre inside (-32, 32) m
    and z in (-4, 4) m."""
    rows = [_box("ego", 0, 0), _box("car", 5, 1, num_points=7), _box("car", 5, 2, num_points=8),
            _box("walker", 6, 1),   # no count: kept
            _box("traffic_light", 9, 1, affects_ego=1, light_state=2),
            _box("traffic_light", 9, 2, affects_ego=1, light_state=0),
            _box("traffic_light", 9, 3, affects_ego=0, light_state=0),
            _box("stop_sign", 9, 4, affects_ego=0), _box("stop_sign", 9, 5, affects_ego=1),
            _box("car", 32, 0), _box("car", 31.9, 0), _box("car", 1, -32), _box("car", 1, 1, z=4)]
    kept = garage_boxes(np.stack(rows), len(rows))
    # kept (vehicle y, x) -> image (x, y) = (y * 4 + 128, x * 4 + 128): read back (x, y)
    back = np.array([((r[1] - 128) / 4, (r[0] - 128) / 4, r[7]) for r in kept])
    np.testing.assert_allclose(back, [(5, 2, 0), (6, 1, 1), (9, 2, 2), (9, 5, 3), (31.9, 0, 0)],
                               atol=1e-5)
    walker, light = kept[1], kept[2]
    assert walker[5] == 4.0 and walker[6] == 0 and light[5] == 0 and light[6] == 0
    assert garage_boxes(np.stack(rows), 1).shape == (0, 8)   # boxes_len bounds the rows


def _radius(h: float, w: float, overlap: float = 0.1) -> float:
    """CornerNet's radius, solved here with numpy.roots on each case's quadratic in r."""
    cases = [(1, -(h + w), w * h * (1 - overlap) / (1 + overlap)),   # one corner inside
             (4, -2 * (h + w), (1 - overlap) * w * h),               # both inside
             (4 * overlap, 2 * overlap * (h + w), (overlap - 1) * w * h)]   # both outside
    radii = []
    for a, b, c in cases:
        r = sorted(np.roots([a, b, c]).real)
        radii.append(r[0] if a != 4 * overlap else r[1])
    return min(radii)


def test_centernet_targets_of_one_box_from_the_formulas():
    """One car 10 m ahead, 5 m left, half extents (2.4, 1.0) m, yaw 0.2, speed 4, braking:
    written from the formulas here (not via the adapter's helpers)."""
    box = garage_boxes(np.stack([_box("car", 10.0, -5.0, brake=1.0, yaw=0.2)]), 1)
    t, avg = centernet_targets(box, 64, 64, 256, 256)
    # image x = (y * 4 + 128) / 4 = 27, image y = (x * 4 + 128) / 4 = 42 in the 64x64 map
    cx, cy, ex, ey = 27, 42, 1.0, 2.4
    r = max(2, int(_radius(ey, ex)))
    sigma = (2 * r + 1) / 6
    yy, xx = np.mgrid[0:64, 0:64]
    d2 = (xx - cx) ** 2 + (yy - cy) ** 2
    near = (abs(xx - cx) <= r) & (abs(yy - cy) <= r)
    want = np.where(near, np.exp(-d2 / (2 * sigma ** 2)), 0.0)
    assert t["center_heatmap"].shape == (4, 64, 64) and t["center_heatmap"].dtype == np.float32
    np.testing.assert_allclose(t["center_heatmap"][0], want, atol=1e-6)
    assert not t["center_heatmap"][1:].any() and avg == 1
    assert tuple(t["wh"][:, cy, cx]) == pytest.approx((ex, ey))
    assert np.count_nonzero(t["wh"]) == 2 and t["pixel_weight"][:, cy, cx].tolist() == [1, 1]
    # image yaw -0.2 (-11.5 deg): 12 bins centred on k * 30 deg: bin 0, residual -0.2
    assert t["yaw_class"].shape == (64, 64) and t["yaw_class"][cy, cx] == 0
    assert t["yaw_res"][0, cy, cx] == pytest.approx(-0.2, abs=1e-6)
    assert t["velocity"][0, cy, cx] == 4.0 and t["brake_target"][cy, cx] == 1
    assert t["offset"][:, cy, cx] == pytest.approx((0, 0), abs=1e-4)


def test_centernet_yaw_classes_and_no_boxes():
    for yaw, cls in ((-math.pi / 2, 3), (math.pi / 2 + 0.1, 9), (math.pi - 0.2, 6)):
        box = garage_boxes(np.stack([_box("walker", 3.0, 3.0, yaw=yaw)]), 1)
        t, _ = centernet_targets(box, 64, 64, 256, 256)
        # image yaw = -yaw; class = nearest multiple of 30 deg, mod 12
        assert t["yaw_class"][(3 * 4 + 128) // 4, (3 * 4 + 128) // 4] == cls
        assert t["center_heatmap"][1].max() == 1.0
    t, avg = centernet_targets(np.zeros((0, 8)), 64, 64, 256, 256)
    assert avg == 1 and not any(v.any() for v in t.values())


def test_garage_refuses_other_shards(tmp_path):
    plain = make_pack(tmp_path, layout="tcp", episodes=1, frames=12)
    with pytest.raises(ValueError) as exc:
        CARLAWebData(str(plain), batch_size=2, adapter="garage")
    msg = str(exc.value)
    assert "\n" not in msg and "layout 'tcp'" in msg and "--layout garage" in msg


def test_the_name_alone_sets_the_settings(shards):
    with pytest.raises(ValueError, match="leave image_size out"):
        CARLAWebData(str(shards), batch_size=2, adapter="garage", image_size=(256, 512))
    data = CARLAWebData(str(shards), batch_size=2, adapter="garage")
    assert data.image_size == (256, 1024) and "boxes" in data.fields


@pytest.mark.ddp
def test_a_model_with_their_contract_trains_under_torchrun(shards, tmp_path):
    """A small model reading the batch as carla_garage's train.py does (tests/scripts/
    garage_contract_train.py) trains a few DDP steps on 2 ranks and validates: the contract
    holds in every batch, losses are finite (eval padding rows too), equal step and batch
    counts per rank, and eval sees every sample once."""
    run_script(str(SCRIPTS / "garage_contract_train.py"), str(shards), str(tmp_path))
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert all(all(r["contract"]) for r in ranks)
    assert len(ranks[0]["train_losses"]) == len(ranks[1]["train_losses"]) > 0
    assert all(math.isfinite(x) for r in ranks for x in r["train_losses"])
    assert ranks[0]["val_batches"] == ranks[1]["val_batches"]
    seen = ranks[0]["val_keys"] + ranks[1]["val_keys"]
    assert sorted(seen) == sorted(set(seen)) and len(seen) == 10


def test_colour_augmentation_is_seeded_and_off_without_augment():
    """Their image_augmenter(0.5): with augment, the uint8 camera changes and the change is a
    function of the sample's generator only; without, the pixels are the saved ones."""
    image = np.random.default_rng(0).integers(0, 256, (32, 64, 3), dtype=np.uint8)
    plain = camera(image, False, np.random.default_rng(1))
    assert plain.dtype == np.uint8 and np.array_equal(plain, image.transpose(2, 0, 1))
    runs = [camera(image, True, np.random.default_rng(seed)) for seed in (1, 1, 2)]
    assert all(r.dtype == np.uint8 and r.shape == (3, 32, 64) for r in runs)
    assert np.array_equal(runs[0], runs[1]) and not np.array_equal(runs[0], runs[2])
    assert not np.array_equal(runs[0], plain)


def test_augment_is_theirs_the_loaders_stays_off_and_the_twin_is_on(shards):
    """augment=True: the camera is their colour augmentation of the saved pixels, drawn from
    the sample's generator (so the loader's own colour augmenter did not run first), the same
    in every run; and the camera twin is on at their augment_percentage (labels move on about
    half the samples, never on all or none of 10)."""
    from carla_wds.load.decode.transform import sample_rng

    def run(augment: bool) -> dict[str, dict]:
        out = {}
        for batch in CARLAWebData(str(shards), adapter="garage", batch_size=2, mode="train",
                                  augment=augment, seed=3):
            for i, key in enumerate(batch["key"]):
                if batch["valid"][i]:
                    out[key] = {"rgb": batch["rgb"][i].numpy(),
                                "target_point": batch["target_point"][i].numpy()}
        return out

    aug, again, plain = run(True), run(True), run(False)
    assert sorted(aug) == sorted(plain) and all(
        np.array_equal(aug[k]["rgb"], again[k]["rgb"]) for k in aug)
    moved = [k for k in aug if not np.allclose(aug[k]["target_point"],
                                               plain[k]["target_point"])]
    assert 0 < len(moved) < len(aug)   # the twin, at p = 0.5, on 10 samples
    for key in set(aug) - set(moved):   # the saved camera, their augmentation only
        want = camera(plain[key]["rgb"].transpose(1, 2, 0), True, sample_rng(3, 0, key))
        assert np.array_equal(aug[key]["rgb"], want), key
