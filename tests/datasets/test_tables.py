"""The dataset table (carla_wds.datasets) holds the numbers that were spread over the package
before issue 25 - train/frames.py _FRAMES/_ALIASES, train/control.py TCP_CONTROLLER,
lidar.py PRESETS, boxes.py parsers, calib.py B2D_*, load/decode/fields.py TCP_BRAKE_* - the same
values (copied here from commit e906302), and its codecs write the bytes they always wrote."""
from __future__ import annotations

import cv2
import numpy as np
import pytest

from carla_wds import datasets as ds
from carla_wds.codecs import codec_named
from carla_wds.modalities import CodecUse, QuantizedDepthCodec, codec_kind
from carla_wds.modalities.lidar_bev import HistogramPreset
from tests.tables import restored_tables

OLD_FRAMES = {   # train/frames.py _FRAMES (e906302), _TF2022_LIDAR_X = 1.3
    "tcp": (((1.0, 0.0), (0.0, -1.0)), (0.0, 0.0)),
    "garage": (((0.0, 1.0), (1.0, 0.0)), (0.0, 0.0)),
    "transfuser2022": (((0.0, 1.0), (1.0, 0.0)), (-1.3, 0.0)),
    "b2d": (((0.0, 1.0), (-1.0, 0.0)), (0.0, 0.0)),
}
OLD_ALIASES = {"transfuser2021": "tcp", "transfuser2022_target_point": "tcp", "carla": "garage",
               "bench2drive": "b2d", "nuscenes": "b2d"}


def test_frames_are_the_trainers_old_table():
    assert {k: (f.axes, f.origin) for k, f in ds.frames().items()} == OLD_FRAMES
    assert ds.frame_aliases() == OLD_ALIASES
    assert ds.DEFAULT_FRAME == "tcp"
    assert ds.known_frames() == tuple(sorted([*OLD_FRAMES, *OLD_ALIASES]))
    assert ds.canonical_frame("nuscenes") == "b2d" and ds.frame("carla") == ds.frame("garage")
    with pytest.raises(ValueError, match="unknown coordinate frame 'ue5'; carla-wds knows b2d"):
        ds.canonical_frame("ue5")


def test_the_controller_and_the_brake_override_are_tcps_numbers():
    c = ds.DEFAULT_CONTROLLER
    assert (c.turn.kp, c.turn.ki, c.turn.kd, c.turn.n) == (0.75, 0.75, 0.3, 40)
    assert (c.speed.kp, c.speed.ki, c.speed.kd, c.speed.n) == (5.0, 0.5, 1.0, 40)
    assert (c.max_throttle, c.brake_speed, c.brake_ratio, c.clip_delta, c.aim_dist,
            c.angle_thresh, c.dist_thresh) == (0.75, 0.4, 1.1, 0.25, 4.0, 0.3, 10.0)
    assert c.turn.first_step(2.0) == pytest.approx(0.75 * 2 + 0.75 * 2 / 40 + 0.3 * 2)
    assert ds.transforms() == {"tcp_brake_override": {"mu": 0.8, "sigma": 5.5}}


def test_lidar_presets_are_the_old_ones():
    assert ds.lidar_presets() == {
        "transfuser2022": HistogramPreset(
            x_range=(-16.0, 16.0), y_range=(-32.0, 0.0), pixels_per_meter=8.0,
            split_height=-2.3, max_per_pixel=5.0, channels=("above", "below"),
            use_ground_plane=True, orientation="rot90_cw", negate_y=True),
        "garage": HistogramPreset(
            x_range=(-32.0, 32.0), y_range=(-32.0, 32.0), pixels_per_meter=4.0,
            split_height=0.2, max_per_pixel=5.0, channels=("above",), use_ground_plane=False,
            orientation="transpose", max_height=100.0)}
    with pytest.raises(ValueError, match=r"unknown histogram preset 'x'; presets: \['garage'"):
        ds.lidar_preset("x")


