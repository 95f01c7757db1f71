"""Sanity tests of tests/reference.py itself: the transcriptions the packer's tests trust.

Each test drives a synthetic vehicle through CARLA's world (left-handed: x east, y south, z up;
compass north = -y; yaw in degrees, positive turns right) and writes what each project's
collector would have saved: TCP / TransFuser measurements (x, y) = scaled GNSS (north, east)
= (-y_world, x_world), theta = compass = yaw + pi/2; `ego_matrix` = carla.Transform.get_matrix().
A sign or axis slip in a reference shows up as a waypoint behind the car, on the wrong side, or
disagreeing with another project's label after `convert`.
"""
from __future__ import annotations

import importlib.util
import itertools
import math
from pathlib import Path

import numpy as np
import pytest

from tests import reference as ref

REPO = Path(__file__).resolve().parents[1]
ALL_FRAMES = ref.FRAMES + tuple(sorted(ref._ALIASES))


# --------------------------------------------------------------------------------------------
# synthetic drives
# --------------------------------------------------------------------------------------------


def _meas(xw: float, yw: float, yaw_deg: float, target_w=(0.0, 0.0), command: int = 4,
          pitch_deg: float = 0.0, zw: float = 0.0) -> dict:
    """One frame as TCP / TF-2021 / TF-2022 / garage collectors would save it (a superset)."""
    compass = math.radians(yaw_deg) + math.pi / 2
    north, east = -yw, xw
    t_north, t_east = -target_w[1], target_w[0]
    return {
        # TCP / TransFuser: GNSS (lat, lon) scaled = (north, east), theta = compass
        "x": north, "y": east, "theta": compass, "speed": 5.0,
        "x_target": t_north, "y_target": t_east, "target_command": command,
        "x_command": t_north, "y_command": t_east, "command": command,
        # both TF-2022 and garage
        "ego_matrix": ref.carla_matrix(xw, yw, zw, yaw_deg, pitch_deg),
    }


def straight(yaw_deg: float, n: int = 10, step: float = 2.5, start=(30.0, -40.0)) -> list[dict]:
    """Constant heading yaw_deg, `step` metres per frame; target 50 m ahead of frame 0."""
    fx, fy = math.cos(math.radians(yaw_deg)), math.sin(math.radians(yaw_deg))
    target = (start[0] + 50 * fx, start[1] + 50 * fy)
    return [_meas(start[0] + i * step * fx, start[1] + i * step * fy, yaw_deg, target) for i in range(n)]


def left_turn(yaw0_deg: float = -90.0, radius: float = 15.0, dphi_deg: float = 8.0, n: int = 10) -> list[dict]:
    """A circle turning LEFT (yaw decreasing in CARLA) from heading yaw0 at (5, 7)."""
    yaw0 = math.radians(yaw0_deg)
    fwd = np.array([math.cos(yaw0), math.sin(yaw0)])
    left = np.array([math.sin(yaw0), -math.cos(yaw0)])   # forward rotated by -90 deg (left)
    centre = np.array([5.0, 7.0]) + radius * left
    out = []
    for i in range(n):
        phi = math.radians(dphi_deg * i)
        p = centre - radius * left * math.cos(phi) + radius * fwd * math.sin(phi)
        out.append(_meas(float(p[0]), float(p[1]), yaw0_deg - math.degrees(phi)))
    return out


