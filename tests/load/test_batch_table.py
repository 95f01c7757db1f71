"""Every modality reaches the batch one way (issue 25): for each kind of the modality table, a
packed shard with it selected serves it under the name docs/batch.md documents (a typed
attribute of CARLABatch, or an entry of `batch.fields`, the one typed mapping), as a tensor of
the table's dtype; and docs/batch.md is the table's rendering."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from carla_wds.load import CARLAWebData
from carla_wds.load.decode.places import attributes_of, render
from carla_wds.modalities import MODALITIES, Modality
from tests.load.test_b2d_loader import b2d  # noqa: F401 (fixture: every Bench2Drive sensor)
# fixtures (bev, twins):
from tests.pack.datasets.routes.test_layout_garage import packed_garage, raw_garage  # noqa: F401

DOC = Path(__file__).resolve().parents[2] / "docs" / "batch.md"
PACKS = ("b2d", "packed_garage")


def test_docs_batch_md_is_the_tables_rendering():
    assert DOC.read_text() == render(), (
        "docs/batch.md differs from the modality table; regenerate it: .venv/bin/python -c "
        "\"from carla_wds.load.decode.places import render; open('docs/batch.md', 'w')"
        ".write(render())\"")


def _selection(data: CARLAWebData, m: Modality) -> tuple[str, str] | None:
    """(the name to select, the name it lands under) for kind m in these shards."""
    spec = data.manifest.spec
    held = [e for e in spec.extras if e.modality == m.kind and e.twin_of is None]
    if m.collate == "cameras":
        return "", "images"
    if not m.member:   # parts of the record (calibration)
        record = {f.name for e in spec.extras for f in e.fields}
        return (m.kind, m.parts[0]) if set(m.parts) <= record else None
    if m.per_camera and any(e.name.startswith(m.per_camera + "_") for e in held):
        return m.per_camera, m.kind
    return (held[0].name, held[0].name) if held else None


def _served(batch, m: Modality, lands: str):
    """The value where docs/batch.md says kind m's field `lands` is."""
    if lands == "images" or lands in attributes_of(m) or m.collate == "record":
        return getattr(batch, lands)
    assert not attributes_of(m), f"{m.kind}: {lands} is not its documented attribute"
    return batch.fields[lands]


@pytest.mark.parametrize("kind", list(MODALITIES))
def test_each_kind_reaches_the_batch_under_its_documented_name(kind, request):
    m = MODALITIES[kind]
    for pack in PACKS:
        data = CARLAWebData(str(request.getfixturevalue(pack)), batch_size=2, mode="eval",
                            image_size=(45, 80))   # in this process
        chosen = _selection(data, m)
        if chosen is not None:
            break
    assert chosen is not None, f"no test pack holds a {kind} field: add one to PACKS"
    name, lands = chosen
    batch = next(iter(CARLAWebData(str(data.where), batch_size=2, mode="eval",
                                   image_size=(45, 80), fields=[name] if name else None)))
    value = _served(batch, m, lands)
    if m.collate == "list":     # raw JSON: one parsed entry per sample
        assert isinstance(value, list) and len(value) == 2
    elif m.collate == "record":
        assert value and all(isinstance(v, torch.Tensor) for v in value.values())
    else:
        assert isinstance(value, torch.Tensor) and value.shape[0] == 2
        assert value.dtype == getattr(torch, m.dtype), (kind, value.dtype)
    if m.collate == "rows":     # its count beside it, where the table says
        count = f"{lands}_len"
        held = getattr(batch, count) if attributes_of(m) else batch.fields[count]
        assert held.shape == (2,) and int(held.max()) == value.shape[1]
    if not attributes_of(m) and m.collate not in ("cameras", "record"):
        assert batch.extras is not None and batch.extras[lands] is value   # the alias