def test_the_rig_is_calibs_old_one():
    rig = ds.rig("b2d")
    assert tuple(c.row() for c in rig.cameras) == (
        ("front", "CAM_FRONT", "front", 0.80, 0.0, 1.60, 0.0, 70.0),
        ("front_left", "CAM_FRONT_LEFT", "front_left", 0.27, -0.55, 1.60, -55.0, 70.0),
        ("front_right", "CAM_FRONT_RIGHT", "front_right", 0.27, 0.55, 1.60, 55.0, 70.0),
        ("back", "CAM_BACK", "back", -2.0, 0.0, 1.60, 180.0, 110.0),
        ("back_left", "CAM_BACK_LEFT", "back_left", -0.32, -0.55, 1.60, -110.0, 70.0),
        ("back_right", "CAM_BACK_RIGHT", "back_right", -0.32, 0.55, 1.60, 110.0, 70.0))
    assert rig.lidar_mount == (-0.39, 0.0, 1.84) and rig.image_size == (900, 1600)
    assert rig.radars == ("radar_front", "radar_front_left", "radar_front_right",
                          "radar_back_left", "radar_back_right")
    with pytest.raises(KeyError, match="has no fixed sensor rig"):
        ds.rig("garage")


def test_box_parsers_read_each_file_as_before():
    tf = ds.box_parser("boxes_tf2022")([
        {"class": "Car", "position": [0, 0, 0], "extent": [1.5, 4.0, 2.0], "yaw": 0.0},
        {"class": "Car", "position": [5, -1, 0], "extent": [1.6, 4.4, 1.8], "yaw": 0.5,
         "speed": 3.0, "brake": 0.0, "num_points": 12, "id": 77}])
    np.testing.assert_array_equal(tf, np.array([
        [4, 0, 0, 0, 2.0, 1.0, 0.75, 0, -1, -1, -1, -1, -1, -1],
        [0, 5, -1, 0, 2.2, 0.9, 0.8, 0.5, 3.0, 0.0, 12, 77, -1, -1]], np.float32))
    garage = ds.box_parser("boxes_garage")([
        {"class": "walker", "position": [1, 2, 3], "extent": [0.3, 0.3, 0.9], "yaw": -1.0,
         "speed": 1.2}])
    np.testing.assert_array_equal(garage, np.array(
        [[1, 1, 2, 3, 0.3, 0.3, 0.9, -1.0, 1.2, -1, -1, -1, -1, -1]], np.float32))
    with pytest.raises(KeyError, match="no box parser for reader 'boxes_x'"):
        ds.box_parser("boxes_x")


def test_dataset_codecs_keep_their_names_kinds_and_bytes():
    assert codec_kind("depth_garage8") == ("depth", "float32", (), "m")
    assert codec_kind("bev_tf2022") == ("bev", "uint8", (), "0/1 per channel")
    assert codec_kind("depth_b2d8") == ("depth", "float32", (), "m")
    metres = np.array([[0.0, 0.1, 0.098, 12.5], [49.9, 50.0, 80.0, 2.5]])
    # garage: (min(d / 50, 1) * 255 + 0.5) as uint8; Bench2Drive: cv2's rint, saturated
    garage = (np.clip(metres / 50.0, 0, 1) * 255.0 + 0.5).astype(np.uint8)
    b2d = np.clip(np.rint(metres), 0, 255).astype(np.uint8)
    for name, want in (("depth_garage8", garage), ("depth_b2d8", b2d)):
        data = codec_named(name).encode(metres)
        assert data == cv2.imencode(".png", want)[1].tobytes(), name
    np.testing.assert_array_equal(codec_named("depth_b2d8").decode(data), b2d.astype(np.float32))
    planes = (np.arange(15 * 2 * 3).reshape(15, 2, 3) % 3 == 0).astype(np.uint8)
    bev = codec_named("bev_tf2022")
    np.testing.assert_array_equal(bev.decode(bev.encode(planes)), planes)
    assert "expected 1-channel 8-bit garage depth" in codec_named("depth_garage8").check(
        cv2.imencode(".png", np.zeros((2, 2, 3), np.uint8))[1].tobytes())


