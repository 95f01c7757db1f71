"""The size of a walked pickle's value as it will be stored (pickle_walk.py builds it): values
counted with a container reached twice counting twice, nesting, cycles refused. Shared by every
reader of raw pickles (LEAD's metas/bboxes, Bench2Drive's HD maps)."""
from __future__ import annotations

from typing import Any, Iterator

import numpy as np

from .. import limits
from .pickle_walk import STRING_CHARS, Global, Refused, array_values

_END = object()
_SCALARS = (type(None), bool, int, float)


def _leaf_size(x: Any) -> tuple[int, int] | None:
    """(values, nesting) of a value that is not a container; None for a list, tuple or dict;
    Refused for anything that is no value (a global, a dtype)."""
    if type(x) in _SCALARS or isinstance(x, np.generic):
        return 1, 0
    if type(x) in (str, bytes, bytearray):
        return 1 + len(x) // STRING_CHARS, 0
    if type(x) is np.ndarray:
        return array_values(x.shape), x.ndim
    if type(x) in (list, tuple, dict):
        return None
    what = x.spelled if type(x) is Global else type(x).__name__
    raise Refused(f"{what} as a value; expected plain values and numeric arrays")


def _children(x: Any) -> Iterator[Any]:
    if type(x) is dict:
        return (v for item in x.items() for v in item)
    return iter(x)


def measure(root: Any, shared: set[int] | None = None) -> None:
    """LimitError unless `root`, expanded as it will be stored (a container reached twice
    counts twice), is within pickle_values and nested within json_depth; Refused for a cycle
    or a non-value. Iterative, and each container is walked once: its size is remembered,
    only for the ids in `shared` if given (Walk.shared(): the only containers a walked value
    can hold twice), which keeps a large map's measure from holding a record per point."""
    lim = limits.active()
    got = _leaf_size(root)
    if got is not None:
        lim.check("pickle_values", got[0], "the values a pickle holds, as stored")
        lim.check("json_depth", got[1], "the nesting depth of a pickle's value")
        return
    done: dict[int, tuple[int, int]] = {}   # id -> (values, nesting) of a finished container
    path: list[list[Any]] = []              # [container, its children, values, nesting]
    open_ids: set[int] = set()

    max_values, max_depth = lim.pickle_values, lim.json_depth   # (compared inline: hot)

    def grow(frame: list[Any], size: int, height: int, at: int) -> None:
        frame[2] += size
        if height >= frame[3]:
            frame[3] = height + 1
        if frame[2] > max_values or at + frame[3] > max_depth:
            lim.check("pickle_values", frame[2], "the values a pickle holds, as stored (a "
                      "repeated object counts each time, an array its elements)")
            lim.check("json_depth", at + frame[3], "the nesting depth of a pickle's value")

    def enter(node: Any) -> None:
        open_ids.add(id(node))
        path.append([node, _children(node), 0, 1])
        grow(path[-1], 1, 0, len(path) - 1)   # itself: one value, one level

    enter(root)
    while path:
        frame = path[-1]
        child = next(frame[1], _END)
        if child is _END:
            path.pop()
            open_ids.discard(id(frame[0]))
            if shared is None or id(frame[0]) in shared:
                done[id(frame[0])] = (frame[2], frame[3])
            if path:
                grow(path[-1], frame[2], frame[3], len(path) - 1)
            continue
        got = _leaf_size(child) or done.get(id(child))
        if got is not None:
            grow(frame, got[0], got[1], len(path) - 1)
        elif id(child) in open_ids:
            raise Refused("a container that holds itself (a cycle)")
        else:
            enter(child)


__all__ = ["measure"]
