"""CARLABatch and CARLASample document every field in their docstrings' `Attributes:`
section, the one source help() and the API page (mkdocstrings, Google style) both read; a
field added without its entry fails here."""
from __future__ import annotations

import dataclasses
import inspect
import re

import pytest

from carla_wds.load.decode.batch import CARLABatch, CARLASample
from carla_wds.schema import COMMAND_NAMES


def documented(cls: type) -> dict[str, str]:
    """{name: its description} of the docstring's Attributes section."""
    doc = inspect.getdoc(cls)
    section = doc.split("Attributes:\n", 1)[1]
    entries = re.split(r"^    (\w+): ", section, flags=re.M)[1:]
    return {name: " ".join(text.split()) for name, text in zip(entries[::2], entries[1::2])}


@pytest.mark.parametrize("cls", [CARLABatch, CARLASample])
def test_every_field_is_documented(cls) -> None:
    docs = documented(cls)
    fields = [f.name for f in dataclasses.fields(cls)]
    missing = [f for f in fields if f not in docs]
    assert not missing, f"{cls.__name__} fields with no Attributes entry: {missing}"
    stale = [d for d in docs if d not in fields]
    assert not stale, f"{cls.__name__}'s docstring documents fields it lacks: {stale}"
    assert list(docs) == fields, "the entries are in the class's field order"


def test_the_core_labels_say_shape_dtype_and_unit() -> None:
    docs = documented(CARLABatch)
    assert "(B,) float32, m/s" in docs["speed"]
    for name in ("target_point", "waypoints", "waypoints_diff"):
        assert "float32, metres, label frame" in docs[name], name
    assert "(B, pred_len, 2)" in docs["waypoints_diff"]
    # the one-hot columns in the order the packer writes them (schema.COMMANDS)
    assert "(B, 6) float32 one-hot" in docs["command"]
    assert ", ".join(COMMAND_NAMES) in docs["command"]
    assert "(B, n_cameras, 3, H, W) uint8" in docs["images"]


def test_the_public_methods_have_docs() -> None:
    for method in (CARLABatch.to, CARLABatch.pin_memory, CARLABatch.normalized_images):
        assert inspect.getdoc(method), f"CARLABatch.{method.__name__} has no docstring"


def test_the_class_docs_cite_no_internals() -> None:
    from carla_wds import CARLAWebData
    for cls in (CARLAWebData, CARLABatch, CARLASample):
        doc = inspect.getdoc(cls) + (inspect.getdoc(cls.__init__) or "")
        for internal in ("ADAPTERS", "load/", ".py", "issue "):
            assert internal not in doc, f"{cls.__name__}'s docs cite {internal!r}"
