"""tcp_roach with NaN compass readings, and the convention of its future_x / future_y.

TCP's roach_ap_agent.save() json-dumps the IMU compass as `theta`, NaN when the sensor has no
reading. The formulas below are TCP's own, written here from OpenDriveLab/TCP@73cc1dd:
- tools/gen_data.py gen_single_route: full_seq_x = meas['y'], full_seq_y = meas['x'],
  full_seq_theta = meas['theta'] (no NaN rule); sample i in range(0, length - 4) gets
  input_* = full_seq_*[i:i+1] and future_* = full_seq_*[i+1:i+5].
- TCP/data.py CARLA_Data.__getitem__: if np.isnan(theta[index][0]) it becomes 0; waypoint k =
  R(pi/2 + theta).T @ [future_y[k] - ego_y, future_x[k] - ego_x] with ego_x = input_x. It never
  reads future_theta (a NaN there is carried unused; carla-wds stores 0, see the test).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from carla_wds.load import CARLAWebData
from carla_wds.pack.synth.roach import synth_dataset
from tests.conftest import IMAGE_SIZE, run_pack

FRAMES = 10
NAN_FRAMES = (3, FRAMES - 1)   # one in the middle, one only ever read as a future frame


def _raw(tmp_path: Path, nan_frames: tuple[int, ...] = NAN_FRAMES) -> tuple[Path, list[dict]]:
    raw = tmp_path / "raw"
    synth_dataset(raw, episodes=1, frames=FRAMES, image_size=IMAGE_SIZE, progress=False)
    meas_dir = next(raw.glob("*/*/measurements"))
    for t in nan_frames:
        path = meas_dir / f"{t:04d}.json"
        d = json.loads(path.read_text())
        d["theta"] = float("nan")   # json.dump writes NaN, as the agent's save() does
        path.write_text(json.dumps(d))
    return raw, [json.loads(p.read_text()) for p in sorted(meas_dir.glob("*.json"))]


def _tcp_sample(meas: list[dict], i: int) -> dict:
    """gen_data.py's packed entry for sample i, then data.py's waypoints from it."""
    full_x = [m["y"] for m in meas]          # gen_data.py: the swap
    full_y = [m["x"] for m in meas]
    full_theta = [m["theta"] for m in meas]
    ego_x, ego_y, theta = full_x[i], full_y[i], full_theta[i]
    if np.isnan(theta):                      # data.py: current theta only
        theta = 0.0
    a = np.pi / 2 + theta
    rot = np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
    fx, fy = full_x[i + 1:i + 5], full_y[i + 1:i + 5]
    wps = [rot.T.dot(np.array([fy[k] - ego_y, fx[k] - ego_x])) for k in range(4)]
    return {"future_x": fx, "future_y": fy, "future_theta": full_theta[i + 1:i + 5],
            "ego": (ego_x, ego_y, theta), "waypoints": np.array(wps)}


def _loaded(packed: Path) -> dict[int, dict]:
    data = CARLAWebData(str(packed), batch_size=4, mode="eval", image_size=(48, 64),
                        fields=["measurements"])
    out = {}
    for batch in data:
        for j, key in enumerate(batch.keys):
            if batch.valid[j]:
                m = {k: v[j].numpy() for k, v in batch.measurements.items()}
                out[int(key.rsplit("__", 1)[1])] = {**m, "waypoints": batch.waypoints[j].numpy()}
    return out


def test_nan_compass_packs_every_tcp_sample(tmp_path):
    raw, meas = _raw(tmp_path)
    manifest = run_pack(raw, tmp_path / "out", layout="tcp_roach", allow_pickle_input=True)
    assert manifest["skipped"] == []
    assert manifest["counts"]["nan_theta"] == len(NAN_FRAMES)   # frames read with theta 0
    got = _loaded(tmp_path / "out")
    assert sorted(got) == list(range(0, FRAMES - 4))             # gen_data's range
    for i, m in got.items():
        ref = _tcp_sample(meas, i)
        np.testing.assert_allclose(m["waypoints"], ref["waypoints"], rtol=0, atol=1e-4)
        # TCP carries a future NaN compass unused; the record holds 0 there (finite values only)
        want = [0.0 if math.isnan(v) else v for v in ref["future_theta"]]
        np.testing.assert_allclose(m["future_theta"], want, rtol=0, atol=1e-6)


def test_future_xy_follow_tcp_packed_data(tmp_path):
    """measurements["future_x"] is gen_data's future_x (the measurement's y), so TCP's own
    data.py formula on the record gives the pack's waypoints label."""
    raw, meas = _raw(tmp_path, nan_frames=())
    manifest = run_pack(raw, tmp_path / "out", layout="tcp_roach", allow_pickle_input=True)
    got = _loaded(tmp_path / "out")
    for i, m in got.items():
        ref = _tcp_sample(meas, i)
        np.testing.assert_allclose(m["future_x"], ref["future_x"], rtol=1e-6)
        np.testing.assert_allclose(m["future_y"], ref["future_y"], rtol=1e-6)
        ego_x, ego_y, theta = ref["ego"]
        a = np.pi / 2 + theta
        rot = np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
        wps = np.array([rot.T.dot([float(m["future_y"][k]) - ego_y,
                                   float(m["future_x"][k]) - ego_x]) for k in range(4)])
        np.testing.assert_allclose(wps, m["waypoints"], rtol=0, atol=1e-3)  # float32 storage
    fields = {f["name"]: f for f in _record_fields(manifest)}
    assert "gen_data" in fields["future_x"]["frame"] and "y" in fields["future_x"]["frame"]


def _record_fields(manifest: dict) -> list[dict]:
    for extra in manifest["spec"].get("extras", []):
        if extra["name"] == "measurements":
            return extra["fields"]
    raise AssertionError(f"no measurements record in {sorted(manifest['spec'])}")
