"""fields=[...]: a field that is not selected is never decoded (counted at the codec), the
selected ones come back typed and padded, and the photometric augmenter leaves them alone."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from carla_wds.codecs import RecordCodec, register
from carla_wds.load import CARLAWebData
from carla_wds.load.decode.fields import collate_fields
# fixtures:
from tests.pack.datasets.routes.test_layout_garage import packed_garage, raw_garage  # noqa: F401
from tests.pack.datasets.routes.test_layout_tcp_roach import packed_roach, raw_roach  # noqa: F401


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


def _epoch(packed, augment: bool, **kw) -> list:
    data = CARLAWebData(str(packed), batch_size=6, image_size=(48, 64), seed=2, augment=augment,
                        fields=["depth", "semantics", "bev", "lidar", "boxes", "measurements"],
                        **kw)
    data.set_epoch(0, global_step=10**6)   # late in training: the ramp makes it strong
    return list(data)


@pytest.mark.parametrize("twin_p", [0.0, 1.0])
def test_the_photometric_augmenter_touches_rgb_only(packed_garage, twin_p):  # noqa: F811
    plain, augmented = _epoch(packed_garage, False, twin_p=twin_p), \
        _epoch(packed_garage, True, twin_p=twin_p)
    assert [b.keys for b in plain] == [b.keys for b in augmented]
    assert any(not torch.equal(a.images, b.images) for a, b in zip(plain, augmented))
    for a, b in zip(plain, augmented):
        for name in ("depth", "semantics", "bev", "lidar", "lidar_len", "boxes", "boxes_len",
                     "route", "camera_set", "waypoints", "target_point"):
            assert torch.equal(getattr(a, name), getattr(b, name)), name
        assert a.measurements.keys() == b.measurements.keys()
        assert all(torch.equal(a.measurements[k], b.measurements[k]) for k in a.measurements)


def test_a_rows_field_has_its_len_in_every_batch_whatever_its_name():
    """A field of a rows kind (the modality table) named otherwise than its kind, such as a
    layout's `lidar_top`, gets its <name>_len in every batch, equal lengths or not (it used
    to depend on the field being called `lidar`)."""
    from carla_wds.extras import Extra
    from carla_wds.load.decode.fields import collate_fields, row_fields
    from carla_wds.schema import SampleSpec
    spec = SampleSpec(cameras=("front",), pred_len=4, extras=(
        Extra("lidar_top", "lidar_top.npy", "points", "lidar", "float32", (None, 4)),
        Extra("grid", "grid.npy", "npy", "expert", "float32", (8,))))
    assert row_fields(spec) == ("lidar_top",)
    same = [{"lidar_top": np.zeros((3, 4), np.float32)}, {"lidar_top": np.ones((3, 4), np.float32)}]
    out = collate_fields(same, ("lidar_top",), row_fields(spec))
    assert out["lidar_top"].shape == (2, 3, 4) and out["lidar_top_len"].tolist() == [3, 3]


def test_a_json_object_field_is_served_as_a_list_not_stacked_as_a_record():
    """A JSON member holding an object (LEAD's metas.json) decodes to a dict of plain values:
    served as a list per batch; only a record (a dict of arrays) is stacked by key. Failed
    before with 'all input arrays must have the same shape'."""
    metas = [{"speed": 1.0, "route": [[0, 1]]}, {"speed": 2.0, "route": [[0, 1], [2, 3]]}]
    record = [{"speed": np.float32(1.0)}, {"speed": np.float32(2.0)}]
    out = collate_fields([{"metas": m, "measurements": r} for m, r in zip(metas, record)] + [None],
                         ("metas", "measurements"))
    assert out["metas"] == [*metas, None]
    assert out["measurements"]["speed"].tolist() == [1.0, 2.0, 0.0]
