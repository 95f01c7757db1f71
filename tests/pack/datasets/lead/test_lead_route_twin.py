"""LEAD's `route` label and its twin labels (kesai-labs/lead@44891760 carla_dataset.py
l.366-483, carla_dataset_utils.py perturbate_* and smooth_path / iterative_line_interpolation),
written here independently of carla_wds/pack/datasets/lead/route.py and checked on a real
packed synth route as CARLAWebData serves it with the perturbated twin (twin_p=1).
tests/pack/datasets/lead/test_golden_lead.py holds the same labels to LEAD's own loader."""
from __future__ import annotations

import math

import numpy as np
import pytest

from carla_wds import CARLAWebData
from carla_wds.pack.datasets.lead.route import route_label, smooth
from tests.conftest import run_pack
from tests.helpers import shared_raw

SIZE = (32, 48)


def lead_walk(route: np.ndarray, n: int = 20) -> np.ndarray:
    """The walk, solved as a quadratic along each line: |a + s u - c| = r, u the unit line
    direction; the root farther along the route's own step wins."""
    pts: list[np.ndarray] = []
    for p in np.asarray(route, np.float64):
        if not any(np.array_equal(p, q) for q in pts):
            pts.append(p)
    out, c, prev = [], np.zeros(2), np.zeros(2)
    for k in range(n):
        if k < len(pts):
            a, b, step = c, pts[k], pts[k] - prev
            prev = pts[k]
        else:
            a, b = pts[-2], pts[-1]
            step = b - a
        u = (b - a) / np.linalg.norm(b - a)
        r = 2.5 if k == 0 else 1.0
        half_b, cc = float(u @ (a - c)), float((a - c) @ (a - c)) - r * r
        root = math.sqrt(half_b * half_b - cc)
        c = max((a + (-half_b + sgn * root) * u for sgn in (-1, 1)), key=lambda q: q @ step)
        out.append(c)
    return np.array(out)


def move(points, y: float, yaw_deg: float) -> np.ndarray:
    """R(yaw)^T (p - (0, y)) per row."""
    cy, sy = math.cos(math.radians(yaw_deg)), math.sin(math.radians(yaw_deg))
    p = np.atleast_2d(np.asarray(points, np.float64)) - [0.0, y]
    return np.stack([cy * p[:, 0] + sy * p[:, 1], -sy * p[:, 0] + cy * p[:, 1]], axis=1)


def to_ego(point, pos, theta: float) -> np.ndarray:
    """inverse_conversion_2d: R(theta)^T (p - pos)."""
    return move(np.asarray(point[:2], np.float64) - pos, 0.0, math.degrees(theta))[0]


def targets(meta: dict) -> list:
    """next_target_points_3.25 with consecutive duplicates merged unless there are 2."""
    pts = meta["next_target_points_3.25"]
    kept: list = []
    for p in pts:
        if len(pts) == 2 or not kept or not np.allclose(p[:2], kept[-1][:2]):
            kept.append(p)
    return kept


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("lead_twin")
    # the routes test_synth_label_ranges checks too (synthesised once a session)
    raw = shared_raw(tmp_path_factory, "lead", episodes=2, frames=20, seed=2, image_size=SIZE)
    run_pack(raw, root / "out", layout="lead", allow_pickle_input=True)
    out = {}
    for twin in (0.0, 1.0):
        data = CARLAWebData(str(root / "out"), batch_size=4, image_size=SIZE, twin_p=twin,
                            fields=["measurements", "metas"], seed=4, mode="train")
        for batch in data:
            for i, key in enumerate(batch.keys):
                if batch.valid[i]:
                    out[key, twin] = ({k: v[i].numpy() for k, v in batch.measurements.items()}
                                      | {"target_point": batch.target_point[i].numpy()},
                                      batch.fields["metas"][i])
    return out


def test_route_is_leads_smoothed_route_with_either_camera(served):
    for (key, twin), (got, meta) in served.items():
        y, yaw = (meta["perturbation_translation"], meta["perturbation_rotation"]) if twin \
            else (0.0, 0.0)
        want = lead_walk(move(np.asarray(meta["route"])[:20], y, yaw))[:10]
        np.testing.assert_allclose(got["route"], want, atol=1e-4, err_msg=f"{key} {twin}")


def test_every_target_point_and_yaw_moves_with_the_twin(served):
    worst = {"target_point_next": 0.0, "target_point_previous": 0.0, "future_yaws": 0.0}
    for (key, twin), (got, meta) in served.items():
        if not twin:
            continue
        y, yaw = meta["perturbation_translation"], meta["perturbation_rotation"]
        pos, theta = np.asarray(meta["pos_global"][:2], np.float64), meta["theta"]
        pts = targets(meta)
        ego = {"target_point": to_ego(pts[1], pos, theta),
               "target_point_next": to_ego(pts[min(2, len(pts) - 1)], pos, theta),
               "target_point_previous": to_ego(pts[0], pos, theta)}
        for name, value in ego.items():
            np.testing.assert_allclose(got[name], move(value, y, yaw)[0], atol=1e-4,
                                       err_msg=f"{key} {name}")
            if name in worst:   # what was served before: the unmoved point
                worst[name] = max(worst[name], float(np.linalg.norm(value - got[name])))
        yaws = np.asarray(meta["future_yaws"], np.float64)[5:41:5]
        want = (yaws - math.radians(yaw) + math.pi) % (2 * math.pi) - math.pi
        np.testing.assert_allclose(got["future_yaws"], want, atol=1e-5, err_msg=key)
        worst["future_yaws"] = max(worst["future_yaws"], float(np.abs(yaws - want).max()))
    # synth's twin: 0.1-1 m and 5-12.5 deg, as LEAD's expert draws it
    assert worst["target_point_next"] > 1.0 and worst["target_point_previous"] > 0.1
    assert worst["future_yaws"] > math.radians(5) - 1e-6


def test_the_walk_on_plain_routes():
    straight = np.stack([2.5 + np.arange(50.0), np.zeros(50)], axis=1)
    np.testing.assert_allclose(smooth(straight), straight[:20], atol=1e-9)
    # a short route is extended along its last segment, as LEAD's loop does past the end
    short = np.array([[1.0, 0.0], [2.0, 1.0], [2.0, 1.0], [3.0, 2.0]])
    np.testing.assert_allclose(smooth(short), lead_walk(short), atol=1e-9)
    with pytest.raises(ValueError, match="needs 2"):
        route_label([[3.0, 0.0], [3.0, 0.0]])
    with pytest.raises(ValueError, match="expected finite"):
        route_label([[3.0, float("nan")], [4.0, 0.0]])
