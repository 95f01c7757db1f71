"""Route folders packed straight from their `.tar.gz` and `.zip` archives, never extracted
(the shared readers of pack/archives.py, as Bench2Drive's clips are read).

INPUT_DIR (a folder, or an s3:// prefix) holds archives, at any depth, each with one or many
route folders at any depth. A route's episode is the path it would have once its archive is
extracted where the datasets' own instructions extract it, so the keys, the order and the
shards equal those of packing the extracted folders:
- a `.tar.gz` into its own folder (`tar xzf A.tar.gz -C <A's folder>`: SimLingo's
  `tar -xzf chunk.tar.gz -C database/simlingo`);
- a `.zip` into its own folder when all of its members lie under one top folder named as the
  zip's stem, else into `<its folder>/<stem>/` (DriveLM's download_pdm_lite_carla_lb2.py,
  OpenDriveLab/DriveLM@9e28182 unzip_file()).

One listing pass finds the routes (a zip's central directory; a `.tar.gz` streamed once with
every check, nothing kept), so routes are packed in the folders' order and --part/--select
split them as they split folders. An archive with no route folder of the layout (a language
label tree such as SimLingo's commentary/, drivelm/, dreamer/ chunks) is skipped and counted. A
route found in two archives is refused in one line (which copy, or which half, is meant is
unknown). Then routes are planned one at a time from their archive, opened once for all of its
routes that follow one another (a `.tar.gz` into the bounded spool, a `.zip` read in place),
and closed after its last one; each task carries its files' bytes to the encoder.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field, fields
from pathlib import Path, PurePosixPath
from typing import Any, Callable

from ....objstore import ObjectLister, is_objstore
from ....remote import RemoteOptions
from ...archive_open import open_archive
from ...archives import ZIP, ArchiveError, ArchiveURL, MemberTree, archive_ext
from ...errors import PackError
from ...routes import RoutePlan, Skip, raise_first_skip
from ...sources import files_from
from ..poses import ArrayEncoder, PosedTask

log = logging.getLogger(__name__)


@dataclass
class ArchivedTask(PosedTask):
    """A route task whose files travel as bytes (a worker never opens an archive)."""
    route: str = ""                                     # the route folder's virtual path
    blobs: dict[str, bytes] = field(default_factory=dict)   # path under route -> bytes


class ArchivedEncoder(ArrayEncoder):
    """ArrayEncoder reading an ArchivedTask's files from its bytes, at their paths."""

    def encode(self, task: Any):   # type: ignore[override]
        blobs = getattr(task, "blobs", None)
        if blobs is None:
            return super().encode(task)
        with files_from(MemberTree(task.route, blobs, blobs.__getitem__)):
            return super().encode(task)


@dataclass(frozen=True)
class Holder:
    """An archive and the folder (relative to INPUT_DIR) its members are extracted into."""
    path: Path | ArchiveURL
    into: str


def find_archives(input_dir: str | Path, remote: RemoteOptions | None
                  ) -> list[tuple[str, Path | ArchiveURL]]:
    """(folder relative to INPUT_DIR, archive) for every archive under INPUT_DIR, sorted."""
    found = []
    if isinstance(input_dir, str) and is_objstore(input_dir):
        lister = ObjectLister(input_dir, remote, "INPUT_DIR")
        todo = [lister.path]
        while todo:
            folder = todo.pop()
            dirs, files = lister.folder(folder)
            rel = folder[len(lister.path):].strip("/")
            found += [(rel, ArchiveURL(lister.url_of(p))) for p in files
                      if archive_ext(p.rsplit("/", 1)[-1])]
            todo.extend(dirs)
        return sorted(found, key=lambda f: (f[0], f[1].name))
    root, seen = Path(input_dir), set()
    for dirpath, dirnames, files in os.walk(root, followlinks=True):
        real = os.path.realpath(dirpath)
        if real in seen:   # a folder reached again through a symlink: searched once
            dirnames.clear()
            continue
        seen.add(real)
        dirnames.sort()
        rel = Path(dirpath).relative_to(root).as_posix()
        found += [("" if rel == "." else rel, Path(dirpath) / f) for f in sorted(files)
                  if archive_ext(f)]
    return found


