"""The dataset table: what carla-wds knows of each dataset, as data (a `DatasetInfo` per
dataset, one module per family), and the lookups the core and the wings use instead of naming
a dataset: coordinate frames, LiDAR histogram presets, box parsers, load transforms, the
trainer's controller, sensor rigs, layout names. Core and torch-free.

Importing this package registers each dataset's own codecs (depth_garage8, bev_tf2022,
depth_b2d8: the names their manifests have always recorded) into the codec table under the
kind they belong to. A new dataset is one module here plus its INFO in the registration
line at the end (or a `register_dataset(info)` call from elsewhere).
"""
from __future__ import annotations

import re

from ..modalities import add_codec
from ..modalities.lidar_bev import HistogramPreset
from . import bench2drive, garage, garage_lb2, lead, tcp, transfuser
from .base import (BoxParser, Camera, ControllerConfig, DatasetCodec, DatasetInfo, Frame,
                   PIDGains, Rig)

DATASETS: dict[str, DatasetInfo] = {}
# preset name -> preset, of every dataset: the one live dict (lookups read it, tests may add)
LIDAR_PRESETS: dict[str, HistogramPreset] = {}
# the frame of labels whose layout names none (TCP's; TransFuser 2021 uses it too)
DEFAULT_FRAME = tcp.FRAME
# the trainer's controller for every layout: TCP's PID controller
DEFAULT_CONTROLLER = tcp.CONTROLLER


def register_dataset(info: DatasetInfo) -> DatasetInfo | None:
    """Make `info` the dataset named info.name and register its codecs; returns the info it
    replaces, if any."""
    for c in info.codecs:
        add_codec(c.kind, c.use, c.codec)
    LIDAR_PRESETS.update(info.lidar_presets)
    previous = DATASETS.get(info.name)
    DATASETS[info.name] = info
    return previous


def dataset(name: str) -> DatasetInfo:
    """The dataset a name, alias or layout means (case-insensitive); KeyError naming them."""
    for info in DATASETS.values():
        if name.lower() in (n.lower() for n in info.names):
            return info
    raise KeyError(f"no dataset {name!r}; carla-wds knows {', '.join(all_names())}")


def all_names() -> tuple[str, ...]:
    """Every word that names a dataset: names, aliases (abbreviations) and layouts, sorted."""
    return tuple(sorted({n for info in DATASETS.values() for n in info.names}))


def name_pattern() -> re.Pattern[str]:
    """A regex matching a dataset name as a word or a word part between underscores or
    digits (`depth_garage8`, `B2D_RIG`), case-insensitive."""
    words = sorted(all_names(), key=len, reverse=True)
    return re.compile(r"(?<![a-z])(" + "|".join(map(re.escape, words)) + r")(?![a-z])", re.I)


def layouts() -> tuple[str, ...]:
    """Every layout a registered dataset packs, in table order."""
    return tuple(lay for info in DATASETS.values() for lay in info.layouts)


def frames() -> dict[str, Frame]:
    """frame name -> Frame, of every dataset."""
    return {k: f for info in DATASETS.values() for k, f in info.frames.items()}


def frame_aliases() -> dict[str, str]:
    """other frame names -> the table's name."""
    return {k: v for info in DATASETS.values() for k, v in info.frame_aliases.items()}


def known_frames() -> tuple[str, ...]:
    return tuple(sorted([*frames(), *frame_aliases()]))


def canonical_frame(name: str) -> str:
    """The table's name for a frame (aliases resolved); ValueError naming the known ones."""
    resolved = frame_aliases().get(name, name)
    if resolved not in frames():
        raise ValueError(f"unknown coordinate frame {name!r}; carla-wds knows "
                         f"{', '.join(known_frames())} (docs/coordinates.md)")
    return resolved


def frame(name: str) -> Frame:
    """The Frame of a name or alias; ValueError naming the known ones."""
    return frames()[canonical_frame(name)]


def lidar_presets() -> dict[str, HistogramPreset]:
    """preset name -> preset: the live table (LIDAR_PRESETS), not a copy."""
    return LIDAR_PRESETS


def lidar_preset(name: str) -> HistogramPreset:
    """A LiDAR histogram preset by name; ValueError naming the presets."""
    presets = lidar_presets()
    if name not in presets:
        raise ValueError(f"unknown histogram preset {name!r}; presets: {sorted(presets)}")
    return presets[name]


def box_parsers() -> dict[str, BoxParser]:
    """layout reader name (`read:` of a boxes sensor) -> the parser of that boxes file."""
    return {k: p for info in DATASETS.values() for k, p in info.box_parsers.items()}


def box_parser(reader: str) -> BoxParser:
    parsers = box_parsers()
    if reader not in parsers:
        raise KeyError(f"no box parser for reader {reader!r}; known: {sorted(parsers)}")
    return parsers[reader]


def transforms() -> dict[str, dict[str, float]]:
    """load transform name (a manifest's spec.transforms) -> its constants."""
    return {k: dict(v) for info in DATASETS.values() for k, v in info.transforms.items()}


def rig(name: str) -> Rig:
    """The sensor rig of a dataset (by name, alias or layout); KeyError if it has none."""
    info = dataset(name)
    if info.rig is None:
        raise KeyError(f"dataset {info.name!r} has no fixed sensor rig")
    return info.rig


for _info in (tcp.INFO, transfuser.TRANSFUSER2021, transfuser.TRANSFUSER2022, garage.INFO,
              garage_lb2.INFO, bench2drive.INFO,
              lead.INFO):   # the registration line: one INFO per dataset
    register_dataset(_info)

__all__ = ["BoxParser", "Camera", "ControllerConfig", "DATASETS", "DEFAULT_CONTROLLER",
           "DEFAULT_FRAME", "DatasetCodec", "DatasetInfo", "Frame", "LIDAR_PRESETS", "PIDGains",
           "Rig",
           "all_names", "box_parser", "box_parsers", "canonical_frame", "dataset",
           "frame", "frame_aliases", "frames", "known_frames", "layouts", "lidar_preset",
           "lidar_presets", "name_pattern", "register_dataset", "rig",
           "transforms"]
