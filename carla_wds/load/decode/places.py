"""Where each modality lands in a CARLABatch, from the modality table (carla_wds.modalities).

One rule for every kind: a selected field whose name is its kind's batch attribute (a layout's
one `depth`, or the stack a per-camera selector makes) lands in that typed attribute, its
`<name>_len` count beside it for a kind of variable row count; every other selected field
lands in `batch.fields`, the one typed mapping, under its field name. docs/batch.md is
`render()`'s output (tests/load/test_batch_table.py holds the two equal).
"""
from __future__ import annotations

from ...codecs import CODECS   # the complete table: the datasets' own codecs registered too
from ...modalities import BATCH_MAPPING, MODALITIES, Modality

# CARLABatch attributes that are no kind's: which camera set a sample is (the camera twin's
# load adapter), and the record's route served apart (see CARLABatch.route)
OTHER_ATTRIBUTES = ("camera_set", "route")


def attributes_of(m: Modality) -> tuple[str, ...]:
    """The attributes a kind's fields land in (none: the mapping)."""
    if m.parts:
        return m.parts
    return (m.batch,) if m.batch and m.batch != BATCH_MAPPING else ()


def attribute_names() -> tuple[str, ...]:
    """The field names that land in CARLABatch attributes of the same name (the cameras
    excepted: every batch has them), in table order."""
    out: list[str] = []
    for m in MODALITIES.values():
        if m.collate == "cameras":
            continue
        out += attributes_of(m)
        if m.collate == "rows":
            out += [f"{n}_len" for n in attributes_of(m)]
    return (*out, OTHER_ATTRIBUTES[0])


def place(m: Modality) -> str:
    """Where a kind's field is read in a batch, as docs/batch.md writes it."""
    if m.collate == "record":
        return f"`batch.{m.batch}[<value>]`"
    own = attributes_of(m)
    names = own or ("fields[<name>]",)
    out = ", ".join(f"`batch.{n}`" for n in names)
    if m.collate == "rows":
        lens = [f"{n}_len" for n in own] or ["fields[<name>_len]"]
        out += " + " + ", ".join(f"`batch.{n}`" for n in lens)
    return out


def _selected_by(m: Modality) -> str:
    if m.collate == "cameras":
        return "always (`cameras=` picks which)"
    if not m.member:
        return f"`fields=[{m.kind!r}]`"
    if m.per_camera:
        return (f"`fields=[{m.per_camera!r}]` (every camera's `{m.per_camera}_<camera>`, "
                f"stacked); one such member alone: `batch.fields[<name>]`")
    return "`fields=[<name>]`"


HEAD = """# Where each modality lands in the batch

Generated from the modality table (`carla_wds.modalities.MODALITIES`) by
`carla_wds.load.decode.places.render()`; `tests/load/test_batch_table.py` fails when the two differ.

Every field of `CARLABatch`, with its shape, dtype, unit, frame and when it is present, is
documented once, in the class's docstring: the [`CARLABatch` reference](reference/carla_batch.md)
and `help(CARLABatch)` show it. Every batch holds the cameras (`images`, uint8) and the core
labels, float32: `speed` (B,) in m/s; `target_point` (B, 2), `waypoints` (B, pred_len, 2) and
`waypoints_diff` (each waypoint minus the one before) in metres in the pack's label frame
([Coordinates](coordinates.md)); `command` (B, 6), one-hot with the columns left, right,
straight, follow lane, change left, change right; and `keys`, `valid`, `errors`. The rest of
this page says where each packed modality lands when selected with `fields=[...]`.

A selected field whose name is its kind's batch attribute lands in that typed attribute of
`CARLABatch`; every other selected field lands in `batch.fields`, the one typed mapping
(`dict[str, torch.Tensor | list]`), under its field name. Kinds of a variable row count are
zero-padded to the batch's longest with a `<name>_len` count (B,) beside them.

| kind | in the batch | what it holds | codecs | resize | selected by |
|------|--------------|---------------|--------|--------|-------------|
"""
TAIL = """
Besides the kinds: `batch.camera_set` (B,) int8 says which camera set each sample got, on
shards with a camera twin (1: the twin's; a load adapter's, `carla_wds.load.adapters`);
`batch.route` is the measurements record's route; `batch.fields["<name>_raw"]` holds the
saved class ids of a field with a class table; raw JSON entries are per-sample lists (None
for padding). `batch.extras` is a deprecated alias of `batch.fields` (None when empty), kept
for one release.
"""


def _codecs(m: Modality) -> str:
    """The kind's registered codecs (a record's values have none of their own)."""
    return ", ".join(u.codec for u in m.codecs if u.codec in CODECS) or "-"


def render() -> str:
    """docs/batch.md: one row per kind of the table."""
    rows = [f"| {m.kind} | {place(m)} | {m.doc} | {_codecs(m)} | {m.resize} | "
            f"{_selected_by(m)} |" for m in MODALITIES.values()]
    return HEAD + "\n".join(rows) + "\n" + TAIL


__all__ = ["OTHER_ATTRIBUTES", "attribute_names", "attributes_of", "place", "render"]
