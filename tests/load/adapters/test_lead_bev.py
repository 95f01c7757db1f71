"""adapter="lead"'s BEV semantic target (carla_wds/load/adapters/lead_bev.py) against LEAD's
formulas written here (kesai-labs/lead@44891760 carla_dataset.py's HD-Map and Occupancy
parts, carla_dataset_utils.py build_bev_occupancy) on hand-made maps and boxes: the map's
converter, cut and 2 x 2 upscale exactly; each box's class at its moved centre exactly and
its rectangle within its rasterised edge; the filters and hulls. Bit for bit against their
loader on the synth routes: tests/load/adapters/test_lead_model.py."""
from __future__ import annotations

import numpy as np
import pytest

from carla_wds.load.adapters.lead_bev import lead_bev_semantic

# ChauffeurNet ids -> TransFuser BEV classes: unlabeled, road, sidewalk -> unlabeled, both
# lane markings -> 2, stop signs 3, the three light colours -> unlabeled
CHAUFFEURNET = {0: 0, 1: 1, 2: 0, 3: 2, 4: 2, 5: 3, 6: 0, 7: 0, 8: 0}
# occupancy class + 3 (13 BEV classes, 10 occupancy ones)
VEHICLE, WALKER, OBSTACLE, PARKING, BIKER, RED = 4, 5, 6, 7, 9, 11
META = {"scenario_obstacles_ids": [7], "vehicle_opened_door": False, "vehicle_door_side": None,
        "over_head_traffic_light": False, "europe_traffic_light": False}


def their_map(hdmap: np.ndarray) -> np.ndarray:
    """Converted, rows 128 + (-40, 40) * 2 and columns 128 + (-32, 64) * 2, each pixel 2 x 2."""
    lut = np.array([CHAUFFEURNET[i] for i in range(9)], np.uint8)
    return np.kron(lut[hdmap[48:208, 64:256]], np.ones((2, 2), np.uint8))


def box(cls: str, x: float, y: float, ex: float = 2.0, ey: float = 1.0, yaw: float = 0.0,
        **kw) -> dict:
    return {"class": cls, "position": [x, y, 0.0], "extent": [ex, ey, 1.0], "yaw": yaw,
            "speed": 5.0, "id": 1, "num_points": 50, "visible_pixels": 500,
            "role_name": "autopilot", "lane_type_str": "Driving", **kw}


def rect_mask(x: float, y: float, ex: float, ey: float, yaw: float, trans: float,
              rot_deg: float) -> tuple[np.ndarray, tuple[int, int]]:
    """The box moved into the twin's frame, R(rot)^T (p - (0, trans)), yaw - rot, as pixels of
    the (320, 384) window at 4 px/m (column (x + 32) * 4, row (y + 40) * 4); and its centre."""
    a = np.deg2rad(rot_deg)
    px, py = x, y - trans
    mx, my = np.cos(a) * px + np.sin(a) * py, -np.sin(a) * px + np.cos(a) * py
    col, row = (mx + 32) * 4, (my + 40) * 4
    psi = yaw - a
    r, c = np.mgrid[0:320, 0:384]
    along = (c - col) * np.cos(psi) + (r - row) * np.sin(psi)
    across = -(c - col) * np.sin(psi) + (r - row) * np.cos(psi)
    inside = (np.abs(along) <= ex * 4) & (np.abs(across) <= ey * 4)
    return inside, (int(row), int(col))


def overlap(ours: np.ndarray, want: np.ndarray) -> float:
    return (ours & want).sum() / (ours | want).sum()


@pytest.fixture(scope="module")
def hdmap() -> np.ndarray:
    return np.random.default_rng(0).integers(0, 9, (256, 256)).astype(np.uint8)


def test_the_map_is_converted_cut_and_upscaled_as_theirs(hdmap):
    out = lead_bev_semantic(hdmap[None], [], 0.0, 0.0, "NA", META)
    assert out["bev_semantic"].dtype == np.uint8 and out["bev_semantic"].shape == (320, 384)
    np.testing.assert_array_equal(out["bev_semantic"], their_map(hdmap))
    assert out["hdmap"] is out["bev_semantic"]


