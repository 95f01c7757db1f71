"""Clips of a clip-based dataset (Bench2Drive), from extracted folders or straight from the
distributed `.tar.gz` archives, and the official train/val split.

An archive is read once, as a stream, by the shared pack machinery (archives.TarGzArchive:
`tarfile` mode "r|" over Gunzip, no seek, nothing extracted; every gzip member's CRC32 and
length verified, the stream required to end cleanly, its members counted against the limits
clip_members, raw_file_bytes and clip_bytes), into one spool: its members' bytes, back to
back, with an index of name -> (offset, size). The
members of a Bench2Drive archive are not in frame order, so a frame can only be assembled once
the whole clip has been read; the spool is what bounds that. It lives in memory up to
`spool_bytes` (default 1 GiB; a Base clip is about 335 MB) and rolls over into ONE anonymous
temporary file beyond that, which is deleted when the clip is closed. So a pack worker holds
at most one clip: its memory is bounded by min(clip size, spool_bytes) whatever the dataset's
size, and no archive is ever extracted into files. A disk, quota or memory that fills while
spooling is errors.ResourceError (TMPDIR, its free space, --spool-bytes named): the machine,
never the archive, so --on-error skip never leaves a good clip out for it.

INPUT_DIR may also be an s3:// (any fsspec) prefix of clip archives: they are listed through
objstore.ObjectLister and each is read as the same stream, from an objstore.ObjectReader
(ranged reads of objstore.BLOCK bytes, read timeouts, bounded retries at the same offset), so
memory is bounded as for a local archive. Credentials and the endpoint come from the AWS
environment or config (ClipRef.remote carries RemoteOptions, storage_options included, for
library callers). Extracted clip folders are refused on a store: a clip is thousands of small
objects, a request each.
"""
from __future__ import annotations

import os
import tarfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from ....codecs import json_loads
from ....objstore import ObjectLister, is_objstore, read_object
from ....remote import RemoteOptions
from ...archives import (DEFAULT_SPOOL_BYTES, RATIO_FREE, TAR_GZ, ArchiveError, ArchiveURL,
                         TarGzArchive)
from ...errors import PackError
from ...sources import read_bytes

ARCHIVE_EXT = TAR_GZ
SUBSETS = ("train", "val", "all")
MAX_SPLIT_BYTES = 16 << 20   # Bench2Drive's split file is ~1 MB for 13,638 clips


# A clip that cannot be read as a whole (a truncated or corrupt archive): archives' error.
ClipError = ArchiveError


# An archive's URL on an object store (archives.ArchiveURL): a str with a Path's `.name`.
ClipURL = ArchiveURL


@dataclass(frozen=True)
class ClipRef:
    name: str              # the clip folder's name: the episode of its sample keys
    path: Path | ClipURL   # the folder, or the archive (a local file or an object's URL)
    archive: bool
    # how a stored archive is read (timeouts, retries, storage_options); None: defaults
    remote: RemoteOptions | None = field(default=None, compare=False, repr=False)

    @property
    def stored(self) -> bool:
        return isinstance(self.path, ClipURL)


class FolderClip:
    """An extracted clip folder: files read on demand, each bounded."""

    def __init__(self, ref: ClipRef) -> None:
        self.ref = ref
        self._names = sorted(
            (Path(d) / f).relative_to(ref.path).as_posix()
            for d, _, files in os.walk(ref.path) for f in files)

    def names(self) -> list[str]:
        return self._names

    def read(self, rel: str) -> bytes:
        return read_bytes(self.ref.path / rel)

    def close(self) -> None:
        pass


