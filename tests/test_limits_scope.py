"""Where limits apply: CARLAWebData(limits=) from its manifest on, only while its own stream
makes items (two in-process loaders never see each other's), the trainer's data.limits, and
the manifest, split file and .npy readers that were left unbounded (review of issue 23)."""
from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from carla_wds import CARLAWebData, limits
from carla_wds.codecs import CODECS
from carla_wds.manifest_schema import ManifestError
from carla_wds.pack.audit import merge
from carla_wds.train.config import ConfigError, load_config

from .helpers import SIZE


@pytest.fixture(scope="module")
def pack(zoo) -> Path:
    return zoo(episodes=2, frames=16, max_samples=6)   # shared, read-only (conftest.zoo)


@pytest.fixture(autouse=True)
def default_limits():
    limits.set_active(limits.DEFAULT)
    yield
    limits.set_active(limits.DEFAULT)


def test_a_loaders_limits_hold_for_its_manifest_too(pack):
    """A manifest's recorded sizes are held to image_pixels: the loader's own limits= applies,
    not only the process's (it raised ManifestError before)."""
    tight = limits.DEFAULT.with_overrides({"image_pixels": 100})
    limits.set_active(tight)
    with pytest.raises(ManifestError, match="image_sizes"):
        CARLAWebData(str(pack), batch_size=2, image_size=SIZE)
    data = CARLAWebData(str(pack), batch_size=2, image_size=SIZE, limits=limits.DEFAULT)
    assert len(list(data)) == len(data)
    assert limits.active() is tight   # and the process's own are left as they were


def test_in_process_loaders_keep_their_limits_to_themselves(pack):
    """num_workers=0: each loader's limits are active only while its stream makes a batch; a
    paused or abandoned loader leaves the caller's, and two interleaved loaders each keep
    their own (a generator that held them across its yields mixed them up)."""
    seen = []
    original = CODECS["json"].decode

    def spy(data):
        seen.append(limits.active().json_depth)
        return original(data)

    CODECS["json"].decode = spy
    try:
        a = iter(CARLAWebData(str(pack), batch_size=2, image_size=SIZE, limits={"json_depth": 7}))
        b = iter(CARLAWebData(str(pack), batch_size=2, image_size=SIZE, limits={"json_depth": 9}))
        next(a)
        assert limits.active() == limits.DEFAULT
        at = len(seen)
        next(b)
        assert set(seen[at:]) == {9}
        at = len(seen)
        next(a)
        assert set(seen[at:]) == {7}
        del a, b
        assert limits.active() == limits.DEFAULT
    finally:
        CODECS["json"].decode = original


def test_a_deeply_nested_manifest_is_one_line(pack, tmp_path):
    bad = tmp_path / "deep"
    shutil.copytree(pack, bad)
    (bad / "manifest.json").write_text('{"a":' + "[" * 200_000 + "]" * 200_000 + "}")
    for args in (["verify", str(bad)], ["inspect", str(bad)]):
        proc = subprocess.run([sys.executable, "-m", "carla_wds.cli", *args],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-1500:]
        assert "json_depth" in proc.stderr and "manifest.json" in proc.stderr


def test_the_trainer_takes_limits_from_its_config():
    cfg = load_config("tiny", ["data.limits=[lidar_points=8e6, image_pixels=1e8]"])
    assert cfg.data.limits == ["lidar_points=8e6", "image_pixels=1e8"]
    with pytest.raises(ConfigError, match="data.limits: --limit lidar_pts: no such limit"):
        load_config("tiny", ["data.limits=[lidar_pts=1]"])


def test_an_npy_header_with_negative_dimensions_is_refused():
    buf = io.BytesIO()
    np.save(buf, np.zeros((2, 2), np.float32))
    good = buf.getvalue()   # (-2, -2) multiplies out to the same 4 elements: same length
    bad = good.replace(b"(2, 2), }", b"(-2,-2),}")
    assert len(bad) == len(good) and b"(-2,-2)" in bad
    assert "negative" in CODECS["npy"].check(bad)
    with pytest.raises(ValueError, match="negative"):
        CODECS["npy"].decode(bad)


def test_merge_refuses_parts_whose_extra_sizes_differ(pack, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(pack, other)
    m = json.loads((other / "manifest.json").read_text())
    m["extra_sizes"] = {"depth.png": [8, 8]}
    (other / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(Exception, match="extra_sizes"):
        merge([pack, other], tmp_path / "merged")
    assert not (tmp_path / "merged").exists()
