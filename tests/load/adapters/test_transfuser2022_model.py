"""adapter="transfuser2022": batches equal TransFuser 2022's own DataLoader(CARLA_Data) after
default collate (autonomousvision/transfuser@22b3ccd team_code_transfuser/data.py).

The golden (tests/golden/transfuser2022_batches.npz) is their loader, batch 4, augment=False,
on synth transfuser2022 routes at their 960x160 camera strip (tools/golden/tf2022.py --batches,
not run here). The same routes are synthesised again (hash checked), packed, and served with
adapter="transfuser2022" in eval mode. Compared: their keys in their order, dtypes and shapes;
per sample (their batches follow os.listdir's folder order, ours the shards'), every value
within float32 rounding (the shards store float32), the per-pixel keys (rgb, bev, depth,
semantic, lidar, target_point_image) by the sha256 of their float32 bytes, i.e. bit-identical;
and the same sample set. Crop, depth and target_point_image are also checked against formulas
written here.
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from carla_wds.load import CARLAWebData
from carla_wds.load.adapters.transfuser2022 import (TRANSFUSER2022, crop, depth01,
                                                     draw_rotation, target_point_image,
                                                     tf2022_sample)
from carla_wds.modalities.boxes import BOX_COLUMNS
from carla_wds.pack import PackOptions, pack
from carla_wds.pack.synth import synth_dataset

from ...helpers import SCRIPTS, make_pack
from ...ranks import run_script
from .batch_goldens import golden_shards, read_golden, row_sha256, sample_id, served

GOLDEN = Path(__file__).parents[2] / "golden" / "transfuser2022_batches.npz"
ATOL = 2e-5   # metres, rad, pixels: theirs float64 from JSON, ours float32 in the shards
X_ATOL = 1e-4  # x_command, y_command: world metres (~100 m) held as float32 in the record


@pytest.fixture(scope="module")
def golden():
    return read_golden(GOLDEN)


@pytest.fixture(scope="module")
def shards(golden, tmp_path_factory) -> Path:
    return golden_shards(golden[0], tmp_path_factory.mktemp("tf2022_model"),
                         allow_pickle_input=True, max_samples=4)


def _by_sample(batches: list[dict], ids: list[list[str]]) -> dict[str, dict]:
    return {ident: {k: v[i] for k, v in batch.items()}
            for batch, row_ids in zip(batches, ids) for i, ident in enumerate(row_ids) if ident}


def _compare(meta: dict, arrays: dict, batches: list[dict]) -> None:
    """Their keys in their order, dtypes and shapes per batch; per sample, every value."""
    want_types = meta["structure"][0]
    for batch in batches:
        assert list(batch) == meta["keys"] + ["valid", "key"]   # their keys, their order
        for key in meta["keys"]:
            got = batch[key]
            assert isinstance(got, torch.Tensor), key
            assert str(got.dtype).replace("torch.", "") == want_types[key]["dtype"], key
            assert list(got.shape[1:]) == want_types[key]["shape"][1:], key
    ours = _by_sample([{k: v.numpy() for k, v in b.items() if k != "key"} for b in batches],
                      [[sample_id(k) if k else "" for k in b["key"]] for b in batches])
    n = len(meta["structure"])
    theirs = _by_sample(
        [{k: arrays[f"b{b}/{k}#sha256" if k in meta["large"] else f"b{b}/{k}"]
          for k in meta["keys"]} for b in range(n)],
        [arrays[f"b{b}/#ids"].tolist() for b in range(n)])
    assert sorted(ours) == sorted(theirs) and len(theirs) == 6   # the same samples
    for ident, want in theirs.items():
        for key in meta["keys"]:
            got, where = ours[ident][key], f"{ident} {key}"
            if key in meta["large"]:
                assert row_sha256(got) == str(want[key]), f"{where}: bytes differ"
            elif got.dtype.kind in "iub":
                np.testing.assert_array_equal(got, want[key], err_msg=where)
            else:
                atol = X_ATOL if key in ("x_command", "y_command") else ATOL
                np.testing.assert_allclose(got, want[key], rtol=1e-6, atol=atol, err_msg=where)
    assert any(r["label"][0].any() for r in ours.values())   # boxes were kept


def test_tf2022_batches_equal_their_dataloader(golden, shards):
    meta, arrays = golden
    _compare(meta, arrays, served(meta, shards, "transfuser2022")[1])


class _Draws:
    """A generator whose random() answers fixed draws in turn (their random.random's, as
    tools/golden/tf2022.py --rotated sets it)."""

    def __init__(self, draws) -> None:
        self.draws, self.i = list(draws), 0

    def random(self) -> float:
        self.i += 1
        return self.draws[(self.i - 1) % len(self.draws)]


def test_rotated_samples_equal_theirs(shards):
    """Their loader with augment=True and its random() fixed to (0.95, 0.73): every sample
    rotated by 9.2 degrees (crop shifted 49 columns, BEV rotated by skimage, LiDAR, boxes,
    waypoints and target point turned), against the adapter's transform with the same draws."""
    meta, arrays = read_golden(GOLDEN.with_name("transfuser2022_batches_rotated.npz"))
    adapter = TRANSFUSER2022

    def rotated(s, rng):
        return tf2022_sample(adapter, {**s, "augment": True}, _Draws(meta["settings"]["random"]))
    data = CARLAWebData(str(shards), batch_size=meta["batch_size"], mode="eval",
                        sample_transform=rotated, **adapter.settings())
    _compare(meta, arrays, list(data))