class ArchiveClip(TarGzArchive):
    """A clip `.tar.gz`, streamed once into a bounded spool (archives.TarGzArchive): its
    members are the files under the clip's one folder, named relative to it."""

    def __init__(self, ref: ClipRef, spool_bytes: int = DEFAULT_SPOOL_BYTES) -> None:
        self.ref = ref
        super().__init__(ref.path, None, f"clip {ref.path}", spool_bytes, ref.remote,
                         ratio_free=RATIO_FREE, kind="clip archive")

    def member_key(self, member: tarfile.TarInfo) -> str | None:
        """The member's path inside its clip folder; None for folders. Anything that is not a
        plain file of this clip (a link, a device, a path out of it) is refused: the archive
        is data, and nothing of it is ever written out under its own name."""
        if member.isdir():
            return None
        parts = PurePosixPath(member.name).parts
        if not member.isfile() or len(parts) < 2 or parts[0] != self.ref.name or any(
                p in ("..", "") for p in parts) or member.name.startswith("/"):
            raise ClipError(f"member {member.name!r} is not a plain file under "
                            f"{self.ref.name}/; expected a Bench2Drive clip archive")
        return "/".join(parts[1:])


def open_clip(ref: ClipRef, spool_bytes: int = DEFAULT_SPOOL_BYTES) -> FolderClip | ArchiveClip:
    return ArchiveClip(ref, spool_bytes) if ref.archive else FolderClip(ref)


def find_clips(input_dir: str | Path, marker: str = "anno",
               remote: RemoteOptions | None = None) -> list[ClipRef]:
    """Clip folders (holding `marker/`) and `*.tar.gz` clip archives under input_dir, sorted
    by clip name, so a folder tree and the archives of the same clips give the same order.
    A clip found twice (a folder and an archive, or two archives) is an error.

    input_dir may be an s3:// (any fsspec) URL prefix: its archives are listed, recursively
    (`remote`: timeouts, retries, storage_options). A failing store raises RemoteError."""
    if isinstance(input_dir, str) and is_objstore(input_dir):
        found = _stored_clips(input_dir, marker, remote)
        if not found:
            raise PackError(f"INPUT_DIR {input_dir}: no clip {ARCHIVE_EXT} archives found under "
                            f"this prefix; expected one <clip>{ARCHIVE_EXT} object per clip. "
                            "Fix: check the bucket and prefix (the URL), and that the archives "
                            "were uploaded there")
        return [found[n] for n in sorted(found)]
    root = Path(input_dir)
    if not root.is_dir():
        raise PackError(f"INPUT_DIR {root} is not a directory")
    found: dict[str, ClipRef] = {}
    for dirpath, dirnames, files in os.walk(root, followlinks=True):
        dirnames.sort()
        refs = [ClipRef(f[:-len(ARCHIVE_EXT)], Path(dirpath) / f, True)
                for f in sorted(files) if _is_archive(f)]
        if marker in dirnames:
            refs.append(ClipRef(Path(dirpath).name, Path(dirpath), False))
            dirnames.clear()
        for ref in refs:
            _add_clip(found, ref, "pack either the folders or the archives")
    if not found:
        raise PackError(f"INPUT_DIR {root}: no clips found; expected clip folders holding "
                        f"'{marker}/' or clip {ARCHIVE_EXT} archives. Fix: point INPUT_DIR at "
                        "the folder of the downloaded archives or of the extracted clips")
    return [found[n] for n in sorted(found)]


def _is_archive(name: str) -> bool:
    return name.endswith(ARCHIVE_EXT) and not name.startswith(".")


def _add_clip(found: dict[str, ClipRef], ref: ClipRef, fix: str) -> None:
    if ref.name in found:
        raise PackError(f"clip {ref.name} is found twice: {found[ref.name].path} and "
                        f"{ref.path}. Fix: {fix}")
    found[ref.name] = ref


