"""A LEAD route zip read in place through the shared archive readers (pack/archive_open.py,
archives.MemberTree, sources.files_from): the planner and the encoder then read its members
at the paths they would have once extracted, as from a folder.

ln2697/lead_carla's zips are extracted by LEAD's scripts/unzip_routes.sh with
`unzip -o ZIP -d .` from its repository root, so their members carry the loader's path,
`data/carla_leaderboard2/data/<Scenario>/<route>/...`: a member is taken below the path
component named like the route (the zip's name less `.zip`), or as it is when none is.
"""
from __future__ import annotations

import atexit
from contextlib import contextmanager
from typing import Any, Iterator

from ...archive_open import open_archive
from ...archives import MemberTree
from ...sources import files_from
from .routes import LeadRoute

# the archive a worker process holds open (one at a time: tasks come route by route)
_HELD: dict[str, Any] = {}


@atexit.register
def release_held() -> None:
    """Close the held archive (the last route's stays open until its process ends)."""
    for held in _HELD.values():
        held[1].close()
    _HELD.clear()


def _rename(route: str):
    def rename(name: str) -> str | None:
        parts = name.split("/")
        at = [k for k, part in enumerate(parts[:-1]) if part == route]
        return "/".join(parts[at[-1] + 1:]) if at else name
    return rename


def _open(route: LeadRoute) -> tuple[MemberTree, Any]:
    archive = open_archive(route.path, _rename(route.folder.name), f"route archive {route.path}")
    return MemberTree(str(route.folder), archive.names(), archive.read), archive


@contextmanager
def route_files(route: LeadRoute) -> Iterator[None]:
    """Within the block, a zip route's members are its files (a folder route: nothing to do).
    ArchiveError (a ValueError) names the archive, the member and the fix."""
    if route.archive is None:
        yield
        return
    tree, archive = _open(route)
    try:
        with files_from(tree):
            yield
    finally:
        archive.close()


@contextmanager
def held_route_files(route: LeadRoute) -> Iterator[None]:
    """route_files for a worker: the zip stays open for the route's next frames."""
    if route.archive is None:
        yield
        return
    key = str(route.archive)
    if key not in _HELD:
        release_held()
        _HELD[key] = _open(route)
    with files_from(_HELD[key][0]):
        yield


__all__ = ["held_route_files", "route_files"]