def test_crop_is_their_centre_crop_of_704_columns():
    """crop_image_cv2 with img_resolution (160, 704) on the 960x160 strip: start_y = 160 // 2
    - 160 // 2 = 0, start_x = 960 // 2 - 704 // 2 = 128, plus int(shift) (towards zero)."""
    strip = np.arange(160 * 960).reshape(160, 960)
    np.testing.assert_array_equal(crop(strip, 0.0), strip[:, 128:832])
    np.testing.assert_array_equal(crop(strip, 20 / 60 * 320), strip[:, 234:938])   # 106.67
    np.testing.assert_array_equal(crop(strip, -5.5), strip[:, 123:827])            # int(-5.5)
    tall = np.arange(200 * 960).reshape(200, 960)
    np.testing.assert_array_equal(crop(tall, 0.0), tall[20:180, 128:832])


def test_depth_is_min_of_metres_and_50_over_50():
    """get_depth: 24-bit code / (2^24 - 1) is metres / 1000, clipped at 0.05 and * 20: min(d,
    50) / 50, float64; from the float32 metres carla-wds decodes (code * 1000 / (2^24 - 1))."""
    codes = np.array([[0, 1, 12345, 838860, 838861, 2 ** 24 - 1]], np.float32)
    metres = codes * np.float32(1000.0 / (2 ** 24 - 1))
    got = depth01(metres)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got[0, :4], codes[0, :4].astype(np.float64) / (2 ** 24 - 1) * 20)
    assert got[0, 4] == got[0, 5] == 1.0
    np.testing.assert_allclose(depth01(np.array([[10.0, 25.0, 49.9, 300.0]], np.float32)),
                               [[0.2, 0.5, 0.998, 1.0]], atol=1e-6)


def test_target_point_image_is_their_circle():
    """draw_target_point: the point (x right, y back of the ego) at 8 px/m, the LiDAR 1.3 m
    ahead: pixel (col, row) = (128 + 8 x, 256 + 8 (y + 1.3)); a ring of radius 5 and
    thickness 3 around it (1 on the ring, 0 at its centre and far away)."""
    img = target_point_image(np.array([2.0, -20.0]))
    assert img.shape == (1, 256, 256) and img.dtype == np.float64
    col, row = 128 + 16, int(256 + 8 * (-20.0 + 1.3))          # (144, 106)
    assert img[0, row, col] == 0 and img[0, row, col + 5] == 1 and img[0, row - 5, col] == 1
    assert img[0, row, col + 9] == 0 and set(np.unique(img)) == {0.0, 1.0}
    ys, xs = np.nonzero(img[0])
    assert abs(xs.mean() - col) < 0.5 and abs(ys.mean() - row) < 0.5
    far = target_point_image(np.array([0.0, -200.0]))   # clipped to row 0: half a ring
    assert far[0, :7].any() and not far[0, 8:].any()