HEADINGS = [-90.0, 0.0, 90.0, 180.0, 37.0, -123.0]   # north, east, south, west, two others


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def test_carla_matrix_is_a_rotation_with_carla_axes():
    m = np.array(ref.carla_matrix(1.0, 2.0, 3.0, 90.0))
    np.testing.assert_allclose(m[:3, :3] @ m[:3, :3].T, np.eye(3), atol=1e-12)
    assert np.linalg.det(m[:3, :3]) == pytest.approx(1.0)
    # yaw +90 turns the vehicle's forward (x) onto world +y (south: a right turn from east)
    np.testing.assert_allclose(m[:3, 0], [0.0, 1.0, 0.0], atol=1e-12)
    np.testing.assert_allclose(m[:3, 3], [1.0, 2.0, 3.0])
    # pitch up lifts the forward axis
    assert ref.carla_matrix(0, 0, 0, 0.0, 10.0)[2][0] == pytest.approx(math.sin(math.radians(10)))
    for yaw, pitch, roll in [(30, 5, -3), (-170, -8, 12)]:
        r = np.array(ref.carla_matrix(0, 0, 0, yaw, pitch, roll))[:3, :3]
        np.testing.assert_allclose(r @ r.T, np.eye(3), atol=1e-12)


def test_rot2():
    np.testing.assert_allclose(ref.rot2(math.pi / 2) @ [1.0, 0.0], [0.0, 1.0], atol=1e-15)


# --------------------------------------------------------------------------------------------
# straight ahead in each project's forward axis
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("yaw", HEADINGS)
def test_straight_drive_is_straight_ahead_in_every_project(yaw):
    meas = straight(yaw)
    d = 2.5 * np.arange(1, 5)   # 4 future frames at 2 Hz
    tcp = ref.tcp_labels(meas, 0)
    np.testing.assert_allclose(tcp["waypoints"], np.stack([0 * d, -d], 1), atol=1e-9)   # forward = -y
    np.testing.assert_allclose(tcp["target_point"], [0.0, -50.0], atol=1e-9)
    tf21 = ref.transfuser2021_waypoints(meas, 0)
    np.testing.assert_allclose(tf21["waypoints"], np.stack([0 * d, -d], 1), atol=1e-9)
    np.testing.assert_allclose(tf21["target_point"], [0.0, -50.0], atol=1e-9)
    tf22 = ref.transfuser2022_waypoints(meas, 0)
    np.testing.assert_allclose(tf22["ego_waypoint"], np.stack([d - 1.3, 0 * d], 1), atol=1e-9)
    np.testing.assert_allclose(tf22["target_point"], [0.0, -50.0], atol=1e-9)   # tcp frame, no shift
    g = ref.garage_waypoints(meas, 0)
    np.testing.assert_allclose(g, np.stack([2.5 * np.arange(1, 9), np.zeros(8)], 1), atol=1e-9)


def test_north_and_east_concretely():
    """Compass 0 (north) and pi/2 (east): the headings the measurements' theta literally holds."""
    north, east = straight(-90.0), straight(0.0)
    assert north[0]["theta"] == pytest.approx(0.0)
    assert east[0]["theta"] == pytest.approx(math.pi / 2)
    for meas in (north, east):
        assert ref.tcp_labels(meas, 0)["waypoints"][-1] == pytest.approx([0.0, -10.0], abs=1e-9)
        assert ref.garage_waypoints(meas, 0)[-1] == pytest.approx([20.0, 0.0], abs=1e-9)


def test_garage_uses_the_full_rotation_on_a_slope():
    """Driving 2.5 m per frame along the vehicle's own x up a 6 deg slope: garage's full 3x3
    rotation gives exactly (2.5 i, 0); a yaw-only rotation would give 2.5 i cos 6 deg."""
    pitch = 6.0
    f = np.array([math.cos(math.radians(pitch)), 0.0, math.sin(math.radians(pitch))])
    meas = [_meas(2.5 * i * f[0], 0.0, 0.0, pitch_deg=pitch, zw=2.5 * i * f[2]) for i in range(10)]
    g = ref.garage_waypoints(meas, 0)
    np.testing.assert_allclose(g[:, 0], 2.5 * np.arange(1, 9), atol=1e-9)
    assert abs(g[-1, 0] - 20.0 * math.cos(math.radians(pitch))) > 0.05


