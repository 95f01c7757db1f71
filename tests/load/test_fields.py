"""fields=[...]: a field that is not selected is never decoded (counted at the codec), and
the selected ones come back typed and padded."""
from __future__ import annotations

import numpy as np
import pytest

from carla_wds.codecs import RecordCodec, register
from carla_wds.load import CARLAWebData
from carla_wds.load.fields import collate_fields
from tests.pack.test_layout_tcp_roach import packed_roach, raw_roach  # noqa: F401 (fixtures)


class CountingRecord(RecordCodec):
    decoded = 0

    def decode(self, data):
        CountingRecord.decoded += 1
        return super().decode(data)


@pytest.fixture
def counting():
    previous = register(CountingRecord())
    CountingRecord.decoded = 0
    yield CountingRecord
    register(previous)


def _pass(packed, **kw) -> int:
    data = CARLAWebData(str(packed), batch_size=4, mode="eval", image_size=(48, 64), **kw)
    return sum(int(b.valid.sum()) for b in data)


def test_an_unselected_field_is_never_decoded(packed_roach, counting):  # noqa: F811
    n = _pass(packed_roach)
    assert n > 0 and counting.decoded == 0
    assert _pass(packed_roach, fields=["measurements"]) == n
    assert counting.decoded == n   # once per real sample, none for padding


def test_variable_rows_are_padded_with_their_lengths():
    rows = [{"lidar": np.ones((3, 4), np.float32)}, None, {"lidar": np.full((5, 4), 2, np.float32)}]
    out = collate_fields(rows, ("lidar",))
    assert out["lidar"].shape == (3, 5, 4) and out["lidar_len"].tolist() == [3, 0, 5]
    assert (out["lidar"][0, 3:] == 0).all() and (out["lidar"][2] == 2).all()