def _sample(rng: np.random.Generator) -> dict:
    box = np.full(len(BOX_COLUMNS), -1.0, np.float32)
    for name, v in {"class": 0, "x": 10.0, "y": 2.0, "extent_x": 2.0, "extent_y": 1.0,
                    "extent_z": 0.7, "yaw": 0.1, "speed": 3.0, "brake": 0.0, "num_points": 5,
                    "id": 7}.items():
        box[BOX_COLUMNS.index(name)] = v
    meas = {"steer": 0.1, "throttle": 0.5, "brake": False, "light_hazard": True, "theta": 0.2,
            "x_command": 100.0, "y_command": -30.0}
    return {"images": rng.integers(0, 256, (1, 160, 960, 3), dtype=np.uint8),
            "depth": np.full((1, 160, 960), 20.0, np.float32),
            "semantics": np.ones((1, 160, 960), np.uint8),
            "bev": np.zeros((15, 500, 500), np.uint8), "lidar": rng.normal(0, 5, (50, 4)),
            "lidar_len": 50, "boxes": box[None], "boxes_len": 1, "measurements": meas,
            "speed": 4.0, "target_point": np.array([3.0, -20.0], np.float32),
            "waypoints": np.array([[0.0, -1.0], [0.0, -2.0], [0.0, -3.0], [0.0, -4.0]]),
            "fields": {"ego2world": _pose(0.3, 120.5, -80.25)}}


def _pose(yaw: float, x: float, y: float) -> np.ndarray:
    """A vehicle pose (world <- vehicle) as CARLA's ego_matrix gives it, float64 4x4."""
    c, s = math.cos(yaw), math.sin(yaw)
    return np.array([[c, -s, 0, x], [s, c, 0, y], [0, 0, 1, 0.03], [0, 0, 0, 1]])


def test_rotation_augmentation_has_their_probability_and_range():
    """do_augment = random() > inv_augment_prob (0.1); degree uniform in +-aug_max_rotation (20);
    off without augment."""
    degrees = [draw_rotation(True, np.random.default_rng(i)) for i in range(2000)]
    rotated = [d for d in degrees if d != 0.0]
    assert 0.85 < len(rotated) / len(degrees) < 0.95
    assert max(abs(d) for d in rotated) <= 20 and min(rotated) < -18 and max(rotated) > 18
    assert all(draw_rotation(False, np.random.default_rng(i)) == 0.0 for i in range(50))


def test_a_rotated_sample_moves_every_label_as_theirs():
    """With augment, one rotation by rad moves waypoints and target point ([[c, s], [-s, c]]),
    the box yaw by -rad, shifts the crop by int(degree / 60 * 320) columns; the draw is a
    function of the sample's generator only."""
    s = _sample(np.random.default_rng(0))
    plain = tf2022_sample(None, s, np.random.default_rng(5))
    seed = next(i for i in range(50) if draw_rotation(True, np.random.default_rng(i)) != 0)
    degree = draw_rotation(True, np.random.default_rng(seed))
    rot = tf2022_sample(None, {**s, "augment": True}, np.random.default_rng(seed))
    again = tf2022_sample(None, {**s, "augment": True}, np.random.default_rng(seed))
    assert all(np.array_equal(rot[k], again[k]) for k in rot)
    rad = math.radians(degree)
    c, sn = math.cos(rad), math.sin(rad)
    x, y = s["target_point"].astype(np.float64)
    np.testing.assert_allclose(rot["target_point"], [c * x + sn * y, -sn * x + c * y])
    np.testing.assert_allclose(rot["ego_waypoint"][3], [-4 * sn, -4 * c], atol=1e-12)
    assert rot["label"][0, 4] == pytest.approx(plain["label"][0, 4] - rad, abs=1e-6)
    shift = int(degree / 60 * 320)
    np.testing.assert_array_equal(rot["rgb"], s["images"][0][:, 128 + shift:832 + shift]
                                  .transpose(2, 0, 1))
    assert not np.array_equal(rot["lidar"], plain["lidar"])


def test_tf2022_refuses_other_shards_in_one_line(tmp_path):
    plain = make_pack(tmp_path, layout="tcp", episodes=1, frames=12)
    with pytest.raises(ValueError) as exc:
        CARLAWebData(str(plain), batch_size=2, adapter="transfuser2022")
    msg = str(exc.value)
    assert "\n" not in msg and "layout 'tcp'" in msg
    assert "Fix: carla-wds pack RAW OUT --layout transfuser2022 --allow-pickle-input" in msg


