"""The tcp_roach layout end to end: TCP routes with pickled Roach supervision, packed only with
--allow-pickle-input into shards without a pickle, loaded with fields=["measurements"], the
values equal to the supervision files and the labels to TCP's own formula (tests/reference.py),
TCP's brake override applied at load time and switchable."""
from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest

from carla_wds.load import CARLAWebData
from carla_wds.pack.errors import PackError
from tests import reference
from tests.conftest import make_raw, read_pack, run_pack

FRAMES = 12


def _write_supervision(raw: Path, seed: int = 0) -> None:
    """TCP's roach_ap_agent.save(): np.save of a dict, i.e. a pickled 0-d object array."""
    rng = np.random.default_rng(seed)
    for meas_dir in sorted(raw.glob("*/*/measurements")):
        sup = meas_dir.parent / "supervision"
        sup.mkdir()
        for f in sorted(meas_dir.glob("*.json")):
            d = {"action": rng.uniform(0, 1, 3).astype(np.float32),
                 "value": np.float32(rng.normal()),
                 "action_mu": rng.uniform(1, 5, 2).astype(np.float32),
                 "action_sigma": rng.uniform(1, 5, 2).astype(np.float32),
                 "features": rng.normal(size=256).astype(np.float32),
                 "speed": float(rng.uniform(0, 8)),
                 "target_gps": rng.normal(size=3).astype(np.float32),
                 "target_command": np.array([4], np.int8),
                 "should_brake": False, "only_ap_brake": bool(rng.random() < 0.4)}
            np.save(sup / f"{f.stem}.npy", d, allow_pickle=True)


@pytest.fixture(scope="module")
def raw_roach(tmp_path_factory) -> Path:
    raw = make_raw(tmp_path_factory.mktemp("raw_roach"), "tcp", episodes=2, frames=FRAMES)
    _write_supervision(raw)
    return raw


@pytest.fixture(scope="module")
def packed_roach(raw_roach, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("packed_roach") / "shards"
    run_pack(raw_roach, out, layout="tcp_roach", allow_pickle_input=True, max_samples=5)
    return out


def test_pickled_supervision_is_refused_without_the_flag(raw_roach, tmp_path):
    out = tmp_path / "shards"
    with pytest.raises(PackError) as err:
        run_pack(raw_roach, out, layout="tcp_roach")
    msg = str(err.value)
    assert "supervision/0000.npy" in msg and "--allow-pickle-input" in msg
    assert not out.exists()   # a rejected command leaves nothing behind


def test_shards_hold_no_pickle(packed_roach):
    samples = read_pack(packed_roach)
    assert samples
    for members in samples.values():
        assert "measurements.npy" in members
        for name, data in members.items():
            assert name.rsplit(".", 1)[-1] not in ("pkl", "pickle", "pth", "pt", "pyd")
            if name.endswith("npy"):   # every array loads without pickle
                np.load(io.BytesIO(data), allow_pickle=False)


def _supervision(raw: Path, episode: str, frame: int) -> dict:
    # the test reads its own trusted synthetic pickles, as TCP's loader does
    return np.load(raw / episode / "supervision" / f"{frame:04d}.npy", allow_pickle=True).item()


def _measurements(raw: Path, episode: str) -> list[dict]:
    return [json.loads(p.read_text())
            for p in sorted((raw / episode / "measurements").glob("*.json"))]


def _loaded(packed: Path, **kw) -> dict:
    data = CARLAWebData(str(packed), batch_size=4, mode="eval", image_size=(48, 64),
                        fields=["measurements"], **kw)
    out = {}
    for batch in data:
        for i, key in enumerate(batch.keys):
            if batch.valid[i]:
                out[key] = (batch, i)
    return out


def test_values_labels_and_brake_override(raw_roach, packed_roach):
    manifest = json.loads((packed_roach / "manifest.json").read_text())
    assert manifest["spec"]["transforms"] == ["tcp_brake_override"]
    assert manifest["pred_len"] == 4 and manifest["spec"]["rate_hz"] == 2.0
    on, off = _loaded(packed_roach), _loaded(packed_roach, brake_override=False)
    assert set(on) == set(off) and len(on) == manifest["total_samples"] == 2 * (FRAMES - 4)
    overridden = 0
    for key, (batch, i) in on.items():
        episode = key.rsplit("__", 1)[0].replace("__", "/")
        t = int(key.rsplit("__", 1)[1])
        m = {k: v[i].numpy() for k, v in batch.measurements.items()}
        raw_m = {k: v[off[key][1]].numpy() for k, v in off[key][0].measurements.items()}
        sup = _supervision(raw_roach, episode, t)
        futures = [_supervision(raw_roach, episode, t + k) for k in range(1, 5)]
        np.testing.assert_array_equal(raw_m["action_mu"], sup["action_mu"])
        np.testing.assert_array_equal(m["feature"], sup["features"])
        np.testing.assert_array_equal(m["future_feature"], [f["features"] for f in futures])
        assert bool(m["only_ap_brake"]) == sup["only_ap_brake"]
        mu, sigma = reference.tcp_brake_override(sup["action_mu"], sup["action_sigma"],
                                                 sup["only_ap_brake"])
        np.testing.assert_allclose(m["action_mu"], mu, rtol=0, atol=1e-6)
        np.testing.assert_allclose(m["action_sigma"], sigma, rtol=0, atol=1e-6)
        fmu, _ = reference.tcp_brake_override([f["action_mu"] for f in futures],
                                              [f["action_sigma"] for f in futures],
                                              [f["only_ap_brake"] for f in futures])
        np.testing.assert_allclose(m["future_action_mu"], np.stack(fmu), rtol=0, atol=1e-6)
        overridden += sup["only_ap_brake"]
        ref = reference.tcp_labels(_measurements(raw_roach, episode), t)
        np.testing.assert_allclose(batch.waypoints[i].numpy(), ref["waypoints"], atol=1e-4)
        np.testing.assert_allclose(batch.target_point[i].numpy(), ref["target_point"], atol=1e-4)
    assert overridden > 0   # the override was exercised


def test_default_fields_decode_no_measurements(packed_roach):
    data = CARLAWebData(str(packed_roach), batch_size=4, mode="eval", image_size=(48, 64))
    batch = next(iter(data))
    assert batch.measurements is None and batch.images.shape[1] == 1


def test_unknown_field_is_refused_with_the_valid_ones(packed_roach):
    with pytest.raises(ValueError, match="measurements"):
        CARLAWebData(str(packed_roach), batch_size=4, fields=["lidar"])
