"""`carla-wds pack-overlay --kind simlingo_commentary` refuses an entry that fails SimLingo's
own commentary schema, in one line naming the file and the key, and writes nothing.

Their schema is what their loader reads (RenzKa/simlingo@eb2b89a simlingo_training/dataloader/
dataset_driving.py:101-117, commentary_augmentation on by default): `commentary` a string,
`commentary_template` a string (looked up in their templates), `placeholder` an object of
strings (each replaced into the template). The CLI runs in-process (click's runner) on a real
garage pack and a tree in SimLingo's layout.
"""
from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from carla_wds.cli import main
from tests.overlaykit import garage_with_trees, overlay_entries

KIND = "simlingo_commentary"
GOOD = {"commentary": "Slow down for the <OBJECT> ahead in 4.2 meters.",
        "commentary_template": "Slow down for the <OBJECT> ahead in <DISTANCE>.",
        "placeholder": {"<OBJECT>": "red car", "<DISTANCE>": "in 4.2 meters"},
        "image": "rgb/0003.jpg", "scenario_name": "Accident"}


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("commentary_schema")
    garage_with_trees(root, {KIND: "commentary"}, 1, 7, coverage=0.8)
    return root


def pack_overlay_cli(tree: Path, shards: Path, out: Path):
    return CliRunner().invoke(main, ["pack-overlay", str(tree), str(shards), str(out),
                                     "--kind", KIND])


def _tree(root: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the commentary tree, and its first entry of a base frame (their path
    formula run backwards: commentary/ -> data/, commentary -> measurements)."""
    tree = tmp_path / "commentary"
    shutil.copytree(root / "commentary", tree)
    for entry in sorted(tree.rglob("*.json.gz")):
        rel = entry.relative_to(tree).as_posix().replace("/commentary/", "/measurements/")
        if (root / "data" / rel).is_file():
            return tree, entry
    raise AssertionError("no entry of a base frame")


def test_schema_entries_pack(root, tmp_path):
    """The synth tree and an entry as their generator writes one (extra keys kept)."""
    tree, victim = _tree(root, tmp_path)
    victim.write_bytes(gzip.compress(json.dumps(GOOD).encode()))
    result = pack_overlay_cli(tree, root / "shards", tmp_path / "ovl")
    assert result.exit_code == 0, result.output
    assert GOOD in overlay_entries(tmp_path / "ovl").values()


def _without(key: str) -> dict:
    return {k: v for k, v in GOOD.items() if k != key}


@pytest.mark.parametrize("entry, words", [
    (_without("commentary_template"), "'commentary_template' is missing; expected a string"),
    ({**GOOD, "commentary_template": ["Slow down."]},
     "'commentary_template' is a list; expected a string"),
    ({**GOOD, "commentary_template": None}, "'commentary_template' is null"),
    (_without("placeholder"), "'placeholder' is missing; expected an object of placeholder"),
    ({**GOOD, "placeholder": ["red car"]}, "'placeholder' is a list"),
    ({**GOOD, "placeholder": {"<OBJECT>": "red car", "<DISTANCE>": 4.2}},
     "'placeholder' entry '<DISTANCE>' is a number; expected a string"),
    ({**GOOD, "commentary": None}, "expected a JSON object with a 'commentary' string"),
    ([GOOD], "expected a JSON object with a 'commentary' string"),
])
def test_an_entry_failing_their_schema_is_refused_in_one_line(root, tmp_path, entry, words):
    tree, victim = _tree(root, tmp_path)
    victim.write_bytes(gzip.compress(json.dumps(entry).encode()))
    out = tmp_path / "ovl"
    result = pack_overlay_cli(tree, root / "shards", out)
    line = result.output.strip()
    assert result.exit_code == 1 and "\n" not in line, result.output
    assert f"overlay file {victim}: " in line and words in line, line
    assert "simlingo_commentary" in line and "Fix:" in line
    assert not out.exists() and not list(tmp_path.glob(".ovl.tmp-*"))   # nothing written
