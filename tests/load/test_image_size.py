"""CARLAWebData(image_size=...) as documented (issue 40): by default the pack's recorded camera
size (a 48x64 pack loads at 48x64, not 256x512), "HxW" strings, wrong types refused in one line
naming the fix, and one warning when the size turns the pack's landscape images portrait (or
back). An adapter's own size rule is unchanged (tests/load/test_digests.py)."""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from carla_wds.load import CARLAWebData

from .test_digests import ZOO, digest


@pytest.fixture(scope="module")
def tcp(zoo) -> str:
    return str(zoo(**ZOO["tcp"]))   # shared with test_digests, read-only


def _recorded(pack: str) -> dict[str, list[int]]:
    return json.loads((Path(pack) / "manifest.json").read_text())["image_sizes"]


def _flips(**kw) -> list[warnings.WarningMessage]:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        CARLAWebData(**kw)
    return [w for w in seen if "aspect" in str(w.message)]


def test_the_default_is_the_packs_recorded_size(tcp):
    sizes = {tuple(hw) for hw in _recorded(tcp).values()}
    assert len(sizes) == 1 and sizes != {(256, 512)}
    data = CARLAWebData(tcp, batch_size=2, mode="eval")
    batch = next(iter(data))
    assert data.image_size == sizes.pop() == tuple(batch.images.shape[-2:])


def test_an_hxw_string_loads_what_its_tuple_loads(tcp):
    kw = dict(batch_size=2, seed=1)
    text = CARLAWebData(tcp, image_size="20x40", **kw)
    assert text.image_size == (20, 40)
    assert digest(text) == digest(CARLAWebData(tcp, image_size=(20, 40), **kw))
    assert CARLAWebData(tcp, image_size=" 24 X 32 ", **kw).image_size == (24, 32)


@pytest.mark.parametrize("size,error", [
    (256, TypeError), ((24.0, 32.0), TypeError), ((24, 32, 3), TypeError),
    ({"h": 24}, TypeError), ((True, 32), TypeError), ("256by512", ValueError),
    ("x512", ValueError), ((0, 32), ValueError)])
def test_a_wrong_size_is_refused_in_one_line(tcp, size, error):
    with pytest.raises(error) as exc:
        CARLAWebData(tcp, batch_size=2, image_size=size)
    msg = str(exc.value)
    assert "\n" not in msg and "Fix: image_size=(H, W) or image_size='HxW'" in msg


def test_a_size_that_flips_the_aspect_warns_once_at_the_callers_line(tcp, zoo):
    (h, w), = {tuple(hw) for hw in _recorded(tcp).values()}
    assert w > h   # landscape cameras
    flipped = _flips(source=tcp, batch_size=2, image_size=(w, h))
    assert len(flipped) == 1 and Path(flipped[0].filename).name == Path(__file__).name
    assert "portrait" in str(flipped[0].message) and f"{h}x{w}" in str(flipped[0].message)
    assert _flips(source=tcp, batch_size=2, image_size=(h // 2, w)) == []
    assert _flips(source=tcp, batch_size=2) == []
    many = str(zoo(**ZOO["transfuser4"]))   # four cameras: still one warning
    assert len(_recorded(many)) > 1
    assert len(_flips(source=many, batch_size=2, image_size="64x24")) == 1
