"""Synth data each project's own code can train on: one test per layout runs that project's
label range checks (speed classes, command codes, box classes, class tables), written here from
the constants in its code (cited per check), on `carla-wds synth` output as written.

A value outside them is what their loader refuses (TCP's `assert command in [0..5]`), crashes on
(SimLingo's map_command KeyError) or turns into a label their model has no class for
(carla_garage's target speed class 4 against TransFuser++'s 4-class head)."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import cv2
import numpy as np
import pytest

from carla_wds.pack.datasets.lead.pickles import read_lead_pickle
from tests.helpers import shared_raw

# CARLA's RoadOption (agents/navigation/local_planner.py): VOID -1, LEFT 1 ... CHANGELANERIGHT 6
ROAD_OPTIONS = {-1, 1, 2, 3, 4, 5, 6}
SIZE = (32, 64)


def _raw(tmp_path_factory, layout: str, frames: int = 40) -> Path:
    # 4 routes of 40 frames: junctions, turns, stops and the road's full speed range
    return shared_raw(tmp_path_factory, layout, episodes=4, frames=frames, seed=2,
                      image_size=SIZE)


def _json(path: Path):
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return json.load(f)


def _all(root: Path, pattern: str) -> list:
    files = sorted(root.rglob(pattern))
    assert files, f"no {pattern} under {root}"
    return [_json(p) for p in files]


def tcp_command_index(command: int) -> int:
    """OpenDriveLab/TCP@73cc1dd TCP/data.py l.157-168: VOID -> 4, minus 1, then
    `assert command in [0, 1, 2, 3, 4, 5]` (the index of its 6-way one-hot)."""
    command = 4 if command < 0 else command
    return command - 1


@pytest.mark.parametrize("layout", ["tcp", "tcp_roach"])
def test_tcp_commands_pass_tcps_assert(tmp_path_factory, layout):
    meas = _all(_raw(tmp_path_factory, layout), "measurements/*.json")
    for m in meas:
        # TCP trains on target_command (tools/gen_data.py l.109); tcp's expert also saves
        # command beside it
        for key in ("target_command", "command")[:1 + ("command" in m)]:
            assert tcp_command_index(int(m[key])) in range(6), (key, m[key])


def test_transfuser4_commands_are_road_options(tmp_path_factory):
    # transfuser@cvpr2021 9a90951 transfuser/data.py l.260 serves `command` as saved: the
    # expert's RoadOption value
    for m in _all(_raw(tmp_path_factory, "transfuser4", frames=16), "measurements/*.json"):
        assert int(m["command"]) in ROAD_OPTIONS


def test_transfuser2022_semantics_index_its_converter(tmp_path_factory):
    # transfuser@22b3ccd team_code_transfuser/config.py l.88-117: converter has 28 entries,
    # data.py l.235 indexes it with the saved CARLA tags
    root = _raw(tmp_path_factory, "transfuser2022", frames=16)
    for path in sorted(root.rglob("semantics/*.png"))[::5]:
        ids = cv2.imread(str(path), cv2.IMREAD_UNCHANGED)
        assert ids is not None and int(ids.max()) < 28, path
    for m in _all(root, "measurements/*.json"):
        assert int(m["command"]) in ROAD_OPTIONS


# carla_garage@1448bed team_code/config.py l.33-36 and l.144-148: target speed bins
# walker + 0.1, slow + 0.1, fast + 0.1 = 2.1, 5.1, 8.1; four classes (index 0 = brake);
# data.py get_indices_speed_angle: np.digitize(target_speed, bins) + 1 unless braking
GARAGE_SPEED_BINS, GARAGE_SPEED_CLASSES = [2.1, 5.1, 8.1], 4
# data.py l.924-934 get_bbox_label's classes, l.954 drops the ego; config.py l.394-418 converter
GARAGE_BOX_CLASSES = {"car", "walker", "traffic_light", "stop_sign", "ego_car"}
GARAGE_CONVERTER_LEN = 23


def test_garage_target_speeds_fall_in_its_classes(tmp_path_factory):
    root = _raw(tmp_path_factory, "garage")
    speeds = []
    for m in _all(root, "measurements/*.json.gz"):
        cls = 0 if m["brake"] else int(np.digitize(m["target_speed"], GARAGE_SPEED_BINS)) + 1
        assert cls < GARAGE_SPEED_CLASSES, (m["target_speed"], cls)
        assert int(m["command"]) in ROAD_OPTIONS and int(m["next_command"]) in ROAD_OPTIONS
        speeds.append(m["target_speed"])
    assert {2.0, 5.0, 8.0} >= set(speeds) and len(set(speeds)) >= 2   # its expert's values
    for boxes in _all(root, "boxes/*.json.gz"):
        assert {b["class"] for b in boxes} <= GARAGE_BOX_CLASSES
    for path in sorted(root.rglob("semantics/*.png"))[::10]:
        assert int(cv2.imread(str(path), cv2.IMREAD_UNCHANGED).max()) < GARAGE_CONVERTER_LEN


@pytest.mark.parametrize("layout", ["garage_lb2", "garage_lb2_simlingo"])
def test_garage_lb2_commands_and_boxes_fit_simlingo(tmp_path_factory, layout):
    root = _raw(tmp_path_factory, layout, frames=28)
    for m in _all(root, "measurements/*.json.gz"):
        # RenzKa/simlingo@eb2b89a dataset_base.py l.502-509: map_command has keys 1..6 only
        assert {int(m["command"]), int(m["next_command"])} <= {1, 2, 3, 4, 5, 6}
        # PDM-Lite's target speed is speed_limit * 0.72 (carla_garage@0f1cd25 autopilot.py
        # l.354), never above the limit
        assert 0.0 <= m["target_speed"] <= m["speed_limit"]
    for boxes in _all(root, "boxes/*.json.gz"):
        for b in boxes:
            # parse_bounding_boxes l.696-720: a box with position and extent reads its yaw;
            # lights and stop signs their affects_ego (and state, l.745-751)
            if "position" in b and "extent" in b:
                assert "yaw" in b, b["class"]
            if b["class"] in ("traffic_light", "stop_sign"):
                assert "affects_ego" in b
            if b["class"] == "traffic_light":
                assert b["state"] in ("Green", "Red", "Yellow", "Off", "Unknown")


# Thinklab-SJTU/Bench2DriveZoo@10a2e5d adzoo/vad/configs/VAD/VAD_base_e2e_b2d.py: NameMapping
# (l.29, 34, 38, 66, 78; the entries synth's type_ids need) into class_names (l.123-125)
B2D_NAMES = {"vehicle.lincoln.mkz_2020": "car", "vehicle.audi.tt": "car",
             "vehicle.tesla.model3": "car", "traffic.traffic_light": "traffic_light",
             "walker.pedestrian.0001": "pedestrian"}
B2D_CLASSES = {"car", "van", "truck", "bicycle", "traffic_sign", "traffic_cone",
               "traffic_light", "pedestrian", "others"}


def test_bench2drive_commands_and_box_types_fit_its_models(tmp_path_factory):
    root = shared_raw(tmp_path_factory, "bench2drive", episodes=2, frames=24, seed=2,
                      image_size=(32, 64))
    for anno in _all(root, "anno/*.json.gz"):
        # the TCP port (@31278ff TCP/data.py l.235-238) asserts its command index, fed from
        # next_command (tools/gen_tcp_data.py l.215); VAD reads command_near/far as saved
        for key in ("next_command", "command_near", "command_far"):
            assert tcp_command_index(int(anno[key])) in range(6), (key, anno[key])
        for b in anno["bounding_boxes"]:
            if b["class"] != "ego_vehicle":
                assert B2D_NAMES.get(b["type_id"]) in B2D_CLASSES, b["type_id"]


# kesai-labs/lead@44891760 config_training.py l.684-696: target speed classes 0 ... 20 m/s
# (planning_decoder.py l.354-367 puts anything above the last into it); carla_dataset_utils.py
# bbox_json2array l.56-90: the classes it labels (the ego is skipped by the loader)
LEAD_TOP_SPEED = 20.0
LEAD_BOX_CLASSES = {"ego_car", "car", "walker", "traffic_light", "stop_sign", "static"}


def test_lead_speeds_commands_and_boxes_fit_tfv6(tmp_path_factory):
    root = shared_raw(tmp_path_factory, "lead", episodes=2, frames=20, seed=2,
                      image_size=(32, 48))
    metas = sorted(root.rglob("metas/*.pkl"))
    assert metas
    for path in metas:
        meta = read_lead_pickle(path.read_bytes(), str(path), True)
        assert 0.0 <= meta["target_speed"] <= LEAD_TOP_SPEED
        # carla_dataset_utils.py command_to_one_hot maps any value; the expert saves
        # RoadOption values (expert.py l.2853-2857)
        assert set(meta["next_commands_3.25"]) <= ROAD_OPTIONS
    for path in sorted(root.rglob("bboxes/*.pkl")):
        boxes = read_lead_pickle(path.read_bytes(), str(path), True)
        assert {b["class"] for b in boxes} <= LEAD_BOX_CLASSES
