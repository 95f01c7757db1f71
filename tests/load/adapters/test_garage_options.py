"""adapter=garage_adapter(config): carla_garage's GlobalConfig (or a dict of its fields)
changes the batch as their loader does (autonomousvision/carla_garage@1448bed team_code/data.py
__getitem__ and get_indices_speed_angle), and a value the adapter does not implement is refused
in one line, before any loader is built.

The expected values are written here from their formulas, against adapter="garage"'s batch of
the same samples and the raw measurements (a plain transform of the same shards): no helper of
the adapter computes them.
"""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from carla_wds.load import CARLAWebData
from carla_wds.load.adapters import garage_adapter
from carla_wds.load.adapters.garage_model import GARAGE
from carla_wds.load.adapters.garage_options import FIXED
from tools.golden.garage_batches import add_signals

from .batch_goldens import read_golden, shared_golden_shards

GOLDEN = Path(__file__).parents[2] / "golden" / "garage_batches.npz"
ANGLE_BINS = [-0.02, 0.0, 0.02]                 # 4 steering classes


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> Path:
    meta, _ = read_golden(GOLDEN)
    return shared_golden_shards(tmp_path_factory, meta, add_signals, max_samples=4)


def raw_labels(sample: dict, rng: np.random.Generator) -> dict:
    """The measurements their get_indices_speed_angle reads, as saved."""
    m = sample["measurements"]
    return {"target_speed": float(m["target_speed"]), "brake": bool(m["brake"]),
            "angle": float(m["angle"])}


def rows(data: CARLAWebData) -> dict[str, dict[str, np.ndarray]]:
    """key -> batch key -> that sample's row, over one pass."""
    out: dict[str, dict[str, np.ndarray]] = {}
    for batch in data:
        for i, key in enumerate(batch["key"]):
            if batch["valid"][i]:
                out[key] = {k: v[i].numpy() for k, v in batch.items() if k != "key"}
    return out


def serve(shards: Path, adapter: str, **kw) -> dict[str, dict[str, np.ndarray]]:
    return rows(CARLAWebData(str(shards), batch_size=4, mode=kw.pop("mode", "eval"),
                             adapter=adapter, **kw))


@pytest.fixture(scope="module")
def base(shards) -> dict[str, dict[str, np.ndarray]]:
    return serve(shards, "garage")


@pytest.fixture(scope="module")
def measured(shards) -> dict[str, dict[str, np.ndarray]]:
    return rows(CARLAWebData(str(shards), batch_size=4, mode="eval", fields=["measurements"],
                             adapter=raw_labels))


def test_no_config_and_their_defaults_with_wp_gru_are_the_plain_adapter():
    assert garage_adapter(None) == "garage"
    assert garage_adapter({"use_wp_gru": True}) == "garage"
    assert garage_adapter(SimpleNamespace(use_wp_gru=True, max_num_bbs=30)) == "garage"


def test_an_object_and_a_dict_of_its_fields_are_the_same_adapter():
    fields = {"max_num_bbs": 12, "target_speed_bins": [1.0, 3.0, 6.0, 9.0, 12.0],
              "target_speeds": [0.0, 1, 2, 3, 4, 5], "use_wp_gru": False, "lr": 1e-4,
              "lidar_seq_len": 1, "use_plant": False}   # lr: a field no batch depends on
    name = garage_adapter(fields)
    assert name == garage_adapter(SimpleNamespace(**fields)) != "garage"
    assert "max_num_bbs=12" in name


def test_max_num_bbs_pads_and_cuts_bounding_boxes_only(shards, base):
    """bounding_boxes: zeros (max_num_bbs, 8), the first min(n, max_num_bbs) kept boxes in
    their order; the CenterNet targets are of every kept box, so they do not change."""
    counts = {k: int(np.any(r["bounding_boxes"] != 0, axis=1).sum()) for k, r in base.items()}
    assert max(counts.values()) >= 2, "these samples need 2 boxes or more to cut"
    for cap in (1, 40):
        got = serve(shards, garage_adapter({"max_num_bbs": cap, "use_wp_gru": True}))
        assert sorted(got) == sorted(base)
        for key, row in got.items():
            want = np.zeros((cap, 8), np.float32)
            n = min(counts[key], cap)
            want[:n] = base[key]["bounding_boxes"][:n]
            np.testing.assert_array_equal(row["bounding_boxes"], want, err_msg=key)
            for name in base[key]:
                if name != "bounding_boxes":
                    np.testing.assert_array_equal(row[name], base[key][name], err_msg=name)


