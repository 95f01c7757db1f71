"""The wings' import directions, walked with ast over the package's own sources:

- pack/ imports neither load/ nor train/, and nothing it imports (transitively, through the
  core) imports torch or webdataset: packing is torch-free by construction;
- load/ imports neither pack/ nor train/;
- train/ uses load/ only through the names `carla_wds.load` exports;
- view/ (`carla-wds view`, the HTML report) sits above load/ and train/ (it decodes samples
  with the loader's stages and draws them in train's frames); only the CLI imports it.
"""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import carla_wds

PKG = Path(carla_wds.__file__).resolve().parent
HEAVY = ("torch", "torchvision", "webdataset", "pytorch_lightning", "lightning")


def module_name(path: Path) -> str:
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> list[tuple[str, list[str], int]]:
    """(absolute module, imported names, line) of every import in the file, lazy ones too."""
    here = module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(a.name, [], node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            names = [a.name for a in node.names]
            found.append((base, names, node.lineno))
            # `from . import x` imports the submodule x
            found += [(f"{base}.{n}", [], node.lineno) for n in names
                      if (PKG.parent / base.replace(".", "/") / f"{n}.py").exists()]
    return found


SOURCES = {module_name(p): p for p in PKG.rglob("*.py")}


def wing_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in ("pack", "load", "train", "view") \
        else "core"


def closure(start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        mod = todo.pop()
        if mod in seen or mod not in SOURCES:
            continue
        seen.add(mod)
        todo += [m for m, _, _ in imports(SOURCES[mod])]
    return seen


@pytest.mark.parametrize("wing,banned", [("pack", ("load", "train", "view")),
                                         ("load", ("pack", "train", "view")),
                                         ("train", ("view",)), ("view", ("pack",))])
def test_a_wing_imports_no_other(wing, banned):
    bad = [f"{SOURCES[m].relative_to(PKG.parent)}:{line} imports {target}"
           for m in SOURCES if wing_of(m) == wing
           for target, _, line in imports(SOURCES[m]) if wing_of(target) in banned]
    assert not bad, bad


def test_pack_is_torch_free_by_construction():
    reach = set().union(*(closure(m) for m in SOURCES if wing_of(m) == "pack"))
    assert not [m for m in reach if wing_of(m) in ("load", "train")]
    bad = [f"{SOURCES[m].relative_to(PKG.parent)}:{line} imports {target}"
           for m in reach for target, _, line in imports(SOURCES[m])
           if target.split(".")[0] in HEAVY]
    assert not bad, bad
    # and in a real process: every pack module imported, no torch loaded
    code = ("import sys, importlib\n"
            + "".join(f"importlib.import_module({m!r})\n" for m in sorted(reach))
            + f"print([m for m in {HEAVY!r} if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]", out


def test_core_imports_no_wing_except_the_entry_points():
    """The core is below the wings; only the CLI, the package's lazy names and the Lightning
    module (which wraps the loader) reach up."""
    # cli_cluster.py: the CLI's cluster commands (plan, pack-status), kept apart from cli.py
    # for its size; an entry point like cli.py
    # cli_overlay.py: pack-overlay and synth-overlay (issue 30), likewise
    # cli_map.py: pack-map (issue 42), likewise
    allowed = {"carla_wds", "carla_wds.cli", "carla_wds.cli_cluster", "carla_wds.cli_overlay",
               "carla_wds.cli_map", "carla_wds.lightning"}
    bad = [f"{m} imports {t}" for m in SOURCES if wing_of(m) == "core" and m not in allowed
           for t, _, _ in imports(SOURCES[m]) if wing_of(t) != "core"]
    assert not bad, bad


def test_train_uses_only_loads_public_names():
    import carla_wds.load as load
    bad = []
    for m in SOURCES:
        if wing_of(m) != "train":
            continue
        for target, names, line in imports(SOURCES[m]):
            where = f"{SOURCES[m].relative_to(PKG.parent)}:{line}"
            if target.startswith("carla_wds.load."):
                bad.append(f"{where} imports {target}, not carla_wds.load")
            elif target == "carla_wds.load":
                bad += [f"{where} imports {n}, not in carla_wds.load.__all__" for n in names
                        if n not in load.__all__]
    assert not bad, bad


def test_the_walk_sees_imports(tmp_path):
    """The checks above cannot pass by finding nothing: the walk resolves relative imports."""
    found = {t for t, _, _ in imports(PKG / "train" / "loop.py")}
    assert {"carla_wds.load", "carla_wds.train.config", "torch", "carla_wds.fileio"} <= found
    assert "carla_wds.pack.options" in closure("carla_wds.pack")
