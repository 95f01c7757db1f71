"""Packed labels against an independent float64 reference of TCP's formulas (formats.md).

The reference is written out here from /work/shared/notes/formats.md on purpose; it does not call
carla_wds.pack.labels, so a mistake there cannot hide in both.
"""
from __future__ import annotations

import io
import json
import math
from pathlib import Path

import cv2
import numpy as np
import pytest

PRED_LEN = 4
# Our field -> measurement key, per layout (formats.md).
FIELDS = {
    "tcp": {"x": "x", "y": "y", "theta": "theta", "speed": "speed", "tx": "x_target",
            "ty": "y_target", "command": "target_command"},
    "transfuser4": {"x": "x", "y": "y", "theta": "theta", "speed": "speed", "tx": "x_command",
                    "ty": "y_command", "command": "command"},
}
LANEFOLLOW = 4


def reference(meas: list[dict], t: int, fields: dict[str, str], pred_len: int = PRED_LEN) -> dict:
    """formats.md: R = rot(pi/2 + theta), theta = 0 where NaN; waypoint i = R.T @ (p[t+i] - p[t]);
    target = R.T @ (target[t] - p[t]); VOID (< 0) -> LANEFOLLOW, one-hot index value - 1."""
    f = fields
    m = meas[t]
    theta = m[f["theta"]]
    theta = 0.0 if theta is None or math.isnan(theta) else float(theta)
    a = math.pi / 2 + theta
    rot = np.array([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]], dtype=np.float64)
    x0, y0 = float(m[f["x"]]), float(m[f["y"]])
    wps = np.array([rot.T @ np.array([meas[t + i][f["x"]] - x0, meas[t + i][f["y"]] - y0],
                                     dtype=np.float64) for i in range(1, pred_len + 1)])
    diff = wps.copy()
    diff[1:] -= wps[:-1]        # first row is measured from the ego origin
    target = rot.T @ np.array([m[f["tx"]] - x0, m[f["ty"]] - y0], dtype=np.float64)
    command = int(m[f["command"]])
    command = LANEFOLLOW if command < 0 else command
    onehot = np.zeros(6)
    onehot[command - 1] = 1.0
    return {"waypoints": wps, "waypoints_diff": diff, "target_point": target,
            "target_command": onehot, "speed": float(m[f["speed"]])}


def npy(data: bytes) -> np.ndarray:
    return np.load(io.BytesIO(data), allow_pickle=False)


def assert_f32_close(stored: np.ndarray, ref: np.ndarray, what: str) -> None:
    """Stored float32 equals the float64 reference up to float32 rounding."""
    assert stored.dtype == np.float32, what
    assert stored.shape == ref.shape, what
    np.testing.assert_allclose(stored.astype(np.float64), ref, rtol=2e-7, atol=1e-6, err_msg=what)


def load_measurements(raw: Path, episode: str) -> list[dict]:
    files = sorted((raw / episode / "measurements").glob("*.json"))
    return [json.loads(p.read_text()) for p in files]


def check_all_samples(raw: Path, samples: dict, layout: str) -> int:
    cache: dict[str, list[dict]] = {}
    for key, members in samples.items():
        meta = json.loads(members["meta.json"])
        episode, t = meta["episode"], meta["frame"]
        meas = cache.setdefault(episode, load_measurements(raw, episode))
        ref = reference(meas, t, FIELDS[layout])
        for name in ("waypoints", "waypoints_diff", "target_point", "target_command"):
            assert_f32_close(npy(members[f"{name}.npy"]), ref[name], f"{key} {name}")
        assert json.loads(members["speed.json"]) == ref["speed"], key
        assert meta["command"] == int(meas[t][FIELDS[layout]["command"]])
    return len(samples)


@pytest.mark.parametrize("layout", ["tcp", "transfuser4"])
def test_packed_labels_equal_reference(layout, request, samples_of):
    raw = request.getfixturevalue("raw_tcp" if layout == "tcp" else "raw_tf4")
    packed = request.getfixturevalue("packed_tcp" if layout == "tcp" else "packed_tf4")
    samples = samples_of(packed)
    assert check_all_samples(raw, samples, layout) == 78
    # The synthetic routes turn and stop: the labels are not trivially zero.
    wps = np.stack([npy(m["waypoints.npy"]) for m in samples.values()])
    assert np.abs(wps[..., 0]).max() > 0.5 and wps[..., 1].min() < -5.0


def _write_route(route: Path, meas: list[dict], folder: str = "rgb") -> None:
    (route / "measurements").mkdir(parents=True)
    (route / folder).mkdir()
    png = cv2.imencode(".png", np.full((8, 8, 3), 127, np.uint8))[1].tobytes()
    for t, m in enumerate(meas):
        (route / "measurements" / f"{t:04d}.json").write_text(json.dumps(m))
        (route / folder / f"{t:04d}.png").write_bytes(png)


