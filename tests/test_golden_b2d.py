"""carla-wds `--layout bench2drive` against Bench2DriveZoo's TCP port, run unmodified
(tests/golden/bench2drive_tcp.json, made by tools/golden/make_golden.py --project bench2drive_tcp:
tools/gen_tcp_data.py + TCP/data.py CARLA_Data of Thinklab-SJTU/Bench2DriveZoo@31278ff, branch
tcp/admlp, on clip folders written by carla-wds's synth).

The same clips are synthesised again (their hash must equal the recorded one), packed with
`--layout bench2drive` and loaded. The port serves every 10 Hz frame of its range (frames
0 .. n - 27 of a clip) and reads expert file t for frame t; so the pack that must equal it is
`--stride 1 --expert-pairing tcp_port`. The default pack (2 Hz keyframes, prepare_B2D's expert
file t - 1) must serve the port's frames t % 5 == 0, with the port's expert labels of frame t - 1.
No network, no project code: only the committed JSON and carla-wds's synth.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from carla_wds.load import CARLAWebData
from carla_wds.pack import PackOptions, pack
from carla_wds.pack.synth import synth_dataset
from tools.golden.common import f32_digest, tree_sha256

GOLDEN = Path(__file__).parent / "golden" / "bench2drive_tcp.json"
ATOL = 2e-5    # labels computed in float64 by the port and in float32 by carla-wds
# the pack options of each comparison: the port's conventions, and carla-wds's defaults
PACKS = {"port": {"stride": 1, "expert_pairing": "tcp_port"}, "default": {}}


def _golden() -> dict:
    return json.loads(GOLDEN.read_text())


def _theirs() -> dict[tuple[str, int], dict]:
    return {(s["route"], s["frame"]): s for s in _golden()["samples"]}


def synth_checked(golden: Path, out: Path) -> Path:
    """The clips a golden file was made from, written again under out (their hash checked)."""
    doc = json.loads(golden.read_text())
    synth = doc["synth"]
    synth_dataset(out, synth["layout"], episodes=synth["episodes"], frames=synth["frames"],
                  seed=synth["seed"], image_size=tuple(synth["image_size"]), progress=False)
    assert tree_sha256(out) == doc["raw_sha256"], (
        f"carla-wds's synth no longer writes the clips {golden} was made from; regenerate it: "
        f"{doc['regenerate']}")
    return out


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> Path:
    return synth_checked(GOLDEN, tmp_path_factory.mktemp("golden_b2d") / "raw")


def _served(batch, i: int) -> dict:
    """One sample's labels, named as in the golden file (the port's names)."""
    m = {k: v[i].numpy() for k, v in batch.measurements.items()}
    feature = batch.fields["expert_feature"][i].numpy()
    future = batch.fields["future_expert_feature"][i].numpy()
    return {"waypoints": batch.waypoints[i].numpy(), "target_point": batch.target_point[i].numpy(),
            "command": int(np.argmax(batch.command[i].numpy())), "speed": float(batch.speed[i]),
            "action": np.array([m["action_throttle"], m["action_steer"], m["action_brake"]]),
            "action_index": int(m["expert_action"]), "value": float(m["expert_value"]),
            "feature_len": int(feature.size), "feature_sha256": f32_digest(feature),
            "future_action_index": [int(a) for a in m["future_expert_action"]],
            "future_feature_sha256": f32_digest(future)}


_CACHE: dict[str, dict] = {}


def _packed(name: str, raw: Path) -> dict[tuple[str, int], dict]:
    """(clip, frame) -> served labels of the clips packed with PACKS[name] (cached)."""
    if name in _CACHE:
        return _CACHE[name]
    out = raw.parent / f"shards_{name}"
    pack(raw / "v1", out, PackOptions.of(layout="bench2drive", progress=False, sensors=("expert",),
                                      **PACKS[name]))
    data = CARLAWebData(str(out), batch_size=8, mode="eval",
                        image_size=tuple(_golden()["synth"]["image_size"]),
                        fields=["measurements", "expert_feature", "future_expert_feature"])
    served = {}
    for batch in data:
        assert not batch.errors, batch.errors
        for i, key in enumerate(batch.keys):
            if batch.valid[i]:      # eval mode pads the last batch with invalid rows
                clip, frame = key.rsplit("__", 1)
                served[(clip, int(frame))] = _served(batch, i)
    _CACHE[name] = served
    return served


def _same(got, want, label: str, where) -> None:
    if isinstance(want, (str, int)) and not isinstance(want, float):
        assert got == want, f"{label} at {where}: {got} != {want}"
        return
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, f"{label} at {where}: shape {got.shape} != {want.shape}"
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=ATOL, err_msg=f"{label} at {where}")


def test_port_pack_serves_the_port_sample_set(raw):
    ours, theirs = set(_packed("port", raw)), set(_theirs())
    assert ours == theirs, (f"only carla-wds: {sorted(ours - theirs)}; "
                            f"only the port: {sorted(theirs - ours)}")


def test_default_pack_serves_the_port_keyframes(raw):
    """--stride 5 (the default, B2D's 2 Hz): the port's frames that are keyframes, no others."""
    ours = set(_packed("default", raw))
    want = {k for k in _theirs() if k[1] % 5 == 0}
    assert ours == want, (f"only carla-wds: {sorted(ours - want)}; "
                          f"only the port: {sorted(want - ours)}")


CORE = ["waypoints", "target_point", "command"]
EXPERT = ["action", "action_index", "value", "feature_len", "feature_sha256",
          "future_action_index", "future_feature_sha256"]


@pytest.mark.parametrize("label", CORE + ["speed"] + EXPERT)
def test_port_pack_label_equals_the_port(label, raw):
    ours, theirs = _packed("port", raw), _theirs()
    compared = 0
    for where in sorted(set(ours) & set(theirs)):
        want = theirs[where][label]
        if label == "speed" and want is None:   # `speed: null`: the port serves None
            continue                            # (test_null_speed_is_the_ego_s_motion)
        _same(ours[where][label], want, label, where)
        compared += 1
    assert compared >= len(theirs) - 1


@pytest.mark.parametrize("label", CORE)
def test_default_pack_core_label_equals_the_port(label, raw):
    ours, theirs = _packed("default", raw), _theirs()
    for where in sorted(ours):
        _same(ours[where][label], theirs[where][label], label, where)


@pytest.mark.parametrize("label", EXPERT)
def test_default_pack_expert_is_the_ports_of_the_frame_before(label, raw):
    """prepare_B2D's pairing (the default): frame t carries expert file t - 1, which the port
    serves for frame t - 1 (frame 0's file -0001 the port never reads)."""
    ours, theirs = _packed("default", raw), _theirs()
    compared = 0
    for (clip, frame), got in sorted(ours.items()):
        if (clip, frame - 1) in theirs:
            _same(got[label], theirs[(clip, frame - 1)][label], label, (clip, frame))
            compared += 1
    assert compared >= len(ours) - _golden()["synth"]["episodes"]


def test_null_speed_is_the_ego_s_motion(raw):
    """Deliberate: the port serves the anno's `speed: null` as None (its batch cannot collate
    it); carla-wds serves |p[t+1] - p[t-1]| / 0.2 s and counts the frame (null_speed)."""
    nulls = [k for k, s in _theirs().items() if s["speed"] is None]
    assert nulls, "the golden clips should hold a `speed: null` frame"
    ours = _packed("port", raw)
    for where in nulls:
        assert math.isfinite(ours[where]["speed"]) and ours[where]["speed"] >= 0, where


def test_port_future_expert_labels_are_served(raw):
    """The port trains on future_feature and future_action_index (expert files t+5 .. t+20;
    their values: test_port_pack_label_equals_the_port)."""
    sample = next(iter(_packed("port", raw).values()))
    assert "future_feature_sha256" in sample and "future_action_index" in sample


def test_golden_file_records_its_provenance():
    doc = _golden()
    assert len(doc["commit"]) == 40 and doc["files"] and doc["samples"]
    assert GOLDEN.stat().st_size < 200_000
