"""What carla-wds knows of a dataset, as data: `DatasetInfo`.

Core and torch-free. One module per dataset family (tcp, transfuser, garage, bench2drive)
defines its infos; carla_wds.datasets keeps the table and the lookups the core and the wings
use (frames, LiDAR presets, box parsers, load transforms, codecs, the trainer's controller),
so no module outside the dataset rooms names a dataset.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..codecbase import Codec
from ..modalities.base import CodecUse
from ..modalities.lidar_bev import HistogramPreset

# rows of the 2x2 map from (right, forward) metres, and the origin offset in the frame
Axes = tuple[tuple[float, float], tuple[float, float]]


@dataclass(frozen=True)
class Frame:
    """An ego frame of labels: point_in_frame = axes @ (right, forward) + origin."""
    axes: Axes
    origin: tuple[float, float] = (0.0, 0.0)


@dataclass(frozen=True)
class PIDGains:
    kp: float
    ki: float
    kd: float
    n: int   # the controller's window (buffer) size

    def first_step(self, error: Any) -> Any:
        """What a fresh PIDController's step(error) returns (its window starts as n zeros)."""
        return self.kp * error + self.ki * error / self.n + self.kd * error


@dataclass(frozen=True)
class ControllerConfig:
    """A waypoint-following controller's values (the trainer's offline steer/throttle/brake)."""
    turn: PIDGains
    speed: PIDGains
    max_throttle: float   # upper limit on throttle signal value in dataset
    brake_speed: float    # desired speed below which brake is triggered
    brake_ratio: float    # ratio of speed to desired speed at which brake is triggered
    clip_delta: float     # maximum change in speed input to longitudinal controller
    aim_dist: float       # distance to search around for aim point
    angle_thresh: float   # outlier control detection angle
    dist_thresh: float    # target point forward distance for outlier filtering
    source: str = ""      # whose controller it is, as the trainer's log names it


@dataclass(frozen=True)
class Camera:
    """One camera of a rig: carla-wds name, the dataset's sensor id and folder suffix, mount
    x, y, z (m) and yaw (deg) in CARLA's vehicle frame, horizontal field of view (deg)."""
    name: str
    sensor: str
    folder: str
    x: float
    y: float
    z: float
    yaw: float
    fov: float

    def row(self) -> tuple[str, str, str, float, float, float, float, float]:
        return (self.name, self.sensor, self.folder, self.x, self.y, self.z, self.yaw, self.fov)


@dataclass(frozen=True)
class Rig:
    """A fixed sensor rig: cameras, the LiDAR mount (x, y, z m), the radars' names in the
    order carla-wds numbers them, and the cameras' image size (height, width), as
    `image_size` is written everywhere in carla-wds."""
    cameras: tuple[Camera, ...]
    lidar_mount: tuple[float, float, float]
    radars: tuple[str, ...]
    image_size: tuple[int, int]


@dataclass(frozen=True)
class DatasetCodec:
    """A codec a dataset's members are stored with: the kind it belongs to, what it decodes
    to, and the codec (registered under its own, historical name)."""
    kind: str
    use: CodecUse
    codec: Codec


BoxParser = Callable[[Any], np.ndarray]


@dataclass(frozen=True)
class DatasetInfo:
    """One dataset. `aliases`: other names and abbreviations code and configs use for it;
    `layouts`: the pack layouts it packs; `frames` / `frame_aliases`: the coordinate frames
    its labels are in (docs/coordinates.md); `lidar_presets`: its loader's BEV histogram;
    `box_parsers`: layout reader name -> its boxes file's parser; `codecs`: its own codecs;
    `transforms`: load transforms its manifests may name -> their constants; `controller`:
    the trainer's controller it defines; `rig`: its fixed sensor rig."""
    name: str
    aliases: tuple[str, ...] = ()
    layouts: tuple[str, ...] = ()
    frames: Mapping[str, Frame] = field(default_factory=dict)
    frame_aliases: Mapping[str, str] = field(default_factory=dict)
    lidar_presets: Mapping[str, HistogramPreset] = field(default_factory=dict)
    box_parsers: Mapping[str, BoxParser] = field(default_factory=dict)
    codecs: tuple[DatasetCodec, ...] = ()
    transforms: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    controller: ControllerConfig | None = None
    rig: Rig | None = None
    doc: str = ""

    @property
    def names(self) -> tuple[str, ...]:
        """Its name, aliases and layouts: every word that means this dataset."""
        return tuple(dict.fromkeys((self.name, *self.aliases, *self.layouts)))


__all__ = ["Axes", "BoxParser", "Camera", "ControllerConfig", "DatasetCodec", "DatasetInfo",
           "Frame", "PIDGains", "Rig"]
