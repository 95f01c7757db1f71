"""print(batch) shows shapes and dtypes, not tensors (issue 28)."""
from __future__ import annotations

from carla_wds import CARLAWebData

from ..helpers import SIZE, make_pack


def test_print_batch_is_a_short_table_of_shapes(tmp_path):
    shards = make_pack(tmp_path, episodes=1, frames=12)
    batch = next(iter(CARLAWebData(str(shards), batch_size=3, image_size=SIZE,
                                   fields=["ego2world"])))
    text = repr(batch)
    lines = text.splitlines()
    assert lines[0].startswith("CARLABatch of 3 (3 valid)")
    assert f"  images: (3, 1, 3, {SIZE[0]}, {SIZE[1]}) uint8" in lines
    assert "  fields: {ego2world: (3, 4, 4) float64}" in lines
    assert len(lines) < 15 and "tensor(" not in text