@pytest.mark.parametrize("trans, rot", [(0.0, 0.0), (0.8, -9.0), (-0.4, 12.5)])
@pytest.mark.parametrize("kind, extra, size, want", [
    ("car", {}, (2.0, 1.0), VEHICLE),
    ("walker", {}, (0.4 * 2.5, 0.4 * 2.5), WALKER),          # min extent 0.4, scaled 2.5
    ("car", {"type_id": "vehicle.bh.crossbike"}, (0.5 * 2.5, 0.4 * 2.5), BIKER),
    ("static", {"type_id": "static.prop.constructioncone"},
     (0.1720348298549652, 0.1720348298549652), OBSTACLE),
    ("static", {"mesh_path": "/Game/Carla/Static/Car/4Wheeled/ParkedVehicles/Lincoln/"
                             "SM_LincolnParked.SM_LincolnParked"},
     (2.44619083404541, 1.115301489830017), PARKING),
    ("static_prop_car", {}, (2.0, 1.0), PARKING),
    ("car", {"type_id": "vehicle.ford.ambulance", "id": 7}, (2.0, 1.0), OBSTACLE),
])
def test_each_box_is_drawn_where_its_move_puts_it_with_their_class(trans, rot, kind, extra,
                                                                  size, want):
    ex, ey = (0.3, 0.2) if kind == "walker" else (0.5, 0.2) if "crossbike" in str(extra) \
        else (2.0, 1.0)
    b = box(kind, 12.0, -6.0, ex, ey, 0.4, **extra)
    empty = np.zeros((256, 256), np.uint8)
    out = lead_bev_semantic(empty, [b], trans, rot, "Accident", META)["bev_semantic"]
    inside, (row, col) = rect_mask(12.0, -6.0, *size, 0.4, trans, rot)
    assert out[row, col] == want
    assert set(np.unique(out)) == {0, want}
    drawn = out == want
    # the same rectangle up to their integer corners (a pixel's worth at each edge; a cone's
    # is a few pixels, all edge)
    assert inside.sum() < 50 or overlap(drawn, inside) > 0.6, overlap(drawn, inside)
    assert abs(int(drawn.sum()) - int(inside.sum())) <= 4 * (size[0] + size[1]) * 4 + 8


@pytest.mark.parametrize("b", [
    box("car", 10.0, 0.0, num_points=0, visible_pixels=0),          # occluded
    box("walker", 10.0, 0.0, 0.3, 0.3, num_points=2, visible_pixels=3),
    box("static", 10.0, 0.0, type_id="static.prop.bench"),            # not on their list
    box("traffic_light", 10.0, 0.0, affects_ego=False, state="Red"),
    box("stop_sign", 10.0, 0.0),                                      # not drawn at all
    box("car", 200.0, 0.0),                                           # off their grid
    box("car", -60.0, 0.0),                                           # behind the window
])
def test_boxes_their_filter_leaves_out_are_not_drawn(hdmap, b):
    out = lead_bev_semantic(hdmap, [b], 0.0, 0.0, "NA", META)["bev_semantic"]
    np.testing.assert_array_equal(out, their_map(hdmap))


def test_a_red_light_affecting_the_ego_fills_its_hull_and_the_door_widens_the_car(hdmap):
    light = box("traffic_light", 20.0, 3.0, 0.5, 0.5, affects_ego=True, state="Red")
    out = lead_bev_semantic(hdmap, [light], 0.0, 0.0, "NA", META)["bev_semantic"]
    assert out[(3 + 40) * 4, (20 + 32) * 4] == RED
    door = box("car", 15.0, 0.0, 2.0, 1.0, id=7, speed=0.0, role_name="scenario")
    meta = {**META, "vehicle_opened_door": True, "vehicle_door_side": "left"}
    out = lead_bev_semantic(hdmap, [door], 0.0, 0.0, "VehicleOpensDoorTwoWays",
                            meta)["bev_semantic"]
    # widened by 0.6 m each side and moved 0.6 m to the left-hand row side (+row)
    rows = np.flatnonzero(out[:, (15 + 32) * 4] == OBSTACLE)
    assert abs(rows.min() - (0.0 + 40 + 0.6 - 1.6) * 4) <= 1
    assert abs(rows.max() - (0.0 + 40 + 0.6 + 1.6) * 4) <= 1


def test_a_map_with_ids_past_chauffeurnets_is_refused_in_one_line():
    bad = np.full((256, 256), 9, np.uint8)
    with pytest.raises(ValueError) as err:
        lead_bev_semantic(bad, [], 0.0, 0.0, "NA", META)
    assert "\n" not in str(err.value) and "ChauffeurNet" in str(err.value)
