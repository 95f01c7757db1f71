"""What an overlay kind is (issue 30): a tree of per-frame label files that another project
ships beside a base dataset, keyed to its frames by the file's path or its content.

A kind says which files of OVERLAY_DIR are its entries (by the name's ending), how one entry
names its base frame (the route folder's path parts, the route folder last, and the frame
number), and what structure its JSON has. The kinds themselves live in the rooms of the
datasets they annotate (pack/datasets/overlays.py lists them); nothing here names a dataset.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Iterator

from .archives import TAR_GZ, ArchiveError, TarGzArchive
from .errors import PackError
from .sources import decode_json, read_bytes

# (route path parts, the route folder last; frame number), or why the entry names no frame
Located = tuple[tuple[str, ...], int]
Locate = Callable[[PurePosixPath, Any], "Located | str"]
Check = Callable[[Any], "str | None"]


@dataclass(frozen=True)
class OverlayKind:
    """One kind of overlay tree (see the module docstring)."""
    name: str
    source: str           # the project and the file that defines this structure (docs)
    suffixes: tuple[str, ...]   # endings of an entry's file name, e.g. (".json.gz",)
    locate: Locate        # (path relative to OVERLAY_DIR, parsed JSON) -> Located or why not
    check: Check          # parsed JSON -> None, or what its structure lacks
    folder: str | None = None   # the folder an entry file must be in (others are not read)
    keep: tuple[str, ...] = ()  # the keys of an entry's JSON object stored (all if empty)

    def wants(self, path: str) -> bool:
        """Whether the file (or archive member) at this posix path is one of its entries."""
        parts = path.rsplit("/", 2)
        return parts[-1].endswith(self.suffixes) and (
            self.folder is None or (len(parts) > 1 and parts[-2] == self.folder))


@dataclass(frozen=True)
class Entry:
    """One overlay file, read and located."""
    file: str                  # relative to OVERLAY_DIR (archive:member in an archive)
    route: tuple[str, ...]
    frame: int
    value: Any


def frame_number(stem: str, file: str) -> int | str:
    """A frame file's stem ("0042") -> 42, or why it is no frame number."""
    return int(stem) if stem.isdigit() and len(stem) <= 9 else \
        f"file {file}: {stem!r} is not a frame number"


def route_and_frame(parts: tuple[str, ...], stem: str, file: str) -> Located | str:
    """Located from a route folder's path parts and a frame file's stem."""
    frame = frame_number(stem, file)
    if isinstance(frame, str):
        return frame
    if not parts or not all(parts):
        return f"file {file}: names no route folder"
    return tuple(parts), frame


Read = Callable[[], bytes]   # an entry file's bytes, bounded


# (path inside the tree or archive, where (for errors), read, name in the unmatched list)
Found = tuple[PurePosixPath, str, Read, str]


def entry_files(root: Path, kind: OverlayKind) -> Iterator[Found]:
    """(path, where, read, name) of every entry file of `kind` under root (kind.wants),
    then of every such member of the `.tar.gz` archives under root (as the projects ship
    their label chunks), read without extraction (pack/archives.py: members that leave the
    archive, links and duplicates refused). A symlink anywhere below root is refused: an
    overlay's files are read where they are, never through a link that may point out of
    the tree."""
    if root.is_symlink() or not root.is_dir():
        raise PackError(f"overlay folder {root}: not a folder (a symlink is refused). Fix: "
                        "pass the folder holding the overlay's files or its .tar.gz chunks")
    archives = []
    for top, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(dirs + files):
            path = Path(top) / name
            if path.is_symlink():
                raise PackError(f"overlay file {path}: a symlink; refused, since it may point "
                                "out of the overlay folder. Fix: replace it with the file itself")
        for name in sorted(files):
            path = Path(top) / name
            rel = PurePosixPath(path.relative_to(root).as_posix())
            if kind.wants(str(rel)):
                yield rel, str(path), lambda p=path: read_bytes(p), str(rel)
            elif name.endswith(TAR_GZ):
                archives.append(path)
    for path in archives:
        yield from _archive_members(path, path.relative_to(root).as_posix(), kind)


def _archive_members(path: Path, rel: str, kind: OverlayKind) -> Iterator[Found]:
    what = f"overlay archive {path}"
    try:
        archive = TarGzArchive(path, lambda n: n if kind.wants(n) else None, what)
    except ArchiveError as exc:
        raise PackError(f"{what}: {exc}. Fix: re-download it, or extract it and pass the "
                        "folder") from None
    try:
        for name in archive.names():
            yield (PurePosixPath(name), f"{path} member {name}",
                   lambda n=name: archive.read(n), f"{rel}:{name}")
    finally:
        archive.close()


def read_entry(kind: OverlayKind, found: Found) -> Entry | str:
    """One file -> Entry (bounded read, gunzip and JSON depth: limits.py), or why it names
    no base frame (an unmatched entry). A file that cannot be read or is not the kind's
    JSON is a PackError naming the file and the fix."""
    rel, where, read, name = found
    try:
        value = decode_json(read(), rel.name.endswith(".gz"))
    except (ValueError, OSError) as exc:   # LimitError is a ValueError
        raise PackError(f"overlay file {where}: {exc}. Fix: re-download or re-extract it, or "
                        "raise the limit it names (--limit NAME=N) if the file is genuine"
                        ) from None
    problem = kind.check(value)
    if problem:
        raise PackError(f"overlay file {where}: {problem} (--kind {kind.name}: "
                        f"{kind.source}). Fix: pass the --kind this tree is, or correct or "
                        "remove that file")
    located = kind.locate(rel, value)
    if isinstance(located, str):
        return located
    if kind.keep:   # a kind whose file repeats the base's own labels keeps only its own
        value = {k: value[k] for k in kind.keep if k in value}
    return Entry(name, located[0], located[1], value)
