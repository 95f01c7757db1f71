"""LEAD's radar inputs and radar detection labels for adapter="lead" (use_radars,
radar_detection, use_radar_detection: their Leaderboard defaults), as CARLAData computes them
(kesai-labs/lead@44891760 lead/data_loader/carla_dataset.py __getitem__'s "Radars" part,
carla_dataset_utils.py preprocess_radar_input and parse_radar_detection_labels). Written from
their formulas; checked against their loader in tests/load/adapters/test_lead_model.py and
against the formulas in tests/load/adapters/test_lead_radar.py.

- radar1 .. radar4: each sensor's rows of radar/NNNN.npz (the twin's own for the perturbated
  sample; not moved) with -32 <= x <= 64 and -40 <= y <= 40, the first 75 of them, zero rows
  after, and a last column the sensor's index 0..3: float32 (75, 5) (x, y, z, v, sensor);
- radar: the four side by side, float32 (300, 5);
- radar_detections: float32 (20, 4) (x, y, v, valid): the sample's box rows
  (center_net_bounding_boxes, image frame) back in metres (/ 4, + (-32, -40)), those with a
  radar point (column 8 > 0) and not at (0, 0), sorted by speed (fastest first), then class
  (special, vehicle, walker, obstacle, parking, others), then more radar points (a stable
  sort), the first 20; zero rows after.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .lead_boxes import OBSTACLE, PARKING, SPECIAL, VEHICLE, WALKER

MIN_X, MAX_X, MIN_Y, MAX_Y, PPM = -32, 64, -40, 40, 4
SENSORS, POINTS_PER_SENSOR, QUERIES = 4, 75, 20
PRIORITY = {SPECIAL: 0, VEHICLE: 1, WALKER: 2, OBSTACLE: 3, PARKING: 4}
X, Y, VELOCITY, CLASS, RADAR_POINTS = 0, 1, 5, 7, 8      # TransfuserBoundingBoxIndex


def radar_inputs(rows: np.ndarray) -> dict[str, np.ndarray]:
    """radar1..radar4 and radar from the pack's radar rows (float32 (N, C + 1), the last column
    the sensor number 1..4)."""
    rows = np.asarray(rows, np.float32)
    if rows.ndim != 2 or rows.shape[1] != 5:
        raise ValueError(f"radar rows are {rows.shape}; LEAD's loader reads (N, 4) rows x, y, "
                         "z, v per sensor: pack LEAD's radar/ folder as their expert saves it")
    out: dict[str, np.ndarray] = {}
    for k in range(1, SENSORS + 1):
        own = rows[rows[:, 4] == k, :4]
        keep = own[(own[:, 0] >= MIN_X) & (own[:, 0] <= MAX_X)
                   & (own[:, 1] >= MIN_Y) & (own[:, 1] <= MAX_Y)][:POINTS_PER_SENSOR]
        padded = np.zeros((POINTS_PER_SENSOR, 5), np.float32)
        padded[:len(keep), :4] = keep
        padded[:, 4] = k - 1
        out[f"radar{k}"] = padded
    out["radar"] = np.concatenate([out[f"radar{k}"] for k in range(1, SENSORS + 1)])
    return out


def radar_detections(boxes: np.ndarray) -> np.ndarray:
    """radar_detections from the padded image-frame box rows (module docstring)."""
    out = np.zeros((QUERIES, 4), np.float32)
    b = np.asarray(boxes, np.float32).copy()
    b[:, :4] = b[:, :4] / PPM
    b[:, :2] = b[:, :2] + np.array([MIN_X, MIN_Y])
    b = b[((b[:, X] != 0) | (b[:, Y] != 0)) & (b[:, RADAR_POINTS] > 0)]
    if not len(b):
        return out
    priority = np.array([PRIORITY.get(int(c), len(PRIORITY)) for c in b[:, CLASS]])
    order = np.lexsort((-b[:, RADAR_POINTS].astype(np.float64), priority,
                        -b[:, VELOCITY].astype(np.float64)))
    chosen = b[order][:QUERIES]
    out[:len(chosen), :3] = chosen[:, [X, Y, VELOCITY]]
    out[:len(chosen), 3] = 1.0
    return out


def lead_radar(rows: np.ndarray, boxes: np.ndarray) -> dict[str, Any]:
    """Their radar keys of one sample."""
    return {**radar_inputs(rows), "radar_detections": radar_detections(boxes)}