def _tcp_meas(x, y, theta, tx, ty, command=4, speed=4.0) -> dict:
    return {"x": x, "y": y, "theta": theta, "speed": speed, "x_target": tx, "y_target": ty,
            "target_command": command}


def test_ego_frame_orientation_forward_is_minus_y(tmp_path, packer, samples_of):
    """formats.md: moving along (cos theta, sin theta) gives waypoints (0, -v); +x is the right."""
    theta, step = 0.3, 2.0
    heading = np.array([math.cos(theta), math.sin(theta)])
    right = np.array([math.cos(theta + math.pi / 2), math.sin(theta + math.pi / 2)])
    start = np.array([10.0, -5.0])
    meas = []
    for t in range(6):
        p = start + t * step * heading
        target = p + 10.0 * right
        meas.append(_tcp_meas(p[0], p[1], theta, target[0], target[1]))
    _write_route(tmp_path / "raw" / "Town01" / "r0", meas)
    packer(tmp_path / "raw", tmp_path / "out", layout="tcp")
    samples = list(samples_of(tmp_path / "out").values())
    assert len(samples) == 2
    wps = npy(samples[0]["waypoints.npy"])
    np.testing.assert_allclose(wps, [[0, -2], [0, -4], [0, -6], [0, -8]], atol=1e-5)
    np.testing.assert_allclose(npy(samples[0]["waypoints_diff.npy"]), [[0, -2]] * 4, atol=1e-5)
    np.testing.assert_allclose(npy(samples[0]["target_point.npy"]), [10, 0], atol=1e-5)


def test_nan_theta_becomes_zero_and_is_counted(tmp_path, packer, samples_of):
    rng = np.random.default_rng(3)
    meas = [_tcp_meas(float(t * 1.5), float(t * 0.7 + rng.normal()), 0.4, 30.0, 12.0, speed=3.0)
            for t in range(8)]
    meas[1]["theta"] = float("nan")      # json writes NaN, which CARLA's Python json also does
    meas[2]["theta"] = None              # null: also "no heading"
    _write_route(tmp_path / "raw" / "Town01" / "r0", meas)
    manifest = packer(tmp_path / "raw", tmp_path / "out", layout="tcp")
    assert manifest["counts"]["nan_theta"] == 2
    assert manifest["skipped"] == []
    samples = samples_of(tmp_path / "out")
    assert check_all_samples(tmp_path / "raw", samples, "tcp") == 4
    by_frame = {json.loads(m["meta.json"])["frame"]: m for m in samples.values()}
    zero = reference([{**m, "theta": 0.0} for m in meas], 1, FIELDS["tcp"])
    assert_f32_close(npy(by_frame[1]["waypoints.npy"]), zero["waypoints"], "theta 0")
    assert np.isfinite(npy(by_frame[2]["target_point.npy"])).all()


def test_void_command_becomes_lanefollow_and_is_counted(tmp_path, packer, samples_of):
    meas = [_tcp_meas(float(t), 0.0, 0.0, 20.0, 3.0, command=[1, -1, 2, -3, 5, 6, 3, 4][t])
            for t in range(8)]
    _write_route(tmp_path / "raw" / "Town01" / "r0", meas)
    manifest = packer(tmp_path / "raw", tmp_path / "out", layout="tcp")
    assert manifest["counts"]["void_command"] == 2
    onehots = {json.loads(m["meta.json"])["frame"]: npy(m["target_command.npy"])
               for m in samples_of(tmp_path / "out").values()}
    assert [int(np.argmax(onehots[t])) + 1 for t in range(4)] == [1, LANEFOLLOW, 2, LANEFOLLOW]
    assert all(v.sum() == 1 for v in onehots.values())


def test_labels_module_agrees_with_reference():
    """carla_wds.pack.labels.frame_labels on random inputs, against the inline reference."""
    from carla_wds.pack.labels import frame_labels
    rng = np.random.default_rng(7)
    for _ in range(50):
        xy = rng.normal(0, 30, (PRED_LEN + 1, 2))
        theta = float(rng.uniform(-math.pi, math.pi))
        target = rng.normal(0, 30, 2)
        command = int(rng.choice([-1, 1, 2, 3, 4, 5, 6]))
        meas = [{"x": p[0], "y": p[1], "theta": theta, "speed": 1.0, "tx": target[0],
                 "ty": target[1], "command": command} for p in xy]
        ref = reference(meas, 0, {k: k for k in ("x", "y", "theta", "speed", "tx", "ty",
                                                  "command")})
        got = frame_labels(xy, theta, target, command, PRED_LEN)
        for name in ("waypoints", "waypoints_diff", "target_point", "target_command"):
            assert_f32_close(got[name], ref[name], name)
