"""`verify --deep` reports non-finite labels (issue 38, "Non-finite labels in a shard"): a shard
whose label arrays hold NaN or inf under a matching sha256 (so every other check passes) is a
problem naming the shard, the sample's key and the member. Real tar shards, written here."""
from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
from click.testing import CliRunner

from carla_wds.cli import main
from carla_wds.pack.audit import verify

from ..helpers import make_pack
from ..shardedit import rewrite_member


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    # a layout with boxes, a pose and a measurements record beside the core labels
    return make_pack(tmp_path_factory.mktemp("finite"), layout="transfuser2022", episodes=1,
                     frames=12, max_samples=50, allow_pickle_input=True)


def _npy(value: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, value)
    return buf.getvalue()


def spoil(pack: Path, suffix: str, change: Callable[[np.ndarray], None]) -> str:
    """`change` applied in place to the array of the first member ending in `suffix`."""
    def edit(data: bytes) -> bytes:
        value = np.load(io.BytesIO(data)).copy()
        change(value)
        return _npy(value)
    return rewrite_member(pack, suffix, edit)


def _first_float_field(rec: np.ndarray) -> str:
    return next(n for n in rec.dtype.names if rec.dtype[n].kind == "f")


CASES = {
    "boxes.npy": lambda a: a.__setitem__((0, 3), np.inf),
    "ego2world.npy": lambda a: a.__setitem__((0, 3), np.nan),
    "target_point.npy": lambda a: a.__setitem__(0, -np.inf),
    "measurements.npy": lambda a: a.__setitem__(_first_float_field(a), np.inf),
}


@pytest.mark.parametrize("member", list(CASES))
def test_verify_deep_names_a_non_finite_label(pristine, tmp_path, member):
    import shutil
    pack = tmp_path / "pack"
    shutil.copytree(pristine, pack)
    assert verify(str(pack), deep=True, progress=False) == []
    key = spoil(pack, "." + member, CASES[member])
    assert verify(str(pack), progress=False) == []   # sizes and sha256 match: only --deep sees it
    problems = verify(str(pack), deep=True, progress=False)
    assert len(problems) == 1, problems
    shard = json.loads((pack / "manifest.json").read_text())["shards"][0]["name"]
    assert f"{shard}:{key}" in problems[0] and member in problems[0], problems
    assert "non-finite" in problems[0] and "re-pack" in problems[0].lower(), problems
    result = CliRunner().invoke(main, ["verify", str(pack), "--deep"])
    assert result.exit_code != 0 and member in result.output, result.output