def _into(folder: str, path: Path | ArchiveURL, names: list[str]) -> str:
    """Where the members land once extracted as the dataset's instructions say (module doc)."""
    if archive_ext(path.name) != ZIP:
        return folder
    stem = path.name[:-len(ZIP)]
    tops = {n.split("/", 1)[0] for n in names}
    return folder if tops == {stem} else str(PurePosixPath(folder, stem))


def routes_in(names: list[str], measurements: str) -> dict[str, int]:
    """Route folders (holding `measurements/`; a route's own subfolders are never routes) ->
    their measurement file count."""
    found: dict[str, int] = {}
    for name in names:
        parts = name.split("/")
        if measurements in parts[:-1]:
            i = parts.index(measurements)
            route = "/".join(parts[:i])
            found[route] = found.get(route, 0) + (i == len(parts) - 2)
    return {r: n for r, n in found.items()
            if not any(r != o and (o == "" or r.startswith(o + "/")) for o in found)}


class ArchivedRoute(str):
    """An archived route's episode (a str, as a route folder's), with its archive and its
    members' unpacked bytes (`size`: what a cluster plan balances and fingerprints)."""

    def __new__(cls, episode: str, archive: Path | ArchiveURL, size: int) -> "ArchivedRoute":
        self = super().__new__(cls, episode)
        self.archive, self.size = archive, size
        return self

    def __reduce__(self):
        return ArchivedRoute, (str(self), self.archive, self.size)


def _route_bytes(sizes: dict[str, int], routes: dict[str, int]) -> dict[str, int]:
    """Each route's members' bytes (a member counts for the route folder it lies under)."""
    held = dict.fromkeys(routes, 0)
    for name, size in sizes.items():
        parts = name.split("/")
        for i in range(len(parts)):
            route = "/".join(parts[:i])
            if route in held:
                held[route] += size
                break
    return held


