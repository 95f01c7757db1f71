"""adapter="lead"'s box targets (carla_wds/load/adapters/lead_boxes.py) against their formulas
written here independently (kesai-labs/lead@44891760 carla_dataset_utils.py bbox_json2array,
get_bbox_labels, get_centernet_labels), on hand-made boxes: the move by the twin's
perturbation, the BEV image frame, the filter and relabelling, and the CenterNet maps. The
loader's output on synth routes is compared with their own loader in test_lead_model.py."""
from __future__ import annotations

import math

import numpy as np
import pytest

from carla_wds.load.adapters.lead_boxes import lead_box_targets


def car(x: float, y: float, **kw) -> dict:
    return {"class": "car", "position": [x, y, 0.0], "extent": [2.4, 1.0, 0.8], "yaw": 0.3,
            "speed": 5.0, "brake": 1.0, "id": 7, "num_points": 20, "visible_pixels": 100,
            "num_radar_points": 2, "transfuser_semantics_id": 1, **kw}


def rows(boxes: list[dict], trans: float = 0.0, rot: float = 0.0, scenario: str = "NA",
         meta: dict | None = None) -> np.ndarray:
    out = lead_box_targets(boxes, trans, rot, scenario, meta or {})["center_net_bounding_boxes"]
    assert out.shape == (90, 9) and out.dtype == np.float32
    return out[np.any(out != 0, axis=1)]


def test_a_box_is_moved_by_the_twin_and_put_in_their_bev_image_frame():
    trans, rot = 0.5, 8.0
    got = rows([car(10.0, 3.0)], trans, rot)
    a = math.radians(rot)
    x = math.cos(a) * 10.0 + math.sin(a) * (3.0 - trans)      # R(a)^T (p - (0, trans))
    y = -math.sin(a) * 10.0 + math.cos(a) * (3.0 - trans)
    want = [(x + 32) * 4, (y + 40) * 4, 2.4 * 4, 1.0 * 4, 0.3 - a, 5.0, 1.0, 0, 2]
    np.testing.assert_allclose(got, [want], rtol=0, atol=1e-4)


def test_their_filter_and_relabelling():
    boxes = [
        {**car(0, 0), "class": "ego_car", "transfuser_semantics_id": 0},        # never
        {"class": "traffic_light", "position": [20, 0, 2], "extent": [0.5, 0.5, 1], "yaw": 0,
         "affects_ego": True, "state": "Green"},                               # green: out
        {"class": "traffic_light", "position": [21, 0, 2], "extent": [0.5, 0.5, 1], "yaw": 0,
         "affects_ego": True, "state": "Red"},                                 # class 2
        {"class": "stop_sign", "position": [22, 2, 0], "extent": [0.5, 0.5, 1], "yaw": 0,
         "affects_ego": False},                                                # cleared: out
        {"class": "walker", "position": [5, 1, 0], "extent": [0.3, 0.3, 1], "yaw": 0,
         "speed": 1.0, "num_points": 2, "visible_pixels": 3,
         "transfuser_semantics_id": 4},                                        # occluded: out
        {"class": "walker", "position": [6, 1, 0], "extent": [0.3, 0.3, 1], "yaw": 0,
         "speed": 1.0, "num_points": -1, "transfuser_semantics_id": 4},        # class 1
        car(64.0, 0.0),                                                        # x on the edge
        car(10.0, 0.0, brake=float("nan"), type_id="vehicle.bh.crossbike"),    # biker, brake 0
        car(12.0, 0.0, role_name="scenario", type_id="vehicle.ford.ambulance"),  # special 4
        {"class": "static", "position": [15, -3, 0], "extent": [2, 2, 1], "yaw": 0,
         "type_id": "static.prop.constructioncone"},                           # obstacle
        {"class": "static", "position": [16, -3, 0], "extent": [2, 2, 1], "yaw": 0,
         "type_id": "static.prop.bench"},                                      # not listed: out
    ]
    got = rows(boxes)
    assert got[:, 7].tolist() == [2, 1, 7, 4, 5]
    assert got[2, 6] == 0 and got[3, 6] == 1.0
    np.testing.assert_allclose(got[4, 2:4], np.array([0.1720348298549652] * 2) * 4)


def test_a_scenario_car_with_its_door_open_is_widened_and_an_obstacle():
    meta = {"scenario_obstacles_ids": [7], "vehicle_opened_door": True,
            "vehicle_door_side": "left"}
    still = car(10.0, 2.0, speed=0.0, role_name="scenario")
    got = rows([still], scenario="VehicleOpensDoorTwoWays", meta=meta)
    np.testing.assert_allclose(got[0, [1, 3, 7]], [(2.0 + 0.6 + 40) * 4, (1.0 + 0.6) * 4, 5])
    got = rows([still], scenario="Accident", meta=meta)
    assert got[0, 7] == 5 and got[0, 3] == 4.0


def test_centernet_targets_as_their_formula_with_the_padding_drawn_at_the_corner():
    # centre at pixel (100.5, 60.25): map cell (25, 15), offset (0.125, 0.0625)
    box = car(100.5 / 4 - 32, 60.25 / 4 - 40, yaw=0.3)
    t = lead_box_targets([box], 0.0, 0.0, "NA", {})
    heat = t["center_net_heatmap"]
    assert heat.shape == (8, 80, 96) and heat[0, 15, 25] == 1.0
    sigma = (2 * 2 + 1) / 6                # radius max(2, int(r)) = 2 for a 2.4 x 1.0 box
    assert heat[0, 15, 27] == pytest.approx(math.exp(-4 / (2 * sigma ** 2)), rel=1e-6)
    assert heat[0, 15, 28] == 0 and heat[1:].max() == 0
    # the 89 zero rows of their padding: a class-0 Gaussian at cell (0, 0), counted
    assert heat[0, 0, 0] == 1.0 and t["center_net_avg_factor"] == 2
    np.testing.assert_allclose(t["center_net_offset"][:, 15, 25], [0.125, 0.0625])
    np.testing.assert_allclose(t["center_net_wh"][:, 15, 25], [2.4, 1.0], rtol=1e-6)
    width = 2 * math.pi / 12
    assert t["center_net_yaw_class"][15, 25] == round(0.3 / width)
    assert t["center_net_yaw_res"][0, 15, 25] == pytest.approx(0.3 - width, abs=1e-6)
    assert t["center_net_velocity"][0, 15, 25] == 5.0 and t["center_net_brake"][15, 25] == 1
    assert t["center_net_pixel_weight"].sum() == 4       # both channels, box and corner
    assert t["center_net_yaw_class"].dtype == np.int32 and t["center_net_brake"].shape == (80, 96)


def test_more_than_90_boxes_keep_their_first_90_and_no_corner():
    boxes = [car(-30 + (i % 45) * 2.0, -30 + (i // 45) * 20.0) for i in range(100)]
    t = lead_box_targets(boxes, 0.0, 0.0, "NA", {})
    assert np.all(t["center_net_bounding_boxes"][:, 2] > 0)
    assert t["center_net_heatmap"][0, 0, 0] < 1.0
    assert t["center_net_avg_factor"] == 90
