"""The loader's extra fields: decoding the members `fields=[...]` selects, load-time
transforms, and padding them into a batch.

Only the selected members are decoded (the spec passed in holds only those); a member that
is not selected is never touched, so a sample's 40k-point cloud costs nothing to a model that
only wants its cameras. Variable-length fields (LiDAR points, boxes) are zero-padded to the
batch's longest with a `<name>_len` count beside them, so padding is never mistaken for data.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import cv2
import numpy as np

from ...datasets import lidar_preset
from ...extras import Extra
from ...modalities.calibration import resized_intrinsic
from ...modalities.lidar_bev import histogram_features
from ...modalities.measurements import MEASUREMENTS, record_values
from ...modalities.pose import repack_hint
from ...schema import SampleSpec, SchemaError, decode_labels, decode_member
from ...suggest import did_you_mean
from ...modalities import MODALITIES, Modality, modality, per_camera, row_kinds
from ..adapters import Draw, LoadAdapter, SampleState
from .classes import raw_names, served

# A selectable name that is a value of the measurements record, not a member of its own (a
# kind's parts, e.g. calibration's, come from the modality table: record_parts()).
ROUTE = "route"
# Where each modality lands in a CARLABatch (a named attribute, or batch.fields), how it is
# resized, padded and stacked: the modality table (carla_wds.modalities, docs/batch.md), read
# at use time so that a kind registered later is served too.


@dataclass(frozen=True)
class FieldOptions:
    """What the loader does with the extra fields besides decoding them (picklable)."""
    lidar_histogram: str | None = None    # a preset of datasets.lidar_presets(): BEV histogram
    # the load adapters that apply to these shards (load/adapters/), configured; their draws
    # are per (seed, epoch, key), in train passes only
    adapters: tuple[LoadAdapter, ...] = ()
    seed: int = 0
    epoch: int = 0
    train: bool = True
    # JPEG cameras decoded at libjpeg's reduced DCT scale where the output allows (load/decode/jpeg.py)
    exact_resize: bool = False
    # batch.intrinsics and batch.cam2ego from the record, intrinsics scaled to the output size;
    # rig: the pack's cameras, in the record's order
    calibration: bool = False
    rig: tuple[str, ...] = ()
    # per-camera kinds selected by one name (modalities.per_camera()), stacked (n_cam, H, W[, C])
    stacked: tuple[str, ...] = ()
    # each extra image member's (H, W) as the pack recorded it: headers are held to it before
    # anything decodes (a 20000x20000 depth PNG is refused, not allocated)
    extra_sizes: tuple[tuple[str, tuple[int, int]], ...] = ()
    # fields with a class table (load/decode/classes.py) whose saved ids are served as <name>_raw,
    # and those selected only that way
    raw_ids: tuple[str, ...] = ()
    raw_only: tuple[str, ...] = ()
    # selected fields of a kind collated as rows (modality table): always padded with a
    # <name>_len count, whatever the field is called (lidar_top as much as lidar)
    row_fields: tuple[str, ...] = ()


def sample_fields(raw: dict[str, Any], spec: SampleSpec, image_size: tuple[int, int],
                  opts: FieldOptions, where: str, sizes: Any = None
                  ) -> tuple[dict[str, Any], dict[str, Any]]:
    """One raw sample's camera set and labels: (raw with the chosen set's members, labels
    with the selected extra fields under "fields"). The labels move with the twin before
    the LiDAR histogram is taken, so the histogram is of the moved cloud (as carla_garage's
    loader takes it after its camera twin's move)."""
    state, draw = SampleState(), Draw(opts.seed, opts.epoch, opts.train)
    for adapter in opts.adapters:
        raw = adapter.before_decode(raw, draw, state)
    labels = decode_labels(spec, raw, where)
    if spec.extras:
        labels["fields"] = decode_fields(raw, spec, image_size, opts, where)
    for adapter in opts.adapters:
        adapter.after_labels(labels, state)
    fields = labels.get("fields")
    if fields is not None and MEASUREMENTS in fields:
        record_twins(fields[MEASUREMENTS], spec.extra(MEASUREMENTS), state.twin)
    if opts.stacked and fields is not None:
        stack_cameras(fields, spec, opts.stacked)
    if opts.calibration and fields is not None and MEASUREMENTS in fields:
        fields.update(calibration(raw, spec, fields[MEASUREMENTS], image_size, opts.rig,
                                  sizes))
    if opts.lidar_histogram and fields is not None and "lidar" in fields:
        fields["lidar"] = histogram_features(fields["lidar"], lidar_preset(opts.lidar_histogram))
    return raw, labels


def record_twins(record: dict[str, np.ndarray], extra: Extra, twin: bool) -> None:
    """Record fields computed at pack time for the twin camera (MeasField.twin_of: garage's
    route smoothed after the augmentation) take their field's place in a twin sample, and
    are never served under their own name."""
    for f in extra.fields:
        if f.twin_of and f.name in record:
            value = record.pop(f.name)
            if twin:
                record[f.twin_of] = value


def record_parts() -> dict[str, tuple[str, ...]]:
    """Selectable name -> the measurements record's values it is: the route, and each kind
    the modality table makes of record values (calibration: intrinsics, cam2ego)."""
    return {ROUTE: (ROUTE,), **{k: m.parts for k, m in MODALITIES.items() if m.parts}}


def selectable(spec: SampleSpec) -> tuple[list[str], list[str]]:
    """What fields=[...] may name in these shards: (their members, the names served from
    them: record parts, stacked per-camera kinds, `<name>_raw`)."""
    names = [e.name for e in spec.extras if e.twin_of is None]
    held = {f.name for e in spec.extras for f in e.fields}
    extra_ok = [n for n, parts in record_parts().items() if set(parts) <= held]
    return names, extra_ok + stacked_kinds(spec, list(per_camera())) + raw_names(spec)


def check_fields(spec: SampleSpec, fields: list[str] | None) -> tuple[str, ...]:
    """The extra fields a caller selects, each one the shards hold (ValueError otherwise)."""
    if fields is None:
        return ()
    names, extra_ok = selectable(spec)
    parts_of = record_parts()
    bad = [f for f in fields if f not in names + extra_ok]
    if bad or not all(isinstance(f, str) for f in fields):
        hint = "".join(did_you_mean(b, names + extra_ok) or repack_hint(b) for b in bad[:1])
        raise ValueError(f"fields {bad}: not in these shards{hint}; they hold {names + extra_ok} "
                         f"besides the cameras and core labels{_part_of(spec, bad)}")
    wanted = set(fields) | ({MEASUREMENTS} if set(fields) & set(parts_of) else set())
    wanted |= {f"{k}_{cam}" for k in stacked_kinds(spec, fields) for cam in spec.cameras}
    wanted |= {f[:-len("_raw")] for f in fields if f in raw_names(spec)}
    return tuple(n for n in names if n in wanted)


def _part_of(spec: SampleSpec, bad: list) -> str:
    """Where a refused name is one value of a selectable field (action_mu of the measurements
    record): which field to select, and where the value lands in the batch."""
    owner = {f.name: e.name for e in spec.extras if e.twin_of is None for f in e.fields}
    hints = [f"{name!r} is a value of {owner[name]!r}: select fields=[{owner[name]!r}] and read "
             f"batch.{owner[name]}[{name!r}]" for name in bad
             if isinstance(name, str) and name in owner]
    return ("; " + "; ".join(hints)) if hints else ""


def stacked_kinds(spec: SampleSpec, fields: list[str]) -> list[str]:
    """The per-camera kinds among `fields` that the shards hold for every selected camera
    (and that are no member's own name)."""
    names = {e.name for e in spec.extras}
    return [k for k in per_camera() if k in fields and k not in names
            and all(f"{k}_{cam}" in names for cam in spec.cameras)]


def stack_cameras(fields: dict[str, Any], spec: SampleSpec, kinds: tuple[str, ...]) -> None:
    """<kind>_<camera> values ((1, H, W[, C]) each) -> one (n_cam, H, W[, C]) field."""
    stacked = per_camera()
    for kind in kinds:
        parts = [fields.pop(f"{kind}_{cam}") for cam in spec.cameras]
        fields[stacked[kind]] = np.concatenate(parts, axis=0)


def calibration(raw: dict[str, Any], spec: SampleSpec, record: dict[str, np.ndarray],
                image_size: tuple[int, int], rig: tuple[str, ...],
                sizes: Any = None) -> dict[str, np.ndarray]:
    """intrinsics (n_cam, 3, 3) for the images as the loader gives them (each camera's K
    scaled from its stored size to image_size) and cam2ego (n_cam, 4, 4) as stored, in the
    order of spec.cameras (a `cameras=` subset too); `rig` is the pack's camera order, the
    record's. The stored sizes are the manifest's (`sizes`, which the decoder holds every
    header to), read from the headers only for packs that recorded none."""
    order = [rig.index(c) for c in spec.cameras]
    stored = [s or spec.codec(m).size(raw[m])
              for s, m in zip(sizes or [None] * len(order), spec.image_members)]
    ks = [resized_intrinsic(record["intrinsics"][i], hw, image_size)
          for i, hw in zip(order, stored)]
    return {"intrinsics": np.stack(ks).astype(np.float32),
            "cam2ego": record["cam2ego"][order].astype(np.float32)}


def _image_like(e: Extra, value: np.ndarray, image_size: tuple[int, int], codec) -> np.ndarray:
    """depth/semantics: (1, H, W) at the camera's output size; semantics and other class ids
    nearest-neighbour only, so a class id is never interpolated."""
    h, w = image_size
    if value.shape[:2] != (h, w):
        interp = getattr(codec, "interpolation", cv2.INTER_NEAREST)
        value = cv2.resize(value, (w, h), interpolation=interp)
    return value[None]


def decode_fields(raw: dict[str, Any], spec: SampleSpec, image_size: tuple[int, int],
                  opts: FieldOptions, where: str) -> dict[str, Any]:
    """The selected extra members of one raw sample -> field name -> value."""
    out: dict[str, Any] = {}
    for e in spec.extras:
        if e.twin_of is not None:
            continue
        value = decode_member(spec, raw, e.member, where)
        kind = modality(e.modality)   # its row of the table: how the loader serves it
        if e.modality == MEASUREMENTS:
            value = record_values(value, e, where)
            for adapter in opts.adapters:
                value = adapter.on_record(value)
        elif _at_camera_size(kind):
            value = _image_like(e, value, image_size, spec.codec(e.member))
        elif kind.channel_first and value.ndim == 2:
            value = value[None]
        elif kind.checked:
            value = _checked_rows(value, e, where)
        elif hasattr(kind, "serve"):   # a kind that serves its member as named fields (pose)
            out.update(kind.serve(value, e, where))
            continue
        if e.classes:   # the project's classes and/or the saved ids (load/decode/classes.py)
            out.update(served(e, value, opts.raw_ids, opts.raw_only, where))
            continue
        out[e.name] = value
    return out


def _at_camera_size(m: Modality) -> bool:
    """A kind of per-pixel fields (depth, semantics, instance) the loader resizes to the
    camera size (the cameras' own kind is stacked apart)."""
    return m.resize != "none" and m.collate == "fixed"


def _checked_rows(value: Any, e: Extra, where: str) -> np.ndarray:
    if not isinstance(value, np.ndarray) or value.ndim != 2 or value.dtype != np.float32 or (
            e.shape[1] is not None and value.shape[1] != e.shape[1]):
        raise SchemaError(f"{where}: {e.member} decodes to {getattr(value, 'shape', value)}; "
                          f"the manifest declares float32 {list(e.shape)}", fix="re-pack the shard")
    return value


def row_fields(spec: SampleSpec) -> tuple[str, ...]:
    """The extra fields of `spec` whose kind the modality table collates as rows."""
    rows = row_kinds()
    # a kind may serve one member as several row fields (tracks: tracks and tracks_valid)
    return tuple(n for e in spec.extras if e.modality in rows
                 for n in getattr(modality(e.modality), "served_names", lambda x: (x.name,))(e))


def collate_fields(rows: list[dict[str, Any] | None], names: tuple[str, ...],
                   row_names: tuple[str, ...] = (), stack: Stack | None = None
                   ) -> dict[str, Any]:
    """Per-sample field values (None for padding) -> batched arrays; `row_names` (fields of a
    rows kind) and other variable first dimensions padded with a <name>_len count,
    measurements a dict of stacked arrays. `stack(name, arrays)`: where an array field's
    rows are stacked (np.stack into new memory by default; batch.ReusedBlock's reuses it)."""
    stack = stack or _new_stack
    out: dict[str, Any] = {}
    real = next((r for r in rows if r is not None), None)
    if real is None:
        return out
    for name in names:
        first = real[name]
        # a record decodes to a dict of arrays; a JSON object (a dict of plain values) is
        # served as a list like every JSON value
        if isinstance(first, dict) and all(isinstance(v, (np.ndarray, np.generic))
                                           for v in first.values()):
            out[name] = {k: np.stack([(r[name][k] if r else np.zeros_like(v)) for r in rows])
                         for k, v in first.items()}
        elif isinstance(first, np.ndarray) and (first.ndim >= 2 and name in row_names
                                                 or _varies(rows, name)):
            out[name], out[f"{name}_len"] = _pad(rows, name, first)
        elif isinstance(first, (np.ndarray, np.generic)):   # 0-d values too (camera_set)
            out[name] = stack(name, [(r[name] if r else np.zeros_like(first)) for r in rows])
        else:
            out[name] = [r[name] if r else None for r in rows]
    return out


Stack = Callable[[str, list], np.ndarray]


def _new_stack(name: str, arrays: list) -> np.ndarray:
    return np.stack(arrays)


def _varies(rows: list, name: str) -> bool:
    shapes = {np.shape(r[name]) for r in rows if r is not None}
    return len(shapes) > 1


def _pad(rows: list, name: str, first: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    lens = np.array([len(r[name]) if r else 0 for r in rows], np.int64)
    out = np.zeros((len(rows), int(lens.max(initial=0)), *first.shape[1:]), first.dtype)
    for i, r in enumerate(rows):
        if r is not None:
            out[i, :lens[i]] = r[name]
    return out, lens
