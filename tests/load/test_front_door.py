"""CARLAWebData's front door (issue 40): a few keywords, some of them grouped records
(carla_wds/load/options.py); every old flat keyword still loads the same batches for one
release, with a DeprecationWarning naming its new spelling at the caller's line; a keyword
given both ways, or a group of the wrong type, is refused in one line naming the fix."""
from __future__ import annotations

import inspect
import re
import warnings
from pathlib import Path

import pytest

from carla_wds.load import (Augment, CARLAWebData, Decode, History, Storage, Transport)

from .test_digests import ZOO, digest

SIZE = (24, 32)


@pytest.fixture(scope="module")
def tcp(zoo) -> str:
    return str(zoo(**ZOO["tcp"]))   # shared with test_digests, read-only


def test_the_loader_takes_at_most_22_keywords_in_a_short_init():
    params = [p for p in inspect.signature(CARLAWebData.__init__).parameters.values()
              if p.name != "self" and p.kind is not p.VAR_KEYWORD]
    assert len(params) <= 22, [p.name for p in params]
    assert len(inspect.getsource(CARLAWebData.__init__).splitlines()) <= 25


def _double_speed(sample, rng):
    return {"speed": sample["speed"] * 2, "noise": rng.random()}


# (old keywords, the same in the new spelling, what the warning names)
SPELLINGS = [
    (dict(num_workers=2, persistent_workers=True, prefetch_factor=3),
     dict(num_workers=2, transport=Transport(prefetch_factor=3, persistent=True)),
     "transport=Transport(persistent=...)"),
    (dict(verify=True), dict(storage=Storage(verify=True)), "storage=Storage(verify=...)"),
    (dict(exact_resize=True), dict(decode=Decode(exact_resize=True)),
     "decode=Decode(exact_resize=...)"),
    (dict(augment=True, per_camera_augment=False), dict(augment=Augment(per_camera=False)),
     "augment=Augment(per_camera=...)"),
    (dict(history=1, history_stride=2), dict(history=History(1, stride=2)),
     "history=History(stride=...)"),
    (dict(sample_transform=_double_speed), dict(adapter=_double_speed), "adapter="),
    (dict(adapters={"tcp_brake_override": False}),
     dict(label_options={"tcp_brake_override": False}), "label_options="),
]


@pytest.mark.parametrize("old,new,named", SPELLINGS, ids=[s[2] for s in SPELLINGS])
def test_an_old_keyword_warns_at_the_callers_line_and_loads_the_same(tcp, old, new, named):
    kw = dict(batch_size=2, image_size=SIZE, seed=5)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        before = CARLAWebData(tcp, **kw, **old)
    deprecated = [w for w in seen if issubclass(w.category, DeprecationWarning)]
    assert deprecated and all(named.split("(")[0] in str(w.message) for w in deprecated)
    assert any(named in str(w.message) for w in deprecated), [str(w.message) for w in seen]
    assert {Path(w.filename).name for w in deprecated} == {Path(__file__).name}
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        after = CARLAWebData(tcp, **kw, **new)
    before.set_epoch(1)
    after.set_epoch(1)
    assert digest(before) == digest(after)


def test_a_keyword_given_both_ways_is_refused_in_one_line(tcp):
    cases = [(dict(persistent_workers=True, transport=Transport(persistent=True)),
              "persistent_workers= and transport=Transport(persistent=...) both given"),
             (dict(sample_transform=_double_speed, adapter="tcp"), "not both"),
             (dict(adapters={}, label_options={"tcp_brake_override": False}),
              "give label_options= only")]
    for kw, match in cases:
        with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match=re.escape(match)) as exc:
            CARLAWebData(tcp, batch_size=2, image_size=SIZE, **kw)
        assert "\n" not in str(exc.value)


@pytest.mark.parametrize("kw,fix", [
    (dict(transport=2), "Fix: transport=Transport(prefetch_factor=..., persistent=..., "),
    (dict(augment="yes"), "Fix: augment=Augment(enabled=..., per_camera=...)"),
    (dict(overlays="ovl/commentary"), "or a list. Fix: overlays=Overlays(packs=..."),
    (dict(storage={"verify": True}), "Fix: storage=Storage(remote=..."),
    (dict(adapter=3), "Fix: adapter='NAME' or adapter=fn"),
])
def test_a_group_of_the_wrong_type_is_refused_in_one_line(tcp, kw, fix):
    with pytest.raises(TypeError) as exc:
        CARLAWebData(tcp, batch_size=2, image_size=SIZE, **kw)
    assert fix in str(exc.value) and "\n" not in str(exc.value)


def test_an_unknown_keyword_is_still_a_type_error(tcp):
    with pytest.raises(TypeError, match="unexpected keyword argument 'num_worker'"):
        CARLAWebData(tcp, batch_size=2, image_size=SIZE, num_worker=2)
