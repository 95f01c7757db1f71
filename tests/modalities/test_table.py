"""The modality table (carla_wds.modalities): a kind registered from outside the package is in
every lookup and its codec works; the table gives the lookups the packer and the loader kept
as their own tables before issue 25 (pack/layout_spec.py _KINDS, load/decode/fields.py PER_CAMERA,
ROWS and BATCH_FIELDS, extras.MODALITIES), row for row."""
from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pytest

from carla_wds.codecbase import Codec, Data, SchemaError
from carla_wds.codecs import CODECS, codec_for, codec_named
from carla_wds.extras import extras_from_doc
import carla_wds.modalities as modalities_pkg
from carla_wds.modalities.boxes import BOX_UNITS
from carla_wds.modalities import (MODALITIES, CodecUse, Modality, batch_attributes, codec_kind,
                                  codec_kinds, markdown_table, member_kinds, modality,
                                  per_camera, register_modality, row_kinds)
from tests.tables import restored_tables


class ToyRunLengthCodec(Codec):
    """A kind of the test's own: uint8 runs as (value, count) byte pairs."""
    name: ClassVar[str] = "toyrle"

    def encode(self, value: Any) -> bytes:
        arr = np.asarray(value, np.uint8)
        out, i = bytearray(), 0
        while i < len(arr):
            j = i
            while j < len(arr) and arr[j] == arr[i] and j - i < 255:
                j += 1
            out += bytes((int(arr[i]), j - i))
            i = j
        return bytes(out)

    def decode(self, data: Data) -> np.ndarray:
        pairs = np.frombuffer(bytes(data), np.uint8).reshape(-1, 2)
        return np.repeat(pairs[:, 0], pairs[:, 1])

    def check(self, data: Data) -> str | None:
        return None if len(data) % 2 == 0 else "odd length; expected (value, count) pairs"


TOY = Modality("toyruns", "uint8", (None,), "class id", collate="rows",
               codecs=(CodecUse("toyrle", "uint8", (None,), "class id"),), doc="a test's kind")


def test_a_kind_registered_from_a_test_is_in_every_lookup_and_its_codec_works():
    with restored_tables():
        assert register_modality(TOY, [ToyRunLengthCodec()]) is None
        assert MODALITIES["toyruns"] is TOY and modality("toyruns") is TOY
        assert codec_kind("toyrle") == ("toyruns", "uint8", (None,), "class id")
        assert "toyruns" in member_kinds() and "toyruns" in row_kinds()
        codec = codec_named("toyrle")   # the complete table every reader uses
        assert isinstance(codec, ToyRunLengthCodec) and codec_for("labels.toyrle") is codec
        values = np.array([3, 3, 3, 0, 7, 7], np.uint8)
        data = codec.encode(values)
        assert data == bytes([3, 3, 0, 1, 7, 2]) and codec.check(data) is None
        np.testing.assert_array_equal(codec.decode(data), values)
        # a manifest may declare members of the new kind (checked against the live table)
        doc = [{"name": "runs", "member": "runs.toyrle", "codec": "toyrle",
                "modality": "toyruns", "dtype": "uint8", "shape": [None]}]
        (extra,) = extras_from_doc(doc, "m")
        assert (extra.modality, extra.codec, extra.shape) == ("toyruns", "toyrle", (None,))
    assert "toyruns" not in MODALITIES and "toyrle" not in CODECS   # restored
    with pytest.raises(SchemaError, match="modality 'toyruns'"):
        extras_from_doc(doc, "m")


def test_a_kind_with_a_wrong_rule_is_refused():
    with pytest.raises(ValueError, match="resize 'cubic'"):
        Modality("bad", "uint8", resize="cubic")
    with pytest.raises(SchemaError, match="no modality 'nope'"):
        modality("nope")
    with pytest.raises(KeyError, match="no modality has codec 'nope'"):
        codec_kind("nope")


# pack/layout_spec.py _KINDS before issue 25 (commit e906302)
OLD_KINDS = {
    "png": ("rgb", "uint8", (), ""), "jpg": ("rgb", "uint8", (), ""),
    "depth_carla24": ("depth", "float32", (), "m"),
    "depth_garage8": ("depth", "float32", (), "m"),
    "semantics": ("semantics", "uint8", (), "class id"),
    "bev_tf2022": ("bev", "uint8", (), "0/1 per channel"),
    "bev_classes": ("bev", "uint8", (), "class id"),
    "points": ("lidar", "float32", (None, 4), "m"),
    "laz": ("lidar", "float32", (None, 3), "m"),
    # issue 26: the box table gained affects_ego and light_state; its manifest row now
    # gives the width and names every column
    "boxes": ("boxes", "float32", (None, 14), BOX_UNITS),
}


NEW_KINDS = ("pose", "can_bus", "tracks")   # issue 27 (modalities/pose.py, tracks.py)


def test_the_table_gives_the_lookups_pack_and_load_kept_before():
    kinds = codec_kinds()
    assert {k: kinds[k] for k in OLD_KINDS} == OLD_KINDS
    assert all(codec_kind(k) == row for k, row in OLD_KINDS.items())
    # load/decode/fields.py PER_CAMERA, ROWS, BATCH_FIELDS; extras.MODALITIES (e906302)
    assert per_camera() == {"depth": "depth", "semantic": "semantics", "instance": "instance"}
    assert row_kinds() == ("lidar", "boxes", "radar", "tracks")   # tracks: issue 27
    assert set(batch_attributes()) | {"camera_set"} == {
        "depth", "semantics", "bev", "lidar", "boxes", "camera_set", "intrinsics", "cam2ego"}
    # the kinds kept before, in their order; issue 27's temporal kinds after them
    assert member_kinds() == ("rgb", "depth", "semantics", "bev", "lidar", "boxes", "json",
                              "measurements", "radar", "instance", "expert") + NEW_KINDS


def test_every_kind_reaches_the_batch_one_named_way():
    """A typed attribute, or an entry of the one typed mapping; never nowhere. The package's
    documented table lists every kind, in table order, and the generated one agrees."""
    for m in MODALITIES.values():
        assert m.batch or m.parts, m.kind
        assert m.doc, m.kind
    doc_rows = [line.split("|")[1].strip() for line in modalities_pkg.__doc__.splitlines()
                if line.startswith("| ") and not line.startswith("| kind")]
    assert doc_rows == list(MODALITIES)
    table = markdown_table().splitlines()
    assert [r.split("|")[1].strip() for r in table[2:]] == list(MODALITIES)
    assert "| instance | instance | fields[name] | fixed | nearest |" in markdown_table()
    assert "| calibration | - | intrinsics, cam2ego |" in markdown_table()


@pytest.mark.parametrize("kind", [k for k, m in MODALITIES.items() if m.resize != "none"
                                  and k != "rgb"])
def test_the_resize_rule_is_each_codecs_own_interpolation(kind):
    import cv2
    want = {"linear": cv2.INTER_LINEAR, "nearest": cv2.INTER_NEAREST}[MODALITIES[kind].resize]
    for use in MODALITIES[kind].codecs:
        assert codec_named(use.codec).interpolation == want, use.codec