class RouteArchives:
    """The routes of INPUT_DIR's archives (one listing pass), planned route by route."""

    def __init__(self, input_dir: str | Path, measurements: str, remote: RemoteOptions | None,
                 spool_bytes: int) -> None:
        self.input_dir, self.remote, self.spool_bytes = input_dir, remote, spool_bytes
        self.where: dict[str, tuple[Holder, str]] = {}   # episode -> (archive, route in it)
        self.frames: dict[str, int] = {}
        self.sizes: dict[str, int] = {}   # episode -> its members' unpacked bytes
        self.without_routes: list[str] = []
        self.archives = find_archives(input_dir, remote)
        for folder, path in self.archives:
            self._list(folder, path, measurements)
        self._open: tuple[Holder, Any] | None = None
        self._left: dict[Holder, int] = {}

    def _list(self, folder: str, path: Path | ArchiveURL, measurements: str) -> None:
        try:
            archive = open_archive(path, lambda n: n, f"archive {path}", 1 << 20,
                                   self.remote, keep=False)
        except ArchiveError as exc:
            said = f"{exc}" if str(path) in str(exc) else f"archive {path}: {exc}"
            raise PackError(said if "Fix:" in said or "--limit " in said else
                            f"{said}. Fix: download it again (compare its size and checksum "
                            "with the source's), or move it out of INPUT_DIR") from None
        names = archive.names()
        sizes = {n: archive.size(n) for n in names}
        archive.close()
        holder = Holder(path, _into(folder, path, names))
        found = routes_in(names, measurements)
        if not found:
            self.without_routes.append(str(path))
        held = _route_bytes(sizes, found)
        for route, n in found.items():
            episode = str(PurePosixPath(holder.into, route)) if route else holder.into
            if episode in ("", "."):
                raise PackError(f"archive {path}: its members form one route at INPUT_DIR's "
                                "own top; expected route folders inside it. Fix: put the "
                                "archive in a folder named as the route")
            if episode in self.where:
                raise PackError(
                    f"route {episode} is in two archives: {self.where[episode][0].path} and "
                    f"{path}; expected each route in one archive (which copy, or which part, "
                    "is meant is unknown). Fix: keep one copy, or extract both into one folder "
                    "and pack the folder")
            self.where[episode] = (holder, route)
            self.frames[episode] = n
            self.sizes[episode] = held[route]

    def routes(self) -> list[ArchivedRoute]:
        """The episodes, sorted, each with its archive and bytes (a cluster plan's sizes)."""
        return [ArchivedRoute(e, self.where[e][0].path, self.sizes[e]) for e in sorted(self.where)]

    def start(self, episodes: list[str]) -> None:
        """The routes to be planned, in order: each archive is closed after its last one."""
        self._left = {}
        for e in episodes:
            holder = self.where[e][0]
            self._left[holder] = self._left.get(holder, 0) + 1

    def plan(self, episode: str, planner: Callable[[], RoutePlan], fail: bool) -> RoutePlan:
        """planner() with the route's archive members read in place of its folder's files,
        then each task given its files' bytes."""
        holder, _ = self.where[episode]
        try:
            archive = self._archive(holder)
        except ArchiveError as exc:   # read whole at listing: it changed since, or a member
            said = f"{exc}" if str(holder.path) in str(exc) else f"archive {holder.path}: {exc}"
            if fail:
                raise PackError(f"{said}. Fix: download the archive again, or pack with "
                                "--on-error skip to list its routes and go on") from None
            return RoutePlan(episode, filtered=said)
        root = str(Path(self.input_dir) / holder.into) if holder.into else str(
            Path(self.input_dir))
        try:
            with files_from(MemberTree(root, archive.names(), archive.read)):
                plan = planner()
                if _carry_bytes(plan, str(Path(self.input_dir) / episode)) and fail:
                    raise_first_skip(plan, "fail")
        finally:
            self._done(holder)
        return plan

    def _archive(self, holder: Holder) -> Any:
        if self._open is not None and self._open[0] == holder:
            return self._open[1]
        self.close()
        into = holder.into
        wanted = {r for e, (h, r) in self.where.items() if h == holder}
        rename = (lambda n: n if any(r == "" or n.startswith(r + "/") for r in wanted) else None)
        archive = open_archive(holder.path, rename, f"archive {holder.path}", self.spool_bytes,
                               self.remote)
        self._open = (holder, archive)
        log.debug("archive %s opened (routes under %s)", holder.path, into or ".")
        return archive

    def _done(self, holder: Holder) -> None:
        self._left[holder] = self._left.get(holder, 1) - 1
        if self._left[holder] <= 0:
            self.close()

    def close(self) -> None:
        if self._open is not None:
            self._open[1].close()
            self._open = None


def _carry_bytes(plan: RoutePlan, route: str) -> bool:
    """Each task becomes an ArchivedTask holding its files' bytes; a member that cannot be
    read (a zip member whose CRC fails) makes its frame a skip naming it (True: one did)."""
    from ...sources import read_file
    tasks = []
    for task in plan.tasks:
        paths = [*task.image_paths.values(), *task.sensor_paths.values()]
        try:
            blobs = {p[len(route) + 1:]: read_file(p) for p in paths}
        except (ArchiveError, OSError) as exc:
            plan.skipped.append(Skip(plan.episode, task.frame, "/".join(
                PurePosixPath(paths[0]).parts[-2:]), str(exc)))
            continue
        kw = {f.name: getattr(task, f.name) for f in fields(task)}
        tasks.append(ArchivedTask(**kw, route=route, blobs=blobs))
    bad, plan.tasks = len(plan.tasks) - len(tasks), tasks
    return bad > 0


__all__ = ["ArchivedEncoder", "ArchivedRoute", "ArchivedTask", "RouteArchives", "find_archives",
           "routes_in"]
