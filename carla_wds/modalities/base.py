"""The `Modality` record: what one kind of member is, from its bytes to the batch.

A kind (depth, semantics, LiDAR, ...) names its codecs and what each decodes to (dtype, shape,
units), how the loader resizes it to the camera size, how samples are collated into a batch,
and where the batch holds it. carla_wds.modalities keeps the one table of them.
"""
from __future__ import annotations

from dataclasses import dataclass

# how a decoded member is resized to the loader's camera size
RESIZE = ("linear", "nearest", "none")
# how samples collate: "fixed" (stacked; same shape in every sample), "rows" (a variable first
# dimension zero-padded to the batch's longest, with a <name>_len count), "record" (a dict of
# stacked arrays), "list" (kept per sample: raw JSON), "cameras" (the camera images)
COLLATE = ("fixed", "rows", "record", "list", "cameras")
# the CARLABatch mapping a kind reaches when it has no attribute of its own
BATCH_MAPPING = "fields"


@dataclass(frozen=True)
class CodecUse:
    """One codec of a kind and what its members decode to (None in `shape`: varies per
    sample; () : as the image header says)."""
    codec: str
    dtype: str
    shape: tuple[int | None, ...]
    units: str

    def kind_row(self, kind: str) -> tuple[str, str, tuple[int | None, ...], str]:
        """(modality, dtype, shape, units): the row a layout sensor of this codec declares."""
        return kind, self.dtype, self.shape, self.units


@dataclass(frozen=True)
class Modality:
    """One kind of member. `batch`: the CARLABatch attribute it becomes, or BATCH_MAPPING
    ("fields": an entry of that one typed mapping, under the member's field name).
    `per_camera`: the name that selects its per-camera members `<per_camera>_<camera>` at
    once, stacked into one (n_cam, H, W[, C]) field named `kind` (empty: none).
    `member`: False for a kind that is parts of another member (calibration: values of the
    measurements record), which a manifest never declares as a member's modality; its
    `parts` are the record's values that make it, each served as a batch attribute.
    `checked`: the loader holds each decoded value to the manifest's float32 (N, width) (a
    row table whose columns a model indexes); `channel_first`: a 2-D value (one plane) gets a
    leading channel axis, so the batch is (B, C, H, W) whatever the codec stored."""
    kind: str
    dtype: str
    shape: tuple[int | None, ...] = ()
    units: str = ""
    resize: str = "none"
    collate: str = "fixed"
    batch: str = BATCH_MAPPING
    codecs: tuple[CodecUse, ...] = ()
    per_camera: str = ""
    member: bool = True
    parts: tuple[str, ...] = ()
    doc: str = ""
    checked: bool = False
    channel_first: bool = False

    def __post_init__(self) -> None:
        if self.resize not in RESIZE or self.collate not in COLLATE:
            raise ValueError(f"modality {self.kind!r}: resize {self.resize!r} (one of {RESIZE}) "
                             f"or collate {self.collate!r} (one of {COLLATE}) is wrong")

    def use(self, codec: str, dtype: str | None = None,
            shape: tuple[int | None, ...] | None = None, units: str | None = None) -> CodecUse:
        """A CodecUse of this kind, its defaults where a value is not given."""
        return CodecUse(codec, self.dtype if dtype is None else dtype,
                        self.shape if shape is None else shape,
                        self.units if units is None else units)


__all__ = ["BATCH_MAPPING", "COLLATE", "CodecUse", "Modality", "RESIZE"]
