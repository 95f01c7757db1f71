"""YAML from a file carla-wds did not write (a layout), read with bounds.

`yaml.safe_load` constructs no objects, but it still lets a 1 KB file of aliases of aliases
("billion laughs") stand for a value of 10^9 nodes: shared references cost nothing to load,
and the first `repr` in an error message, or the first walk over the value, expands them. So
the file is read to at most `yaml_bytes` (limits.py), composed into nodes, and the size of the
value *with every alias expanded* is counted before anything is constructed; a value over
MAX_NODES, a recursive alias or nesting deeper than the parser's stack is one ValueError.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from . import limits

# A built-in layout expands to ~300 nodes; a hand-written one will not need 30x that.
MAX_NODES = 10_000
LAYOUT = "a layout, which needs no more than a few hundred"   # what a file over it should be


def read_yaml(path: str | Path, what: str = "YAML file", expected: str = LAYOUT) -> Any:
    """The value of a YAML file, bounded as the module docstring says (ValueError names it)."""
    bound = limits.active().yaml_bytes
    with open(path, "rb") as f:
        raw = f.read(bound + 1)
    limits.active().check("yaml_bytes", len(raw), f"{path}: the {what}'s size in bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not a text file (not UTF-8); expected a {what}") from None
    return load_bounded(text, str(path), expected)


def load_bounded(text: str, where: str, expected: str = LAYOUT) -> Any:
    """yaml.safe_load of `text`, refusing values over MAX_NODES once aliases are expanded
    (`expected`: what the text should be, for that error)."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _count(node, {}, set(), where, expected)
        return loader.construct_document(node)
    except RecursionError:
        raise ValueError(f"{where}: nested too deeply; expected a YAML mapping a few levels "
                         "deep") from None
    finally:
        loader.dispose()


def _count(node: yaml.Node, sizes: dict[int, int], open_: set[int], where: str,
           expected: str) -> int:
    """Nodes in `node` with aliases expanded (memoised per node, so counting is linear)."""
    key = id(node)
    if key in sizes:
        return sizes[key]
    if key in open_:
        raise ValueError(f"{where}: a recursive alias (an anchor used inside itself, line "
                         f"{node.start_mark.line + 1}); expected plain data")
    open_.add(key)
    if isinstance(node, yaml.MappingNode):
        children = [n for pair in node.value for n in pair]
    elif isinstance(node, yaml.SequenceNode):
        children = list(node.value)
    else:
        children = []
    total = 1
    for child in children:
        total += _count(child, sizes, open_, where, expected)
        if total > MAX_NODES:
            raise ValueError(f"{where}: its aliases expand to over {MAX_NODES:,} values (line "
                             f"{node.start_mark.line + 1}); expected {expected}. Fix: write "
                             "the values out, or use fewer aliases")
    open_.discard(key)
    sizes[key] = total
    return total
