"""The complete codec table, and the lookups every reader and writer uses.

Built bottom-up, with no import at a module's end: `codecbase` holds the codec classes and the
registry dict; `carla_wds.modalities` (one file per kind) imports it and registers the generic
codecs (png, jpg, npy, json, record, depth_carla24, semantics, bev_classes, points, laz,
instance); `carla_wds.datasets` imports both and registers the dataset-named ones under their
historical names (depth_garage8, bev_tf2022, depth_b2d8), so the bytes of a shard and the codec
names its manifest records are unchanged. Importing this module imports all three: a pack, a
loader, `verify --deep` or `inspect` never meets "no codec named ..." for want of an import.
"""
from __future__ import annotations

from . import datasets as _datasets  # noqa: F401 - registers the dataset-named codecs
from . import modalities as _modalities  # noqa: F401 - registers the generic kinds' codecs
from .codecbase import (CODECS, PICKLE_SUFFIXES, Codec, Data, ImageCodec, ImageHeaderError,
                        JpegCodec, JsonCodec, LimitError, NpyCodec, PngCodec, RecordCodec,
                        SchemaError, bounded_image, check_npy_bytes, image_problem, json_loads,
                        npy_header, register)


def codec_named(name: str) -> Codec:
    """The registered codec of a name the manifest recorded."""
    if name not in CODECS:
        raise SchemaError(f"no codec named {name!r}; this carla-wds has {sorted(CODECS)}",
                          fix="upgrade carla-wds to the version that packed the shards, "
                              "or re-pack them")
    return CODECS[name]


def codec_for(member: str) -> Codec:
    """The codec of a member name such as `front.png` or `waypoints.npy`, by its suffix: the
    default codec of a suffix is the one of that name. Pickle suffixes are refused."""
    ext = member.rsplit(".", 1)[-1].lower()
    if ext in PICKLE_SUFFIXES:
        raise SchemaError(f"member {member!r} is a pickle; carla-wds never decodes pickles",
                          fix="re-pack with `carla-wds pack`, which stores arrays as .npy")
    if ext not in CODECS:
        raise SchemaError(f"member {member!r} has no codec; known: {sorted(CODECS)}")
    return CODECS[ext]


__all__ = ["CODECS", "Codec", "Data", "ImageCodec", "ImageHeaderError", "JpegCodec", "JsonCodec",
           "LimitError", "NpyCodec", "PICKLE_SUFFIXES", "PngCodec", "RecordCodec", "SchemaError",
           "bounded_image", "check_npy_bytes", "codec_for", "codec_named", "image_problem",
           "json_loads", "npy_header", "register"]
