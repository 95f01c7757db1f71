"""The box table carries what carla_garage's box filter reads (issue 26): team_code/data.py
parse_bounding_boxes (carla_garage@1448bed) drops a traffic light unless `affects_ego` and
its `state` is not 'Green', and a stop sign unless `affects_ego`. Its expert
(data_agent.py get_bounding_boxes) writes both for lights, `affects_ego` for stop signs, neither
for cars and walkers; TransFuser 2022's label_raw has neither (FILL). Bad values are refused
naming the entry and the key, as the other columns' are."""
from __future__ import annotations

import copy

import numpy as np
import pytest

from carla_wds.codecs import SchemaError
from carla_wds.datasets.garage import garage_boxes
from carla_wds.datasets.transfuser import tf2022_boxes
from carla_wds.modalities.boxes import BOX_COLUMNS, FILL, LIGHT_STATES

COL = {name: i for i, name in enumerate(BOX_COLUMNS)}
# the entries as carla_garage's data_agent.py writes them (matrix and distance left out)
GARAGE = [
    {"class": "ego_car", "position": [0.0, 0.0, 0.0], "extent": [2.4, 1.0, 0.8], "yaw": 0.0,
     "num_points": -1, "speed": 3.0, "brake": 0.0, "id": 1},
    {"class": "car", "position": [10.0, 2.0, 0.0], "extent": [2.2, 0.9, 0.7], "yaw": 0.1,
     "num_points": 12, "speed": 5.0, "brake": 0.0, "id": 7},
    {"class": "traffic_light", "position": [6.0, 0.0, 0.0], "extent": [1.5, 1.75, 1.0],
     "yaw": 0.0, "state": "Red", "id": 6000, "affects_ego": True},
    {"class": "traffic_light", "position": [20.0, 5.0, 0.0], "extent": [1.5, 1.75, 1.0],
     "yaw": 0.0, "state": "Green", "id": 6001, "affects_ego": False},
    {"class": "stop_sign", "position": [5.0, 0.0, 0.0], "extent": [1.5, 1.75, 1.0],
     "yaw": 0.0, "id": 7000, "affects_ego": False}]
TF2022 = [{"class": "Car", "position": [0.0, 0.0, 0.0], "extent": [1.5, 4.8, 2.0],
           "yaw": 0.0, "num_points": -1, "speed": 3.0, "brake": 0.0, "id": 1},
          {"class": "Car", "position": [10.0, 2.0, 0.0], "extent": [1.5, 4.4, 1.8],
           "yaw": 0.1, "num_points": 4, "speed": 5.0, "brake": 0.0, "id": 7}]


def test_columns_follow_the_core_twelve():
    assert BOX_COLUMNS[12:] == ("affects_ego", "light_state")
    assert LIGHT_STATES == ("Red", "Yellow", "Green", "Off", "Unknown")   # carla's enum order


def test_garage_lights_and_stop_signs_carry_affects_ego_and_state():
    table = garage_boxes(GARAGE)
    assert table.shape == (5, len(BOX_COLUMNS))
    np.testing.assert_array_equal(table[:, COL["affects_ego"]], [FILL, FILL, 1.0, 0.0, 0.0])
    np.testing.assert_array_equal(table[:, COL["light_state"]], [FILL, FILL, 0.0, 2.0, FILL])
    # the filter of parse_bounding_boxes, on the table: the red light that affects the ego
    red_for_ego = (table[:, COL["affects_ego"]] == 1) & (
        table[:, COL["light_state"]] != LIGHT_STATES.index("Green"))
    assert red_for_ego.tolist() == [False, False, True, False, False]


def test_light_state_as_carlas_int_is_the_same_state():
    boxes = copy.deepcopy(GARAGE)
    for entry, state in zip(boxes[2:4], (1, 4)):
        entry["state"] = state
    assert garage_boxes(boxes)[2:4, COL["light_state"]].tolist() == [1.0, 4.0]


def test_tf2022_has_no_such_values():
    table = tf2022_boxes(TF2022)
    assert table.shape == (2, len(BOX_COLUMNS))
    assert (table[:, COL["affects_ego"]] == FILL).all()
    assert (table[:, COL["light_state"]] == FILL).all()


@pytest.mark.parametrize("key, value", [
    ("affects_ego", "yes"), ("affects_ego", 2), ("affects_ego", float("nan")),
    ("affects_ego", [True]), ("state", "Purple"), ("state", 7), ("state", -1),
    ("state", float("nan")), ("state", True), ("state", 0.0), ("state", {"Red": 1})])
def test_bad_flag_or_state_is_refused(key, value):
    boxes = copy.deepcopy(GARAGE)
    boxes[2][key] = value
    with pytest.raises(SchemaError) as err:
        garage_boxes(boxes)
    msg = str(err.value)
    assert msg.startswith(f"box entry 2: {key!r} is ") and "expected" in msg, msg
