"""carla-wds `--layout bench2drive --handedness right` against Bench2DriveZoo's prepare_B2D.py,
run unmodified (tests/golden/bench2drive_prepare.json, made by tools/golden/make_golden.py
--project bench2drive_prepare: mmcv/datasets/prepare_B2D.py `preprocess` of
Thinklab-SJTU/Bench2DriveZoo@10a2e5d, branch uniad/vad, with its defaults, on clip folders
written by carla-wds's synth): the per-frame info VAD and UniAD train on.

prepare_B2D keeps every frame that has a box; carla-wds packs the frames with a full 2 s future
(--all-frames --stride 1 here), so the frames compared are carla-wds's, each of which prepare
keeps. Per frame: the expert's controls (frame - 1), speed, acceleration, rotation rate,
commands and command points, and the boxes prepare keeps (ids, type_id, centre, size, speed,
LiDAR points). No network, no project code: only the committed JSON and carla-wds's synth.
"""
from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import numpy as np
import pytest

from carla_wds.boxes import BOX_CLASSES
from carla_wds.pack.datasets.bench2drive.vocab import B2D_BOX_COLUMNS, B2D_TYPE_IDS
from carla_wds.load import CARLAWebData
from carla_wds.pack import PackOptions, pack
from tests.test_golden_b2d import synth_checked

GOLDEN = Path(__file__).parent / "golden" / "bench2drive_prepare.json"
ATOL = 2e-4    # metres and m/s: prepare in float64 through 4x4 matrices, carla-wds in float32
COL = {name: i for i, name in enumerate(B2D_BOX_COLUMNS)}


def _golden() -> dict:
    return json.loads(GOLDEN.read_text())


@pytest.fixture(scope="module")
def pairs(tmp_path_factory) -> list[tuple[dict, dict]]:
    """(prepare's frame, carla-wds's sample) for every frame carla-wds packs."""
    doc = _golden()
    synth = doc["synth"]
    raw = synth_checked(GOLDEN, tmp_path_factory.mktemp("golden_b2d_prepare") / "raw")
    out = raw.parent / "shards"
    pack(raw / "v1", out, PackOptions.of(layout="bench2drive", progress=False, stride=1,
                                      all_frames=True, handedness="right",
                                      sensors=("boxes", "expert")))
    theirs = {(s["route"], s["frame"]): s for s in doc["samples"]}
    found = []
    for batch in CARLAWebData(str(out), batch_size=8, mode="eval",
                              image_size=tuple(synth["image_size"]),
                              fields=["measurements", "boxes"]):
        assert not batch.errors, batch.errors
        for i, key in enumerate(batch.keys):
            if batch.valid[i]:
                clip, frame = key.rsplit("__", 1)
                n = int(batch.extras["boxes_len"][i]) if "boxes_len" in (batch.extras or {}) \
                    else batch.boxes.shape[1]
                ours = {k: v[i].numpy() for k, v in batch.measurements.items()}
                ours["boxes"] = batch.boxes[i][:n].numpy()
                anno = raw / "v1" / clip / "anno" / f"{int(frame):05d}.json.gz"
                ours["nan_compass"] = math.isnan(json.loads(gzip.decompress(
                    anno.read_bytes()))["theta"])
                found.append((theirs[(clip, int(frame))], ours))
    assert len(found) >= synth["episodes"] * 8
    return found


def _close(got, want, what: str, where) -> None:
    np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64),
                               rtol=1e-5, atol=ATOL, err_msg=f"{what} at {where}")


def _where(s: dict) -> tuple[str, int]:
    return s["route"], s["frame"]


def test_expert_controls_of_the_frame_before(pairs):
    for theirs, ours in pairs:
        got = [ours["action_throttle"], ours["action_steer"], ours["action_brake"]]
        _close(got, [theirs["throttle"], theirs["steer"], theirs["brake"]], "controls",
               _where(theirs))


def test_ego_state(pairs):
    for theirs, ours in pairs:
        if theirs["speed"] is not None:   # `speed: null`: prepare keeps None (test_golden_b2d)
            _close(ours["speed"], theirs["speed"], "speed", _where(theirs))
        _close(ours["acceleration"], theirs["ego_accel"], "acceleration", _where(theirs))
        _close(ours["angular_velocity"], theirs["ego_rotation_rate"], "angular_velocity",
               _where(theirs))


def test_commands(pairs):
    for theirs, ours in pairs:
        assert int(ours["command_far"]) == theirs["command_far"], _where(theirs)
        assert int(ours["command_near"]) == theirs["command_near"], _where(theirs)


def _command_points(pairs, nan_compass: bool) -> None:
    compared = [(t, o) for t, o in pairs if o["nan_compass"] == nan_compass]
    assert compared
    for theirs, ours in compared:
        yaw = theirs["ego_yaw"]   # prepare's right-handed world -> its ego frame, written here
        rot = np.array([[math.cos(yaw), math.sin(yaw)], [-math.sin(yaw), math.cos(yaw)]])
        origin = np.array(theirs["ego_translation"][:2])
        for w in ("far", "near"):
            want = rot @ (np.array(theirs[f"command_{w}_xy"]) - origin)
            _close(ours[f"target_{w}"], want, f"target_{w}", _where(theirs))


def test_command_points(pairs):
    _command_points(pairs, nan_compass=False)


@pytest.mark.xfail(strict=True, reason="a NaN compass: prepare_B2D takes theta = pi "
                   "(np.nan_to_num(theta, nan=np.pi)), carla-wds the TCP port's theta = 0 for "
                   "every label; the ego frame of such a frame is turned by 180 degrees")
def test_command_points_at_a_nan_compass(pairs):
    _command_points(pairs, nan_compass=True)


def _by_id(boxes: np.ndarray) -> dict[int, np.ndarray]:
    others = boxes[boxes[:, COL["class"]] != BOX_CLASSES["ego"]]
    return {int(row[COL["id"]]): row for row in others}


def test_box_set_and_type_ids(pairs):
    for theirs, ours in pairs:
        rows = _by_id(ours["boxes"])
        assert sorted(rows) == [b["id"] for b in theirs["boxes"]], _where(theirs)
        for b in theirs["boxes"]:
            name = B2D_TYPE_IDS[int(rows[b["id"]][COL["type_id"]])]
            assert name == b["type_id"], (_where(theirs), b["id"])


def test_box_values(pairs):
    for theirs, ours in pairs:
        rows = _by_id(ours["boxes"])
        for b in theirs["boxes"]:
            row, where = rows[b["id"]], (_where(theirs), b["id"])
            _close(row[[COL["x"], COL["y"], COL["z"]]], b["centre"], "centre", where)
            size = 2 * row[[COL["extent_y"], COL["extent_x"], COL["extent_z"]]]   # wlh
            _close(size, b["size_wlh"], "size", where)
            _close(math.hypot(row[COL["vx"]], row[COL["vy"]]), b["speed"], "speed", where)
            assert int(row[COL["num_points"]]) == b["num_points"], where


def test_golden_file_records_its_provenance():
    doc = _golden()
    assert len(doc["commit"]) == 40 and doc["files"] and doc["samples"]
    assert GOLDEN.stat().st_size < 200_000
