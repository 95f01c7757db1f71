"""No import circle in the package: the graph of module imports (walked with ast, lazy ones
too, as tests/test_imports.py walks them, and `importlib.import_module("...")` by its string)
has no cycle. An edge from a module to one of its own ancestor packages is left out when it
only reaches that package's submodules (`from . import sibling`): importing a.b.c runs
a/__init__ and a/b/__init__ first anyway, so such an edge orders nothing. A name taken from
an ancestor's own body (`from .. import registry_function`) is an edge like any other."""
from __future__ import annotations

import ast

from tests.test_imports import SOURCES, imports


def _string_imports(module: str) -> set[str]:
    """Modules named by importlib.import_module("carla_wds....") calls: a circle hidden in a
    string is a circle."""
    out = set()
    for node in ast.walk(ast.parse(SOURCES[module].read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(
                node.func, "id", None)) == "import_module" and node.args and isinstance(
                node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            out.add(node.args[0].value)
    return out


def targets(module: str) -> set[str]:
    """The package's modules `module` imports: `from x import y` imports x, and x.y when that
    is a module or a package (test_imports' walk sees only module files there)."""
    out = set(_string_imports(module))
    for base, names, _ in imports(SOURCES[module]):
        subs = {f"{base}.{n}" for n in names if f"{base}.{n}" in SOURCES}
        out |= subs
        if module.startswith(base + ".") and names and len(subs) == len(set(names)):
            continue   # only submodules of an ancestor: the ancestor runs first anyway
        out.add(base)
    return {t for t in out if t in SOURCES and t != module
            and (not module.startswith(t + ".") or t in _named_from(module, t))}


def _named_from(module: str, ancestor: str) -> set[str]:
    """{ancestor} when `module` takes a name defined in the ancestor's own body."""
    for base, names, _ in imports(SOURCES[module]):
        if base == ancestor and any(f"{base}.{n}" not in SOURCES for n in names):
            return {ancestor}
    return set()


def graph() -> dict[str, set[str]]:
    return {m: targets(m) for m in SOURCES}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (iterative Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    for root in sorted(g):
        if root in index:
            continue
        work = [(root, iter(sorted(g[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(g[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_the_package_has_no_import_circle():
    assert cycles(graph()) == []


def test_the_walk_finds_a_circle_where_there_is_one():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    g = graph()   # and it sees the package's real edges
    assert "carla_wds.modalities" in g["carla_wds.codecs"]
    assert "carla_wds.pack.datasets" in g["carla_wds.pack.options"]
    assert "carla_wds.codecbase" in g["carla_wds.modalities.depth"]
