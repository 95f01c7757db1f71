"""adapter="lead"'s radar keys (carla_wds/load/adapters/lead_radar.py) against LEAD's formulas
written here (kesai-labs/lead@44891760 carla_dataset_utils.py preprocess_radar_input and
parse_radar_detection_labels) on hand-made rows and boxes. Bit for bit against their loader on
the synth routes: tests/load/adapters/test_lead_model.py."""
from __future__ import annotations

import numpy as np
import pytest

from carla_wds.load.adapters.lead_radar import lead_radar

# TransfuserBoundingBoxClass: vehicle 0, walker 1, traffic light 2, stop sign 3, special 4,
# obstacle 5, parking 6, biker 7; their radar order: special, vehicle, walker, obstacle, parking
ORDER = {4: 0, 0: 1, 1: 2, 5: 3, 6: 4}


def their_inputs(per_sensor: list[np.ndarray]) -> dict[str, np.ndarray]:
    """Per sensor: rows inside x in [-32, 64], y in [-40, 40], the first 75, zero rows after,
    then a column with the sensor's 0-based index."""
    out = {}
    for i, rows in enumerate(per_sensor):
        inside = [r for r in rows if -32 <= r[0] <= 64 and -40 <= r[1] <= 40][:75]
        block = np.zeros((75, 5), np.float32)
        for j, r in enumerate(inside):
            block[j, :4] = r
        block[:, 4] = i
        out[f"radar{i + 1}"] = block
    out["radar"] = np.vstack([out[f"radar{i}"] for i in range(1, 5)])
    return out


def their_detections(rows: list[tuple]) -> np.ndarray:
    """Box rows in metres (x, y, velocity, class, radar points); those with a radar point and
    not at (0, 0), fastest first, then by class, then more radar points; the first 20 as
    (x, y, v, 1), zeros after."""
    kept = [r for r in rows if r[4] > 0 and (r[0] != 0 or r[1] != 0)]
    kept = sorted(kept, key=lambda r: (-r[2], ORDER.get(r[3], 5), -r[4]))[:20]
    out = np.zeros((20, 4), np.float32)
    for j, r in enumerate(kept):
        out[j] = (r[0], r[1], r[2], 1.0)
    return out


def image_rows(rows: list[tuple]) -> np.ndarray:
    """The rows as the adapter's padded center_net_bounding_boxes (image frame, 90 rows)."""
    out = np.zeros((90, 9), np.float32)
    for j, (x, y, v, c, n) in enumerate(rows):
        out[j] = ((x + 32) * 4, (y + 40) * 4, 8.0, 4.0, 0.1, v, 0, c, n)
    return out


def pack_rows(per_sensor: list[np.ndarray]) -> np.ndarray:
    """The pack's radar.npy: every sensor's rows, then its number 1..4."""
    return np.vstack([np.column_stack([r, np.full(len(r), i + 1)])
                      for i, r in enumerate(per_sensor)]).astype(np.float32)


@pytest.mark.parametrize("counts", [(0, 3, 80, 200), (75, 76, 1, 0)])
def test_radar_inputs_are_their_filtered_padded_sensors(counts):
    rng = np.random.default_rng(sum(counts))
    per_sensor = [rng.uniform([-50, -60, 0, -5], [80, 60, 2, 5], (n, 4)).astype(np.float16)
                  .astype(np.float32) for n in counts]
    ours = lead_radar(pack_rows(per_sensor), np.zeros((90, 9), np.float32))
    want = their_inputs(per_sensor)
    for name, w in want.items():
        assert ours[name].dtype == np.float32 and ours[name].shape == w.shape, name
        np.testing.assert_array_equal(ours[name], w, err_msg=name)


def test_radar_detections_are_their_sorted_boxes_with_radar_points():
    rows = [(10.0, 2.0, 3.0, 0, 2), (20.0, -3.0, 3.0, 4, 1),    # same speed: special first
            (5.0, 1.0, 7.5, 1, 1), (8.0, 8.0, 3.0, 0, 5),       # more points first
            (30.0, 0.0, 9.0, 0, 0),                             # no radar point: left out
            (12.0, 12.0, 0.0, 6, 3), (14.0, -9.0, 0.0, 2, 1)]   # a light after parking
    rows += [(float(i), 20.0, 1.0, 5, 1) for i in range(1, 20)]  # past the 20 queries
    ours = lead_radar(np.zeros((0, 5), np.float32), image_rows(rows))["radar_detections"]
    assert ours.dtype == np.float32 and ours.shape == (20, 4)
    np.testing.assert_allclose(ours, their_detections(rows), atol=1e-5)
    assert tuple(ours[0, :3]) == (5.0, 1.0, 7.5) and ours[1, 0] == 20.0 and ours[2, 0] == 8.0


def test_no_box_with_a_radar_point_gives_zero_rows():
    ours = lead_radar(np.zeros((0, 5), np.float32), np.zeros((90, 9), np.float32))
    assert not ours["radar_detections"].any() and not ours["radar"][:, :4].any()


def test_radar_rows_of_another_width_are_refused_in_one_line():
    with pytest.raises(ValueError) as err:
        lead_radar(np.zeros((3, 7), np.float32), np.zeros((90, 9), np.float32))
    assert "\n" not in str(err.value) and "(N, 4)" in str(err.value)