def test_packs_without_x_and_y_command_are_refused(tmp_path):
    """Shards packed before the layout carried x_command / y_command (the layout as it was,
    packed by path) are refused in one line naming the fields and the pack command."""
    import carla_wds.pack.datasets.routes as routes
    yaml = Path(routes.__file__).parent / "layouts" / "transfuser2022.yaml"
    old = re.sub(r"  [xy]_command: \{key: [xy]_command, units: m\}\n", "", yaml.read_text())
    assert old != yaml.read_text()
    (tmp_path / "transfuser2022.yaml").write_text(old)
    synth_dataset(tmp_path / "raw", "transfuser2022", episodes=1, frames=12, seed=5,
                  image_size=(48, 64), progress=False)
    shards = tmp_path / "shards"
    pack(tmp_path / "raw", shards, PackOptions(layout=str(tmp_path / "transfuser2022.yaml"),
                                               allow_pickle_input=True, progress=False))
    with pytest.raises(ValueError) as exc:
        CARLAWebData(str(shards), batch_size=2, adapter="transfuser2022")
    msg = str(exc.value)
    assert "\n" not in msg and "lack the record fields ['x_command', 'y_command']" in msg
    assert "Fix: carla-wds pack RAW OUT --layout transfuser2022" in msg


@pytest.mark.parametrize("given", [{"image_size": (256, 900)}, {"fields": ["depth"]},
                                   {"lidar_histogram": "transfuser2022"}])
def test_the_name_alone_sets_the_settings(shards, given):
    with pytest.raises(ValueError, match="leave .* out"):
        CARLAWebData(str(shards), batch_size=2, adapter="transfuser2022", **given)


@pytest.mark.ddp
def test_a_model_with_their_contract_trains_under_torchrun(shards, tmp_path):
    """A small model reading the batch as TransFuser 2022's train.py does (tests/scripts/
    tf2022_contract_train.py) trains a few DDP steps on 2 ranks and validates: the contract
    holds in every batch, losses are finite (eval padding rows too), equal step and batch
    counts per rank, and eval sees every sample once."""
    run_script(str(SCRIPTS / "tf2022_contract_train.py"), str(shards), str(tmp_path))
    first, second = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    losses = first["train_losses"] + second["train_losses"]
    assert first["contract"] and all(first["contract"] + second["contract"])
    assert losses and all(map(math.isfinite, losses))
    assert len(first["train_losses"]) == len(second["train_losses"])
    assert first["val_batches"] == second["val_batches"]
    keys = first["val_keys"] + second["val_keys"]
    assert len(set(keys)) == len(keys) == 6   # every sample once, over both ranks


def _served(shards: Path, **kw) -> dict[str, dict[str, torch.Tensor]]:
    data = CARLAWebData(str(shards), batch_size=2, adapter="transfuser2022", **kw)
    data.set_epoch(3, global_step=10 ** 6)   # a colour augmenter's ramp would be at full
    return {k: {n: v[i] for n, v in b.items() if n != "key"} for b in data
            for i, k in enumerate(b["key"]) if k}


def test_augment_is_their_rotation_only(shards):
    """CARLAWebData(augment=True) in training: their rotation, seeded per (seed, epoch, key)
    (two runs equal), and no colour augmentation (theirs has none): each augmented rgb is the
    saved strip's crop at a whole-column shift, equal to the plain crop where not rotated."""
    plain, aug = _served(shards), _served(shards, augment=True)
    assert aug.keys() == plain.keys() and len(aug) == 6
    again = _served(shards, augment=True)
    assert all(torch.equal(aug[k][n], again[k][n]) for k in aug for n in aug[k])
    turned = [k for k in aug if not torch.equal(aug[k]["target_point"], plain[k]["target_point"])]
    assert 0 < len(turned)
    for k in aug:
        if k not in turned:
            assert torch.equal(aug[k]["rgb"], plain[k]["rgb"]), k
            continue
        tp, tp0 = aug[k]["target_point"], plain[k]["target_point"]
        rad = math.atan2(float(tp0[0] * tp[1] - tp0[1] * tp[0]), float(tp0 @ tp))
        shift = int(math.degrees(-rad) / 60 * 320)   # their degree: tp turned by -rad
        assert torch.equal(aug[k]["rgb"][:, :, max(0, -shift):704 - max(0, shift)],
                           plain[k]["rgb"][:, :, max(0, shift):704 + min(0, shift)]), k