# --------------------------------------------------------------------------------------------
# a left turn goes to the project's left side
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("yaw0", HEADINGS)
def test_left_turn_goes_left_in_every_project(yaw0):
    meas = left_turn(yaw0)
    tcp = ref.tcp_labels(meas, 0)["waypoints"]
    assert np.all(tcp[:, 0] < 0) and np.all(tcp[:, 1] < 0)                 # left = -x, ahead = -y
    assert np.all(np.diff(tcp[:, 0]) < 0)
    tf21 = ref.transfuser2021_waypoints(meas, 0)["waypoints"]
    assert np.all(tf21[:, 0] < 0) and np.all(tf21[:, 1] < 0)
    tf22 = ref.transfuser2022_waypoints(meas, 0)["ego_waypoint"]
    assert np.all(tf22[:, 1] < 0) and np.all(np.diff(tf22[:, 0]) > 0)     # left = -y (CARLA axes)
    g = ref.garage_waypoints(meas[:9], 0)
    assert np.all(g[:, 1] < 0) and np.all(g[:, 0] > 0)                     # left = -y
    b2d = ref.convert(g, "garage", "b2d")
    assert np.all(b2d[:, 1] > 0)                                           # left = +y


@pytest.mark.parametrize("yaw0", HEADINGS)
def test_projects_agree_after_convert(yaw0):
    """The same drive, labelled by each project, is the same points once converted."""
    meas = left_turn(yaw0)
    tcp = ref.tcp_labels(meas, 0)["waypoints"]
    tf21 = ref.transfuser2021_waypoints(meas, 0)["waypoints"]
    tf22 = ref.transfuser2022_waypoints(meas, 0)["ego_waypoint"]
    g = ref.garage_waypoints(meas[:9], 0, pred_len=4)
    np.testing.assert_allclose(tf21, tcp, atol=1e-9)
    np.testing.assert_allclose(ref.convert(g, "garage", "tcp"), tcp, atol=1e-9)
    np.testing.assert_allclose(ref.convert(g, "garage", "transfuser2022"), tf22, atol=1e-9)
    np.testing.assert_allclose(ref.convert(tf22, "transfuser2022", "tcp"), tcp, atol=1e-9)


def test_target_point_to_the_left_and_ahead():
    """Heading north, a target 10 m ahead and 2 m to the left (west)."""
    meas = [_meas(0.0, 0.0, -90.0, target_w=(-2.0, -10.0))] + straight(-90.0, start=(0.0, 0.0))[1:]
    for tp in (ref.tcp_labels(meas, 0)["target_point"], ref.transfuser2021_waypoints(meas, 0)["target_point"],
               ref.transfuser2022_waypoints(meas, 0)["target_point"]):
        np.testing.assert_allclose(tp, [-2.0, -10.0], atol=1e-9)                # tcp frame
    np.testing.assert_allclose(ref.convert([-2.0, -10.0], "tcp", "garage"), [10.0, -2.0], atol=1e-12)


def test_tf2022_label_raw_and_measurements_agree_and_pad_with_identity():
    meas = left_turn(20.0)
    frames = [[{"id": 7, "ego_matrix": m["ego_matrix"]},
               {"id": 9, "ego_matrix": ref.carla_matrix(100, 100, 0, 0)}] for m in meas]
    a = ref.transfuser2022_waypoints(frames, 0)["ego_waypoint"]
    b = ref.transfuser2022_waypoints(meas, 0)["ego_waypoint"]
    np.testing.assert_allclose(a, b, atol=1e-12)
    assert ref.transfuser2022_waypoints(frames, 0)["target_point"] is None
    assert ref.transfuser2022_waypoints(frames, 0, meas=meas)["target_point"] is not None
    # the ego missing from the last frame: get_waypoints pads with the identity matrix
    gap = [list(f) for f in frames]
    gap[4] = [gap[4][1]]
    padded = ref.transfuser2022_waypoints(gap, 0)["ego_waypoint"]
    np.testing.assert_allclose(padded[:3], b[:3], atol=1e-12)
    m0 = np.array(meas[0]["ego_matrix"])
    want = (np.linalg.inv(m0) @ np.array([0, 0, 0, 1.0]))[:2] - [1.3, 0.0]
    np.testing.assert_allclose(padded[3], want, atol=1e-9)


