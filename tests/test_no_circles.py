"""No import circle in the package: the graph of module imports (walked with ast, lazy ones
too, as tests/test_imports.py walks them) has no cycle. An edge from a module to one of its
own ancestor packages is left out: importing a.b.c runs a/__init__ and a/b/__init__ first
anyway, so such an edge orders nothing."""
from __future__ import annotations

from tests.test_imports import SOURCES, imports


def targets(module: str) -> set[str]:
    """The package's modules `module` imports: `from x import y` imports x, and x.y when that
    is a module or a package (test_imports' walk sees only module files there)."""
    out = set()
    for base, names, _ in imports(SOURCES[module]):
        out |= {base} | {f"{base}.{n}" for n in names}
    return {t for t in out if t in SOURCES and t != module and not module.startswith(t + ".")}


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
    assert "carla_wds.codecbase" in g["carla_wds.modalities.depth"]
