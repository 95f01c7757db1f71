"""TransFuser (autonomousvision/transfuser): `transfuser4` (CVPR 2021, four cameras) and
`transfuser2022` (transfuser@22b3ccd): frames, the LiDAR histogram, the label_raw box parser
and the bit-packed BEV codec `bev_tf2022`.

- Frames: TF-2022's ego_waypoint origin is the virtual LiDAR, 1.3 m ahead of the vehicle
  origin (config.py lidar_pos), axes (forward, right); TransFuser 2021 and TF-2022's target
  point use TCP's frame.
- LiDAR: team_code_transfuser/data.py l.446 lidar_to_histogram_features: grid x in [-16, 16] m,
  y in [-32, 0] m, 8 px/m (256 x 256), split at z = -2.3 m, at most 5 points a pixel, channels
  (above, below), then `np.rot90(features, -1, axes=(1, 2))`, no height cut. The points are
  taken as stored (lidar/NNNN.npy item 1, x left, y forward) and y is negated first as
  `CARLA_Data.__getitem__` does (`lidars_i[:, 1] *= -1`). This preset bins the points as
  stored; their `align` (applied to every sample, even at seq_len 1 without rotation) rounds
  points on a bin edge through inv(ego_matrix) @ ego_matrix, which adapter="transfuser2022"
  reproduces (load/adapters/transfuser2022.py lidar_features).
- Boxes (team_code_autopilot/data_agent.py get_bev_cars): a list whose entry 0 is the ego,
  every entry `class: "Car"`, `extent` = FULL size stored [height, length, width] (data.py's
  get_bbox_label unpacks it as `dz, dx, dy`).
- BEV (data_agent.py save_sensors, utils/map_utils.py encode_npy_to_pil): topdown/encoded_NNNN
  .png, 15 planes bit-packed; data.py's BGR2RGB reverses the channels, so its
  decode_pil_to_npy planes 10:12 are planes 0:2 here (road, lane).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..modalities.base import CodecUse
from ..modalities.bev import BitPlanesCodec, pack_bit_planes
from ..modalities.boxes import box_table, known_class
from ..modalities.lidar_bev import HistogramPreset
from .base import DatasetCodec, DatasetInfo, Frame
from .tcp import FRAME as TCP_FRAME

LIDAR_X = 1.3   # config.py lidar_pos: the virtual LiDAR's x ahead of the vehicle origin
FRAME = "transfuser2022"
PRESET = HistogramPreset(
    x_range=(-16.0, 16.0), y_range=(-32.0, 0.0), pixels_per_meter=8.0, split_height=-2.3,
    max_per_pixel=5.0, channels=("above", "below"), use_ground_plane=True,
    orientation="rot90_cw", negate_y=True)
_CLASSES = {"Car": "car"}   # data_agent.py writes "Car" for every entry, the ego too
BOX_READER = "boxes_tf2022"


def tf2022_boxes(label_raw: list) -> np.ndarray:
    """TransFuser 2022 label_raw list -> (K, 14) float32; entry 0 (the ego) gets class ego."""
    def class_of(index: int, entry: dict) -> str:
        cls = known_class(_CLASSES, index, entry, "TransFuser 2022")
        return "ego" if index == 0 else cls

    def half_of(hlw: list[float]) -> list[float]:   # [h, l, w] full -> half [l, w, h]
        return [hlw[1] / 2, hlw[2] / 2, hlw[0] / 2]

    return box_table(label_raw, "TransFuser 2022 label_raw", class_of, half_of)


@dataclass(frozen=True)
class BevTf2022Codec(BitPlanesCodec):
    """TransFuser 2022 topdown/encoded_NNNN.png (see the module docstring)."""
    name: str = "bev_tf2022"
    expected: str = "3-channel bit-packed TransFuser BEV"


pack_bev_tf2022 = pack_bit_planes   # encode_npy_to_pil's packing, under its historical name

TRANSFUSER2021 = DatasetInfo(
    name="transfuser2021", aliases=("tf2021",), layouts=("transfuser4",),
    frame_aliases={"transfuser2021": TCP_FRAME},
    doc="transfuser@cvpr2021 9a90951: four 400x300 PNG cameras")
TRANSFUSER2022 = DatasetInfo(
    name="transfuser2022", aliases=("tf2022",), layouts=("transfuser2022",),
    frames={FRAME: Frame(((0.0, 1.0), (1.0, 0.0)), (-LIDAR_X, 0.0))},
    frame_aliases={"transfuser2022_target_point": TCP_FRAME},
    lidar_presets={"transfuser2022": PRESET},
    box_parsers={BOX_READER: tf2022_boxes},
    codecs=(DatasetCodec("bev", CodecUse("bev_tf2022", "uint8", (), "0/1 per channel"),
                         BevTf2022Codec()),),
    doc="transfuser@22b3ccd (TransFuser 2022)")

__all__ = ["BOX_READER", "BevTf2022Codec", "FRAME", "LIDAR_X", "PRESET", "TRANSFUSER2021",
           "TRANSFUSER2022", "pack_bev_tf2022", "tf2022_boxes"]
