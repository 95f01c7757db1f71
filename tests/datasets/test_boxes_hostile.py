"""The TransFuser 2022 and carla_garage box parsers on absurd values (issue 23): a value that
is finite in float64 but not in the float32 table (an extent of 1e39) is refused, naming the
entry and the column, as a non-finite one already is."""
from __future__ import annotations

import copy

import pytest

from carla_wds.boxes import BOX_COLUMNS, garage_boxes, tf2022_boxes
from carla_wds.codecs import SchemaError

GARAGE = [{"class": "ego_car", "position": [0.0, 0.0, 0.0], "extent": [2.4, 1.0, 0.8],
           "yaw": 0.0, "speed": 3.0, "id": 1},
          {"class": "car", "position": [10.0, 2.0, 0.0], "extent": [2.2, 0.9, 0.7],
           "yaw": 0.1, "speed": 5.0, "brake": 0.0, "num_points": 12, "id": 7}]
TF2022 = [{"class": "Car", "position": [0.0, 0.0, 0.0], "extent": [1.5, 4.8, 2.0],
           "yaw": 0.0, "speed": 3.0, "brake": 0.0, "id": 1},
          {"class": "Car", "position": [10.0, 2.0, 0.0], "extent": [1.5, 4.4, 1.8],
           "yaw": 0.1, "speed": 5.0, "brake": 0.0, "id": 7}]


def edited(boxes: list, key: str, value) -> list:
    out = copy.deepcopy(boxes)
    out[1][key] = value
    return out


@pytest.mark.parametrize("parse, boxes", [(garage_boxes, GARAGE), (tf2022_boxes, TF2022)])
@pytest.mark.parametrize("key, value, column", [
    ("extent", [1e39, 1.0, 1.0], "extent"), ("position", [1.0, -1e39, 0.0], "y"),
    ("yaw", 1e39, "yaw"), ("speed", 5e38, "speed")])
def test_values_beyond_float32_are_refused(parse, boxes, key, value, column):
    assert parse(boxes).shape == (2, len(BOX_COLUMNS))
    with pytest.raises(SchemaError) as err:
        parse(edited(boxes, key, value))
    msg = str(err.value)
    assert msg.startswith(f"box entry 1: {column}") and "not finite in float32" in msg