def test_tf2022_augmentation_turns_waypoints_and_target_the_same_way():
    """A positive aug angle (the car turned right) moves both the ego_waypoint (CARLA axes) and
    the target point (TCP axes) to the left."""
    meas = straight(-90.0)
    base = ref.transfuser2022_waypoints(meas, 0)
    aug = ref.transfuser2022_waypoints(meas, 0, aug_deg=10.0)
    assert np.all(aug["ego_waypoint"][:, 1] < base["ego_waypoint"][:, 1] - 1e-3)   # -y = left
    assert aug["target_point"][0] < base["target_point"][0] - 1e-3                  # -x = left
    r = math.radians(10.0)
    np.testing.assert_allclose(aug["target_point"], [-50 * math.sin(r), -50 * math.cos(r)], atol=1e-9)


# --------------------------------------------------------------------------------------------
# convert
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("src,dst", list(itertools.product(ALL_FRAMES, repeat=2)))
def test_convert_round_trips(src, dst):
    pts = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [3.5, -2.25], [-7.0, 11.0]])
    back = ref.convert(ref.convert(pts, src, dst), dst, src)
    np.testing.assert_allclose(back, pts, atol=1e-12)


AHEAD = {"garage": [1.0, 0.0], "tcp": [0.0, -1.0], "transfuser2022": [-0.3, 0.0], "b2d": [1.0, 0.0]}
LEFT = {"garage": [0.0, -1.0], "tcp": [-1.0, 0.0], "transfuser2022": [-1.3, -1.0], "b2d": [0.0, 1.0]}


@pytest.mark.parametrize("src,dst", list(itertools.product(ref.FRAMES, repeat=2)))
def test_convert_one_metre_ahead_and_left(src, dst):
    np.testing.assert_allclose(ref.convert(AHEAD[src], src, dst), AHEAD[dst], atol=1e-12)
    np.testing.assert_allclose(ref.convert(LEFT[src], src, dst), LEFT[dst], atol=1e-12)


def test_convert_handedness_and_shapes():
    # garage -> tcp is a rotation (det +1); garage -> b2d a reflection (det -1)
    e = np.eye(2)
    assert np.linalg.det(ref.convert(e, "garage", "tcp").T) == pytest.approx(1.0)
    assert np.linalg.det(ref.convert(e, "garage", "b2d").T) == pytest.approx(-1.0)
    assert ref.convert(np.zeros((3, 5, 2)), "tcp", "b2d").shape == (3, 5, 2)
    assert ref.convert([0.0, 0.0], "transfuser2022", "garage").tolist() == [1.3, 0.0]
    with pytest.raises(ValueError):
        ref.convert(np.zeros((2, 3)), "tcp", "garage")
    with pytest.raises(ValueError):
        ref.convert([0.0, 0.0], "tcp", "lidar")


def test_aliases():
    p = [[2.0, -3.0]]
    assert ref.convert(p, "transfuser2021", "carla").tolist() == ref.convert(p, "tcp", "garage").tolist()
    assert ref.convert(p, "nuscenes", "bench2drive").tolist() == p


def test_example_points_are_a_left_curve_pinned_in_every_frame():
    g = ref.EXAMPLE_GARAGE
    assert g.shape == (3, 2) and np.all(np.diff(g[:, 0]) > 0) and np.all(np.diff(g[:, 1]) < 0)
    want = {"garage": [[3.0, -0.3], [6.0, -1.2], [9.0, -2.7]],
            "tcp": [[-0.3, -3.0], [-1.2, -6.0], [-2.7, -9.0]],
            "transfuser2022": [[1.7, -0.3], [4.7, -1.2], [7.7, -2.7]],
            "b2d": [[3.0, 0.3], [6.0, 1.2], [9.0, 2.7]]}
    for frame, pts in want.items():
        np.testing.assert_allclose(ref.example_points(frame), pts, atol=1e-12)