def _stored_clips(url: str, marker: str, remote: RemoteOptions | None) -> dict[str, ClipRef]:
    """The archives under an object-store prefix, folder by folder (one listing request per
    folder and page). A folder holding `marker/` is an extracted clip: refused at the first."""
    lister = ObjectLister(url, remote, "INPUT_DIR")
    found: dict[str, ClipRef] = {}
    todo = [lister.path]
    while todo:
        folder = todo.pop()
        dirs, files = lister.folder(folder)
        if folder == lister.path and list(files) == [folder]:
            raise PackError(f"INPUT_DIR {url} is one object; expected the prefix (folder) "
                            "holding the clip archives. Fix: pass that prefix, e.g. "
                            f"{lister.url_of(folder.rsplit('/', 1)[0])}/")
        if any(d.rsplit("/", 1)[-1] == marker for d in dirs):
            raise PackError(
                f"INPUT_DIR {url} holds extracted clip folders (e.g. "
                f"{lister.url_of(folder)}/{marker}/); clips are read from object storage only "
                f"as their {ARCHIVE_EXT} archives, since a clip folder is thousands of small "
                f"objects, a request each. Fix: upload the clip archives as downloaded (one "
                f"<clip>{ARCHIVE_EXT} per clip) and pack their prefix, or download the folders "
                "and pack the local copy")
        for path in files:
            base = path.rsplit("/", 1)[-1]
            if _is_archive(base):
                _add_clip(found, ClipRef(base[:-len(ARCHIVE_EXT)],
                                         ClipURL(lister.url_of(path)), True, remote),
                          "keep one copy of each clip's archive under INPUT_DIR")
        todo.extend(reversed(dirs))   # depth first, in name order
    return found


def split_clips(clips: list[ClipRef], split_file: str | Path, subset: str,
                remote: RemoteOptions | None = None) -> tuple[list[ClipRef], list[str]]:
    """The clips of `subset` in Bench2Drive's split JSON ({"val": ["v1/<clip>", ...]}, with
    an optional "train" list; without one, train is every clip not in val). Returns the kept
    clips and the names the split lists that INPUT_DIR lacks. A clip the file lists in
    neither subset, when it has both, is an error naming it. The file may be an s3:// (any
    fsspec) URL, read bounded with `remote`'s timeouts and retries (RemoteError if the store
    fails)."""
    stored = isinstance(split_file, str) and is_objstore(split_file)
    if stored:
        data = read_object(split_file, MAX_SPLIT_BYTES, remote, what="--split")
    try:
        doc = json_loads(data if stored else read_bytes(Path(split_file), MAX_SPLIT_BYTES))
    except (OSError, ValueError) as exc:
        raise PackError(f"--split {split_file}: {exc}; expected Bench2Drive's split JSON "
                        '({"val": ["v1/<clip>", ...]})') from None
    lists = {k: doc.get(k) for k in ("train", "val")} if isinstance(doc, dict) else {}
    if not isinstance(lists.get("val"), list) or not all(
            isinstance(v, str) for k in lists if lists[k] is not None for v in lists[k]):
        raise PackError(f"--split {split_file}: expected an object with a 'val' list of clip "
                        "names (and optionally 'train'), as bench2drive_base_train_val_split.json")
    names = {k: {PurePosixPath(v).name for v in lists[k]} for k in lists if lists[k] is not None}
    have = {c.name for c in clips}
    if "train" in names:
        stray = sorted(have - names["train"] - names["val"])
        if stray:
            raise PackError(f"--split {split_file}: clip {stray[0]} (and {len(stray) - 1} "
                            "more) is in neither its train nor its val list. Fix: add them to "
                            "the split file, or move them out of INPUT_DIR")
    if subset == "all":
        return clips, []
    wanted = names[subset] if subset in names else have - names["val"]
    return [c for c in clips if c.name in wanted], sorted(wanted - have)


def by_folder(names: list[str]) -> dict[str, dict[int, str]]:
    """'camera/rgb_front/00042.jpg' -> {'camera/rgb_front': {42: name}}; the expert files'
    '-0001' is frame -1."""
    out: dict[str, dict[int, str]] = {}
    for name in names:
        folder, _, base = name.rpartition("/")
        stem = base.split(".", 1)[0]
        if stem.lstrip("-").isdigit():
            out.setdefault(folder, {})[int(stem)] = name
    return out
