"""The modality table: one file per kind, one row per kind in `_TABLE` below.

Core and torch-free. Each kind file (image, depth, semantics, bev, lidar, boxes, calibration,
measurements, other) defines its codecs (generic names only) and its `Modality`: dtype, shape,
units, resize rule, collate rule and where the batch holds it (a CARLABatch attribute, or an
entry of the one typed mapping `BATCH_MAPPING`). The kind files are imported at the top and
the table is built from them here; a dataset whose members need a codec of its own (an 8-bit
depth of its own scale, say) adds it to a kind with `add_codec` (carla_wds.datasets), and a new
kind is `register_modality(Modality(...), codecs)`, from a file here or from outside.

| kind         | codecs                                  | batch                    | collate |
|--------------|-----------------------------------------|--------------------------|---------|
| rgb          | png, jpg, raw                           | images                   | cameras |
| depth        | depth_carla24 (+ datasets' 8-bit ones)  | depth                    | fixed   |
| semantics    | semantics                               | semantics                | fixed   |
| bev          | bev_classes (+ datasets' bit planes)    | bev                      | fixed   |
| lidar        | points, laz                             | lidar (+ lidar_len)      | rows    |
| boxes        | boxes                                   | boxes (+ boxes_len)      | rows    |
| json         | json                                    | fields[name]             | list    |
| measurements | record                                  | measurements             | record  |
| radar        | - (npy, read by the dataset)            | fields[name] (+ _len)    | rows    |
| instance     | instance                                | fields[name]             | fixed   |
| expert       | - (npy)                                 | fields[name]             | fixed   |
| calibration  | - (record values)                       | intrinsics, cam2ego      | fixed   |
| pose         | - (npy, float64 4x4)                    | fields[name] (+ _rh)     | fixed   |
| can_bus      | - (npy, float64 18)                     | fields[name]             | fixed   |
| tracks       | - (npy, (n, T, 4))                      | fields[name] (+ _valid)  | rows    |

Per-camera kinds (depth, semantics, instance) stack one member per camera into (n_cam, ...).
docs/batch.md is the full table, generated from MODALITIES (load/decode/places.py; a test checks it).
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from ..codecbase import Codec, SchemaError, register
from . import bev, boxes, calibration, depth, image, lidar, measurements, other, pose, semantics
from . import tracks
from .base import BATCH_MAPPING, COLLATE, RESIZE, CodecUse, Modality
from .depth import DepthCarla24Codec, QuantizedDepthCodec, depth_metres
from .lidar import LazCodec, PointsCodec, encode_laz, points_array, points_problem
from .semantics import InstanceCodec, SemanticsCodec
from .bev import BevClassesCodec, BitPlanesCodec, pack_bit_planes

MODALITIES: dict[str, Modality] = {}


def register_modality(m: Modality, codecs: Iterable[Codec] = ()) -> Modality | None:
    """Make `m` the kind named m.kind and register its codecs; returns the one it replaces."""
    for codec in codecs:
        register(codec)
    previous = MODALITIES.get(m.kind)
    MODALITIES[m.kind] = m
    return previous


def add_codec(kind: str, use: CodecUse, codec: Codec | None = None) -> None:
    """Add a codec to an existing kind (a dataset's own depth scale, say): `use` says what its
    members decode to; `codec` is registered under its name (None: already registered)."""
    if codec is not None:
        register(codec)
    m = modality(kind)
    kept = tuple(u for u in m.codecs if u.codec != use.codec)
    MODALITIES[kind] = replace(m, codecs=kept + (use,))


def modality(kind: str) -> Modality:
    """The table's row of a kind; SchemaError naming the known ones."""
    if kind not in MODALITIES:
        raise SchemaError(f"no modality {kind!r}; carla-wds knows {sorted(MODALITIES)}")
    return MODALITIES[kind]


def codec_kinds() -> dict[str, tuple[str, str, tuple[int | None, ...], str]]:
    """codec name -> (modality, decoded dtype, decoded shape, units), every kind's codecs in
    table order (None in a shape: varies per sample; (): as the image header says)."""
    out: dict[str, tuple[str, str, tuple[int | None, ...], str]] = {}
    for m in MODALITIES.values():
        for use in m.codecs:
            out.setdefault(use.codec, use.kind_row(m.kind))
    return out


def codec_kind(codec: str) -> tuple[str, str, tuple[int | None, ...], str]:
    """(modality, dtype, shape, units) of a codec name; KeyError naming the known ones."""
    kinds = codec_kinds()
    if codec not in kinds:
        raise KeyError(f"no modality has codec {codec!r}; known: {sorted(kinds)}")
    return kinds[codec]


def member_kinds() -> tuple[str, ...]:
    """The kinds a manifest may declare as a member's modality, in table order."""
    return tuple(k for k, m in MODALITIES.items() if m.member)


def per_camera() -> dict[str, str]:
    """selector -> field: the name selecting a kind's <selector>_<camera> members at once,
    and the (n_cam, ...) field they stack into (the kind)."""
    return {m.per_camera: k for k, m in MODALITIES.items() if m.per_camera}


def row_kinds() -> tuple[str, ...]:
    """Kinds of a variable row count, padded with a <name>_len count."""
    return tuple(k for k, m in MODALITIES.items() if m.collate == "rows")


def batch_attributes() -> tuple[str, ...]:
    """The CARLABatch attributes the selectable kinds reach (not the cameras nor the
    measurements record, which every batch has its own way), in table order."""
    out: list[str] = []
    for m in MODALITIES.values():
        if m.collate in ("cameras", "record"):
            continue
        out += m.parts or ([m.batch] if m.batch and m.batch != BATCH_MAPPING else [])
    return tuple(out)


def markdown_table() -> str:
    """The table as Markdown (kind, codecs, batch, collate, resize, units): the documented
    table of where each kind reaches the batch is generated from (or checked against) this.
    Complete (the datasets' own codecs too) once carla_wds.codecs is imported."""
    rows = ["| kind | codecs | batch | collate | resize | units |", "|---" * 6 + "|"]
    for m in MODALITIES.values():
        batch = ", ".join(m.parts) if m.parts else (
            f"{BATCH_MAPPING}[name]" if m.batch == BATCH_MAPPING else m.batch)
        rows.append(f"| {m.kind} | {', '.join(u.codec for u in m.codecs) or '-'} | {batch} | "
                    f"{m.collate} | {m.resize} | {m.units or '-'} |")
    return "\n".join(rows) + "\n"


_TABLE = (   # one row per kind: (its Modality, the codecs its file defines)
    (image.RGB, image.KIND_CODECS),
    (depth.DEPTH, depth.KIND_CODECS),
    (semantics.SEMANTICS, semantics.SEMANTICS_CODECS),
    (bev.BEV, bev.KIND_CODECS),
    (lidar.LIDAR, lidar.KIND_CODECS),
    (boxes.BOXES, ()),
    (other.JSON, ()),
    (measurements.MEASUREMENTS_KIND, ()),
    (other.RADAR, ()),
    (semantics.INSTANCE, semantics.INSTANCE_CODECS),
    (other.EXPERT, ()),
    (calibration.CALIBRATION, ()),
    (pose.POSE_KIND, ()),
    (pose.CAN_BUS_KIND, ()),
    (tracks.TRACKS_KIND, ()),
)
for _m, _codecs in _TABLE:
    register_modality(_m, _codecs)

__all__ = ["BATCH_MAPPING", "BevClassesCodec", "BitPlanesCodec", "COLLATE", "CodecUse",
           "DepthCarla24Codec", "InstanceCodec", "LazCodec", "MODALITIES", "Modality",
           "PointsCodec", "QuantizedDepthCodec", "RESIZE", "SemanticsCodec", "add_codec",
           "batch_attributes", "codec_kind", "codec_kinds", "depth_metres", "encode_laz",
           "markdown_table", "member_kinds", "modality", "pack_bit_planes", "per_camera", "points_array",
           "points_problem", "register_modality", "row_kinds"]