def test_every_name_and_abbreviation_is_listed():
    names = ds.all_names()
    assert {"tcp", "tcp_roach", "roach", "transfuser4", "transfuser2021", "transfuser2022",
            "tf2021", "tf2022", "garage", "carla_garage", "bench2drive", "b2d",
            "garage_lb2", "garage_lb2_simlingo", "pdm_lite", "simlingo",
            "lead", "lead_carla", "transfuser_v6", "tfv6"} == set(names)
    assert ds.layouts() == ("tcp", "tcp_roach", "transfuser4", "transfuser2022", "garage",
                            "garage_lb2", "garage_lb2_simlingo", "bench2drive", "lead")
    pat = ds.name_pattern()
    for hit in ("depth_garage8", "B2D_RIG", "TCP_BRAKE_MU", "tf2022_boxes", "synth_roach"):
        assert pat.search(hit), hit
    for miss in ("background", "garages", "stcp"):
        assert not pat.search(miss), miss
    assert ds.dataset("TF2022").name == "transfuser2022" and ds.dataset("tcp_roach").name == "tcp"


def test_a_dataset_registered_from_a_test_is_in_every_lookup():
    toy = ds.DatasetInfo(
        name="toyset", aliases=("tys",), layouts=("toyset_cams",),
        frames={"toyframe": ds.Frame(((0.0, -1.0), (1.0, 0.0)), (0.5, 0.0))},
        frame_aliases={"toyalias": "toyframe"},
        lidar_presets={"toyset": ds.lidar_preset("garage")},
        box_parsers={"boxes_toy": lambda entries: np.zeros((len(entries), 12), np.float32)},
        codecs=(ds.DatasetCodec("depth", CodecUse("depth_toy100", "float32", (), "m"),
                                QuantizedDepthCodec("depth_toy100", 100.0, "half_up")),),
        transforms={"toy_shift": {"dx": 1.0}})
    with restored_tables():
        assert ds.register_dataset(toy) is None
        assert ds.dataset("tys") is toy and "toyset_cams" in ds.layouts()
        assert ds.canonical_frame("toyalias") == "toyframe"
        assert ds.lidar_preset("toyset") == ds.lidar_preset("garage")
        assert ds.box_parser("boxes_toy")([{}]).shape == (1, 12)
        assert ds.transforms()["toy_shift"] == {"dx": 1.0}
        assert codec_kind("depth_toy100") == ("depth", "float32", (), "m")
        codec = codec_named("depth_toy100")
        np.testing.assert_allclose(codec.decode(codec.encode(np.full((2, 2), 40.0))),
                                   np.full((2, 2), 100 / 255 * 102), rtol=1e-6)
    assert "toyset" not in ds.DATASETS and "toyset" not in ds.lidar_presets()


def test_the_old_paths_name_the_same_objects():
    import carla_wds.boxes as boxes
    import carla_wds.calib as calib
    import carla_wds.lidar as lidar
    import carla_wds.modalities as modalities
    import carla_wds.modalities_b2d as modalities_b2d
    from carla_wds.datasets import bench2drive, garage, transfuser
    assert boxes.garage_boxes is garage.garage_boxes
    assert boxes.tf2022_boxes is transfuser.tf2022_boxes
    assert calib.B2D_RIG == bench2drive.RIG_ROWS and calib.B2D_RADARS == bench2drive.RIG.radars
    assert lidar.PRESETS is ds.lidar_presets()
    assert modalities_b2d.DepthB2D8Codec is bench2drive.DepthB2D8Codec
    with pytest.raises(AttributeError):
        modalities.NoSuchName  # noqa: B018
