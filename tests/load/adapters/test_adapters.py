"""Load adapters (carla_wds/load/adapters/): the loader builds every registered one against the
manifest and the caller's `adapters={name: option}`; the older keywords (brake_override=,
twin_p=) are aliases of those options and load the same batches."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from carla_wds.load import CARLAWebData
from carla_wds.load.adapters import ADAPTERS, LoadAdapter, adapters_for, keywords, register
# fixtures:
from tests.pack.datasets.routes.test_layout_garage import packed_garage, raw_garage  # noqa: F401
from tests.pack.datasets.routes.test_layout_tcp_roach import packed_roach, raw_roach  # noqa: F401

SIZE = (48, 64)


def _by_key(packed: Path, **kw) -> dict[str, dict[str, np.ndarray]]:
    out = {}
    for b in CARLAWebData(str(packed), batch_size=4, image_size=SIZE, seed=3, **kw):
        for i, key in enumerate(b.keys):
            if b.valid[i]:
                m = {f"m.{k}": v[i].numpy() for k, v in (b.measurements or {}).items()}
                out[key] = {"waypoints": b.waypoints[i].numpy(), **m,
                            "camera_set": None if b.camera_set is None else
                            int(b.camera_set[i])}
    return out


def _same(a: dict, b: dict) -> bool:
    return set(a) == set(b) and all(
        set(a[k]) == set(b[k]) and all(np.array_equal(a[k][n], b[k][n]) for n in a[k])
        for k in a)


def test_the_registry_names_the_adapters_and_their_older_keywords():
    assert {"tcp_brake_override", "garage_camera_twin"} <= set(ADAPTERS)
    assert keywords() == {"brake_override": "tcp_brake_override", "twin_p": "garage_camera_twin"}


def test_the_manifest_decides_which_adapters_apply(packed_roach, packed_garage):  # noqa: F811
    roach = CARLAWebData(str(packed_roach), batch_size=4, image_size=SIZE)
    garage = CARLAWebData(str(packed_garage), batch_size=4, image_size=SIZE)
    assert [a.name for a in roach.field_opts.adapters] == ["tcp_brake_override"]
    assert [a.name for a in garage.field_opts.adapters] == ["garage_camera_twin"]
    assert adapters_for(roach.manifest.spec, {"tcp_brake_override": False}) == ()


def test_adapters_mapping_loads_what_the_older_keywords_load(packed_roach,  # noqa: F811
                                                             packed_garage):  # noqa: F811
    fields = ["measurements"]
    for packed, alias, name, value in ((packed_roach, "brake_override", "tcp_brake_override",
                                        False),
                                       (packed_garage, "twin_p", "garage_camera_twin", 1.0)):
        old = _by_key(packed, fields=fields, **{alias: value})
        new = _by_key(packed, fields=fields, adapters={name: value})
        assert _same(old, new) and not _same(new, _by_key(packed, fields=fields))


def test_bad_adapter_options_are_refused(packed_garage):  # noqa: F811
    with pytest.raises(ValueError, match="unknown; the registered load adapters are"):
        CARLAWebData(str(packed_garage), batch_size=4, image_size=SIZE, adapters={"nope": 1})
    with pytest.raises(ValueError, match="both set the same option"):
        CARLAWebData(str(packed_garage), batch_size=4, image_size=SIZE, twin_p=0.5,
                     adapters={"garage_camera_twin": 0.5})
    with pytest.raises(TypeError, match="unexpected keyword argument 'twinp'"):
        CARLAWebData(str(packed_garage), batch_size=4, image_size=SIZE, twinp=0.5)


class _Halve(LoadAdapter):
    """A toy adapter registered from the test: halves every waypoint when asked."""
    name = "toy_halve"

    def after_labels(self, labels, state):
        labels["waypoints"] = labels["waypoints"] / 2


class _HalveKind:
    name, keyword = "toy_halve", ""

    def build(self, spec, option):
        return _Halve() if option else None


def test_an_adapter_registered_from_outside_is_applied(packed_garage):  # noqa: F811
    register(_HalveKind())
    try:
        plain = _by_key(packed_garage)
        halved = _by_key(packed_garage, adapters={"toy_halve": True})
    finally:
        del ADAPTERS["toy_halve"]
    for key, got in halved.items():
        assert torch.allclose(torch.from_numpy(got["waypoints"]),
                              torch.from_numpy(plain[key]["waypoints"] / 2))
