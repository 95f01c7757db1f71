"""One room per dataset (issue 25), walked with ast over the package's own sources.

Outside the rooms - the folders for datasets (`carla_wds/datasets/`, `carla_wds/pack/datasets/`),
synthetic writers (`carla_wds/pack/synth/`) and load adapters (`carla_wds/load/adapters/`) - no
module names a dataset in code: no identifier, attribute, argument, import or string constant
that is not a docstring. The words come from the dataset registry (every name, alias and layout),
so a dataset registered tomorrow is held to the same rule without editing this file.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import carla_wds
from carla_wds.datasets import all_names
from carla_wds.pack.datasets import builtin_layouts
from carla_wds.pack.synth import synth_layouts

PKG = Path(carla_wds.__file__).resolve().parent
ROOMS = ("datasets/", "pack/datasets/", "pack/synth/", "load/adapters/")
# Modules kept importable for one release at their old paths (issue 25 "Unchanged"): thin
# re-exports of names that now live in a room, so they name what they re-export.
SHIMS = {
    "boxes.py": "carla_wds.boxes re-exports the box parsers for one release",
    "calib.py": "carla_wds.calib re-exports the rig constants for one release",
    "lidar.py": "carla_wds.lidar re-exports the LiDAR presets for one release",
    "modalities_b2d.py": "carla_wds.modalities_b2d re-exports its codecs for one release",
}


def dataset_words() -> re.Pattern[str]:
    """The registries' names (datasets' names and aliases, every packable and synthesisable
    layout, so a YAML-only dataset counts too), plus each family word without its version
    digits (transfuser4 -> transfuser) where that word is long enough not to be an English one."""
    words = {*all_names(), *builtin_layouts(), *synth_layouts()}
    words |= {w.rstrip("0123456789") for w in words if len(w.rstrip("0123456789")) >= 5}
    words = sorted(words, key=len, reverse=True)
    return re.compile(r"(?<![a-z])(" + "|".join(map(re.escape, words)) + r")(?![a-z])", re.I)


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def _words(node: ast.AST) -> list[str]:
    """The names a node spells in code."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.arg):
        return [node.arg]
    if isinstance(node, ast.keyword) and node.arg:
        return [node.arg]
    if isinstance(node, ast.alias):
        return [node.name, node.asname or ""]
    if isinstance(node, ast.ImportFrom):
        return [node.module or ""]
    return []


def dataset_names_in_code(path: Path, pattern: re.Pattern[str], base: Path = PKG.parent
                          ) -> list[str]:
    tree = ast.parse(path.read_text())
    docs = _docstrings(tree)
    rel = path.relative_to(base)
    return [f"{rel}:{getattr(node, 'lineno', '?')}: {word[:70]!r}"
            for node in ast.walk(tree) if id(node) not in docs
            for word in _words(node) if pattern.search(word)]


def in_room(path: Path) -> bool:
    rel = path.relative_to(PKG).as_posix()
    return rel.startswith(ROOMS) or rel in SHIMS


def test_no_module_outside_the_rooms_names_a_dataset():
    pattern = dataset_words()
    bad = [hit for path in sorted(PKG.rglob("*.py")) if not in_room(path)
           for hit in dataset_names_in_code(path, pattern)]
    assert not bad, "\n".join(bad)


def test_the_walk_sees_names_in_code(tmp_path):
    """The rule cannot pass by finding nothing: it sees identifiers, strings and imports,
    and leaves docstrings alone."""
    sample = tmp_path / "sample.py"
    sample.write_text('"""About garage data."""\nfrom x.bench2drive import y\n'
                      'TCP_MU = 0.8\nname = "depth_garage8"\nf(transfuser4=1)\n')
    hits = dataset_names_in_code(sample, dataset_words(), tmp_path)
    assert len(hits) == 4, hits
    assert in_room(PKG / "datasets" / "tcp.py") and not in_room(PKG / "pack" / "packer.py")
    assert dataset_words().search("TransFuser's loader")


def test_every_room_exists_and_every_shim_is_thin():
    for room in ROOMS:
        assert (PKG / room).is_dir(), room
    for shim in SHIMS:
        tree = ast.parse((PKG / shim).read_text())
        defs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
        assert len(defs) <= 1, f"{shim} defines {[d.name for d in defs]}: a shim only re-exports"