# --------------------------------------------------------------------------------------------
# carla_garage augmentation, route, command
# --------------------------------------------------------------------------------------------


def test_garage_zero_augmentation_is_identity():
    tp = np.array([12.0, -3.5])
    np.testing.assert_array_equal(ref.garage_augment_target_point(tp, 0.0, 0.0), tp)
    route = np.array([[0.0, 0.0], [1.0, 0.2], [2.0, 0.5]])
    np.testing.assert_array_equal(ref.garage_augment_route(route, 0.0, 0.0), route)
    meas = left_turn(15.0)
    np.testing.assert_array_equal(ref.garage_waypoints(meas[:9], 0, y_aug=0.0, yaw_aug_deg=0.0),
                                  ref.garage_waypoints(meas[:9], 0))


def test_garage_translation_moves_points_left():
    """augmentation_translation +1 m: the camera moved right, so points are 1 m further left."""
    np.testing.assert_allclose(ref.garage_augment_target_point([10.0, 0.0], y_aug=1.0), [10.0, -1.0])
    np.testing.assert_allclose(ref.garage_augment_target_point([10.0, 2.0], y_aug=-1.0), [10.0, 3.0])
    np.testing.assert_allclose(ref.garage_augment_route([[0.0, 0.0], [5.0, 0.0]], y_aug=1.0),
                               [[0.0, -1.0], [5.0, -1.0]])
    meas = straight(0.0)
    g = ref.garage_waypoints(meas, 0, y_aug=1.0)
    np.testing.assert_allclose(g[:, 1], -1.0, atol=1e-9)


def test_garage_rotation_is_in_degrees_and_turns_points_left():
    a = math.radians(5.0)
    np.testing.assert_allclose(ref.garage_augment_target_point([10.0, 0.0], yaw_aug_deg=5.0),
                               [10 * math.cos(a), -10 * math.sin(a)], atol=1e-12)
    both = ref.garage_augment_target_point([10.0, 0.0], y_aug=1.0, yaw_aug_deg=5.0)
    np.testing.assert_allclose(both, ref.rot2(a).T @ np.array([10.0, -1.0]), atol=1e-12)   # shift, then rotate


def test_garage_route_resampling_straight():
    route = [[float(i), 0.0] for i in range(-1, 12)]   # first point behind: smooth_path grounds it at 0
    r = ref.garage_route(route)
    assert r.shape == (20, 2)
    np.testing.assert_allclose(r[:, 0], 2.5 + np.arange(20), atol=1e-9)   # 2.5 m, then every 1 m
    np.testing.assert_allclose(r[:, 1], 0.0, atol=1e-9)
    shifted = ref.garage_route(route, y_aug=1.0)   # +1 m: the route lies 1 m to the left
    np.testing.assert_allclose(shifted[:, 1], -1.0, atol=1e-9)   # ((0, 0) is set after the shift)
    assert shifted[0, 0] == pytest.approx(math.sqrt(2.5**2 - 1.0))
    raw = ref.garage_route(route, smooth_route=False)
    np.testing.assert_allclose(raw, np.array(route)[:13].tolist() + [route[-1]] * 7)
    steps = np.linalg.norm(np.diff(ref.garage_route([[0, 0], [3, -1], [6, -3], [9, -6]]), axis=0), axis=1)
    np.testing.assert_allclose(steps, 1.0, atol=1e-9)


def test_commands():
    def idx(v):
        return int(np.argmax(v))
    for fn in (lambda c: ref.tcp_labels([dict(straight(0.0)[0], target_command=c)] + straight(0.0)[1:], 0)["target_command"],
               ref.garage_command_one_hot):
        assert [idx(fn(c)) for c in (-1, 1, 2, 3, 4, 5, 6)] == [3, 0, 1, 2, 3, 4, 5]
    assert idx(ref.garage_command_one_hot(7)) == 3 and idx(ref.garage_command_one_hot(0)) == 3
    with pytest.raises(ValueError):
        ref.tcp_labels([dict(straight(0.0)[0], target_command=7)] + straight(0.0)[1:], 0)