# these samples all drive at 8 m/s: the bins put it in class 5 (a bin equal to the speed
# counts as passed, numpy.digitize's right=False) and in class 1
@pytest.mark.parametrize("speed_bins, cls", [([1.0, 3.0, 6.0, 8.0, 12.0], 5), ([8.5, 9.0], 1)])
def test_speed_and_angle_bins_and_wp_gru_off(shards, base, measured, speed_bins, cls):
    """target_speed: 0 when braking, else 1 + the number of bins <= the target speed;
    angle_index: the number of angle bins <= the angle; no ego_waypoints without use_wp_gru."""
    config = SimpleNamespace(target_speed_bins=speed_bins,
                             target_speeds=list(range(len(speed_bins) + 1)),
                             angle_bins=ANGLE_BINS, angles=[-0.5, -0.1, 0.1, 0.5],
                             use_wp_gru=False)
    data = CARLAWebData(str(shards), batch_size=4, mode="eval", adapter=garage_adapter(config))
    got = rows(data)
    assert data.adapter.extra_keys == ("valid", "key")
    assert sorted(got) == sorted(base) == sorted(measured)
    speeds, angles = set(), set()
    for key, row in got.items():
        m = measured[key]
        speed = 0 if m["brake"] else 1 + sum(b <= m["target_speed"] for b in speed_bins)
        angle = sum(b <= m["angle"] for b in ANGLE_BINS)
        assert int(row["target_speed"]) == speed and int(row["angle_index"]) == angle, key
        speeds.add(speed)
        angles.add(angle)
        assert set(row) == set(base[key]) - {"ego_waypoints"}
        for name in set(row) - {"target_speed", "angle_index"}:
            np.testing.assert_array_equal(row[name], base[key][name], err_msg=name)
    assert speeds == {cls} and len(angles) > 1, (speeds, angles)


def test_wp_gru_off_leaves_ego_waypoints_out_of_the_keys(shards):
    batch = next(iter(CARLAWebData(str(shards), batch_size=2, mode="eval",
                                   adapter=garage_adapter({}))))
    keys = list(batch)
    assert "ego_waypoints" not in keys and keys[-2:] == ["valid", "key"]
    assert keys[keys.index("avg_factor") + 1] == "brake"   # their order, without the key


def _train(shards: Path, config: dict, augment: bool = True) -> dict[str, dict]:
    return serve(shards, garage_adapter({"use_wp_gru": True, **config}), mode="train",
                 augment=augment, seed=3)


def test_augmentation_fields(shards):
    """use_color_aug=0 or color_aug_prob=0: the saved pixels under augment=True; augment=0:
    no twin (labels as without augment); augment_percentage=1: every sample is the twin's."""
    plain = _train(shards, {}, augment=False)
    for config in ({"use_color_aug": 0, "augment": 0}, {"color_aug_prob": 0.0, "augment": 0}):
        got = _train(shards, config)
        assert sorted(got) == sorted(plain)
        for key, row in got.items():
            for name in ("rgb", "target_point", "route"):
                np.testing.assert_array_equal(row[name], plain[key][name], err_msg=name)
    every = _train(shards, {"augment_percentage": 1.0, "use_color_aug": 0})
    assert all(not np.allclose(every[k]["target_point"], plain[k]["target_point"])
               for k in plain)


def _other(value):
    """A value unlike carla_garage's default."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, tuple):
        return list(value)[::-1]
    return value + 1


@pytest.mark.parametrize("name", sorted(FIXED))
def test_every_unimplemented_field_is_refused_in_one_line(name):
    value = _other(FIXED[name])
    for config in ({name: value}, SimpleNamespace(**{name: value})):
        with pytest.raises(ValueError) as exc:
            garage_adapter(config)
        msg = str(exc.value)
        assert "\n" not in msg and f"{name}={value!r}" in msg and "not implemented" in msg
        assert "implemented: max_num_bbs, target_speed_bins" in msg and "Fix:" in msg


@pytest.mark.parametrize("config, words", [
    ({"use_plant": True}, "use_plant=True"),
    ({"lidar_seq_len": 2}, "lidar_seq_len=2"),
    ({"max_num_bbs": -1}, "max_num_bbs=-1: expected a whole number"),
    ({"max_num_bbs": 2.5}, "max_num_bbs=2.5"),
    ({"target_speed_bins": [5.0, 2.0]}, "strictly increasing"),
    ({"target_speed_bins": [2.0, 5.0], "target_speeds": [0, 2, 5, 8]}, "expected 3 entries"),
    ({"angle_bins": [0.0], "angles": [0, 1, 2]}, "angles=[0, 1, 2]: expected 2 entries"),
    ({"target_speed_fast": 10.0}, "give target_speed_bins too"),
    ({"use_wp_gru": "yes"}, "use_wp_gru='yes': expected a bool"),
    ({"augment_percentage": 1.5}, "expected a probability"),
    ({"max_num_bb": 40}, "did you mean 'max_num_bbs'"),
])
def test_bad_values_are_refused_in_one_line(config, words):
    with pytest.raises(ValueError) as exc:
        garage_adapter(config)
    assert "\n" not in str(exc.value) and words in str(exc.value)


def test_not_a_config_is_refused():
    with pytest.raises(TypeError, match="expected carla_garage's GlobalConfig or a dict"):
        garage_adapter("garage")


def test_the_plain_adapter_keeps_its_settings():
    """adapter="garage" itself: their defaults with use_wp_gru on (its goldens)."""
    o = GARAGE.options
    assert (o.max_num_bbs, o.target_speed_bins, o.use_wp_gru) == (30, (2.1, 5.1, 8.1), True)
    assert GARAGE.augment_load_adapters == (("garage_camera_twin", 0.5),)
