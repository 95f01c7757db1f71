"""The lead core room: the strip's cameras by LEAD's targets (config_base.py
camera_calibration) and its 8-bit depth (common_utils.py encode/decode_depth_8bit)."""
from __future__ import annotations

import numpy as np
import pytest

from carla_wds.codecs import codec_named
from carla_wds.datasets import dataset, rig
from carla_wds.datasets.lead import strip_cameras, strip_geometry


def test_the_strip_names_its_cameras_left_to_right():
    assert strip_geometry((384, 1152)) == ("front_left", "front", "front_right")
    assert strip_geometry((384, 2304)) == ("front_left", "front", "front_right", "back_right",
                                           "back", "back_left")
    assert strip_geometry((512, 1024)) == ("front",)
    assert strip_geometry((32, 144)) is None   # other sizes: the metas' num_cameras says
    assert strip_cameras(6)[3] == "back_right"
    with pytest.raises(ValueError, match="num_cameras is 4"):
        strip_cameras(4)
    yaws = [c.yaw for c in rig("lead").cameras]
    assert yaws == [-54.5, 0.0, 54.5] and dataset("tfv6").name == "lead"


def test_depth_is_leads_8_bit_encoding():
    metres = np.array([[0.0, 10.0, 49.9, 80.0]], np.float32)
    data = codec_named("depth_lead8").encode(metres)
    want = (np.clip(metres, 0, 50) / 50 * 255).astype(np.uint8)   # encode_depth_8bit
    np.testing.assert_allclose(codec_named("depth_lead8").decode(data), want / 255 * 50,
                               rtol=1e-6)