# --------------------------------------------------------------------------------------------
# TCP specifics
# --------------------------------------------------------------------------------------------


def test_tcp_brake_override_only_changes_index_0():
    mu, sigma = np.array([2.0, 3.0]), np.array([4.0, 6.0])
    m, s = ref.tcp_brake_override(mu, sigma, True)
    assert m.tolist() == [0.8, 3.0] and s.tolist() == [5.5, 6.0]
    assert mu.tolist() == [2.0, 3.0] and sigma.tolist() == [4.0, 6.0]   # copies, inputs untouched
    m, s = ref.tcp_brake_override(mu, sigma, False)
    assert m.tolist() == [2.0, 3.0] and s.tolist() == [4.0, 6.0]
    m, s = ref.tcp_brake_override(mu, sigma, np.bool_(True))
    assert m.tolist() == [0.8, 3.0]
    mus, sigmas = ref.tcp_brake_override([mu, mu, mu, mu], [sigma] * 4, [False, True, False, True])
    assert [x.tolist() for x in mus] == [[2.0, 3.0], [0.8, 3.0], [2.0, 3.0], [0.8, 3.0]]
    assert [x.tolist() for x in sigmas] == [[4.0, 6.0], [5.5, 6.0], [4.0, 6.0], [5.5, 6.0]]
    with pytest.raises(ValueError):
        ref.tcp_brake_override([mu], [sigma], [True, False])


def test_tcp_theta_nan_and_null():
    meas = straight(-90.0)
    meas[0] = dict(meas[0], theta=float("nan"))   # NaN -> 0 = north, the true heading here
    np.testing.assert_allclose(ref.tcp_labels(meas, 0)["waypoints"][-1], [0.0, -10.0], atol=1e-9)
    meas[0] = dict(meas[0], theta=None)
    with pytest.raises(ValueError):
        ref.tcp_labels(meas, 0)


def test_transfuser2021_nan_future_theta_is_fixed():
    meas = straight(-90.0)
    meas[2] = dict(meas[2], theta=float("nan"))
    meas[0] = dict(meas[0], theta=float("nan"))
    wps = ref.transfuser2021_waypoints(meas, 0)["waypoints"]
    np.testing.assert_allclose(wps, [[0, -2.5], [0, -5.0], [0, -7.5], [0, -10.0]], atol=1e-9)


def test_sample_frames():
    assert ref.sample_frames(10, "tcp") == list(range(0, 6))
    assert ref.sample_frames(4, "tcp") == []
    assert ref.sample_frames(12, "transfuser2021") == list(range(1, 7))
    assert ref.sample_frames(12, "transfuser2022") == list(range(2, 5))
    assert ref.sample_frames(30, "garage") == list(range(10, 21))
    with pytest.raises(ValueError):
        ref.sample_frames(30, "tcp", rate_hz=4)


# --------------------------------------------------------------------------------------------
# tools/plot_frames.py draws what convert says
# --------------------------------------------------------------------------------------------


def _plot_tool():
    spec = importlib.util.spec_from_file_location("plot_frames", REPO / "tools" / "plot_frames.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_plot_tool_axes_match_convert():
    _plot_tool().check_against_reference()


def test_plot_tool_writes_small_pngs(tmp_path):
    pytest.importorskip("matplotlib")
    tool = _plot_tool()
    written = tool.main(["--out", str(tmp_path)])
    assert written and all(p.suffix == ".png" and 0 < p.stat().st_size < 150_000 for p in written)
    again = tool.main(["--out", str(tmp_path / "again")])
    assert [p.read_bytes() for p in written] == [p.read_bytes() for p in again]   # deterministic
