"""The loader's rooms (issue 40): `load/` is a front door over one folder per concern, and each
feature lives in one room, named (imported) by at most three modules outside it.

The importers are counted from the sources with `ast`, every import form resolved (relative,
absolute, `from PKG import MODULE`), and compared with the table docs/layout.md shows.
"""
import ast
import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "carla_wds"
LOAD = "carla_wds.load"
FRONT_DOOR = {"__init__", "dataset", "front", "options", "settings", "resume_state",
              "loader_doc"}
ROOMS = {"plan", "stream", "decode", "transport", "adapters"}
# feature -> its modules; the room is their folder
FEATURES = {
    "history windows": ["stream.history"],
    "mixing": ["plan.mix", "plan.mix_presets"],
    "overlays": ["stream.overlay", "stream.overlay_mix"],
    "map vectors": ["stream.mappack"],
    "mixed layouts": ["stream.common_view"],
    "`sample_transform`": ["decode.transform"],
    "adapters": ["adapters"],
    "pinning": ["transport.pinning"],
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PKG.rglob("*.py")}


def imported(name: str, path: Path, known: set[str]) -> set[str]:
    """Every carla_wds module `path` imports, `from PKG import SUBMODULE` included."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known}
    return {m for m in found if m in known}


@functools.lru_cache(maxsize=1)
def importers() -> dict[str, set[str]]:
    mods = modules()
    by = {m: set() for m in mods}
    for name, path in mods.items():
        for target in imported(name, path, set(mods)):
            by[target].add(name)
    return by


def named_outside(feature: str, by: dict[str, set[str]]) -> set[str]:
    own = [f"{LOAD}.{m}" for m in FEATURES[feature]]
    room = f"{LOAD}.{FEATURES[feature][0].split('.')[0]}"
    inside = [m for m in by if any(m == o or m.startswith(o + ".") for o in own)]
    outside = set()
    for m in inside:
        outside |= {i for i in by[m] if i != room and not i.startswith(room + ".")}
    return outside


def short(module: str) -> str:
    rest = module[len(LOAD) + 1:] if module != LOAD else "__init__"
    return "load/__init__.py" if rest == "__init__" else rest.replace(".", "/") + ".py"


def test_load_holds_only_the_front_door_and_its_rooms():
    load = PKG / "load"
    files = {p.stem for p in load.glob("*.py")}
    folders = {p.name for p in load.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert files == FRONT_DOOR, f"move {files - FRONT_DOOR} into a room"
    assert folders == ROOMS
    for room in ROOMS:
        doc = ast.get_docstring(ast.parse((load / room / "__init__.py").read_text()))
        assert doc and doc.startswith("Room:") or room == "adapters", room


@pytest.mark.parametrize("feature", sorted(FEATURES))
def test_each_feature_is_named_by_at_most_three_modules_outside_its_room(feature):
    outside = named_outside(feature, importers())
    assert len(outside) <= 3, f"{feature} is imported from {sorted(outside)}"


def test_the_layout_page_shows_the_measured_importers():
    """docs/layout.md's table lists, per feature, the modules outside its room that name it."""
    by = importers()
    text = (ROOT / "docs" / "layout.md").read_text()
    for feature in FEATURES:
        row = next(line.strip() for line in text.splitlines()
                   if line.strip().startswith(f"| {feature} |"))
        shown = set(re.findall(r"`([\w/]+\.py)`", row.split("|")[3]))
        want = {short(m).removeprefix("load/") if m != LOAD else "load/__init__.py"
                for m in named_outside(feature, by)}
        assert shown == want, (feature, shown, want)


def test_the_count_sees_every_import_form():
    """The counter is not blind: front.py names history by `from .stream import history as
    windows`, dataset.py by `from .stream.history import ...`."""
    by = importers()
    assert {f"{LOAD}.front", f"{LOAD}.dataset"} <= by[f"{LOAD}.stream.history"]
