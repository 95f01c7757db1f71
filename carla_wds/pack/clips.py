"""Clips of a clip-based dataset (Bench2Drive), from extracted folders or straight from the
distributed `.tar.gz` archives, and the official train/val split.

An archive is read once, as a stream (`tarfile` mode "r|gz": no seek, nothing extracted), into
one spool: its members' bytes, back to back, with an index of name -> (offset, size). The
members of a Bench2Drive archive are not in frame order, so a frame can only be assembled once
the whole clip has been read; the spool is what bounds that. It lives in memory up to
`spool_bytes` (default 1 GiB; a Base clip is about 335 MB) and rolls over into ONE anonymous
temporary file beyond that, which is deleted when the clip is closed. So a pack worker holds
at most one clip: its memory is bounded by min(clip size, spool_bytes) whatever the dataset's
size, and no archive is ever extracted into files.
"""
from __future__ import annotations

import json
import os
import tarfile
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from .errors import PackError
from .sources import MAX_RAW_BYTES, read_bytes

ARCHIVE_EXT = ".tar.gz"
DEFAULT_SPOOL_BYTES = 1 << 30
MAX_CLIP_BYTES = 64 << 30    # a Full clip is ~0.3 GB; a stream past this is not a clip
SUBSETS = ("train", "val", "all")


class ClipError(ValueError):
    """A clip that cannot be read as a whole (a truncated or corrupt archive)."""


@dataclass(frozen=True)
class ClipRef:
    name: str     # the clip folder's name: the episode of its sample keys
    path: Path    # the folder, or the archive
    archive: bool


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


class ArchiveClip:
    """A clip `.tar.gz`, streamed once into a bounded spool (see the module docstring)."""

    def __init__(self, ref: ClipRef, spool_bytes: int = DEFAULT_SPOOL_BYTES) -> None:
        self.ref = ref
        self._spool = tempfile.SpooledTemporaryFile(max_size=spool_bytes)
        self._index: dict[str, tuple[int, int]] = {}
        try:
            self._stream()
        except BaseException:
            self.close()
            raise

    def _stream(self) -> None:
        size = 0
        try:
            with tarfile.open(self.ref.path, mode="r|gz") as tar:
                for member in tar:
                    rel = self._member_name(member)
                    if rel is None:
                        continue
                    if member.size > MAX_RAW_BYTES:
                        raise ClipError(f"member {member.name} is {member.size} bytes; expected "
                                        f"a per-frame file under {MAX_RAW_BYTES}")
                    size += member.size
                    if size > MAX_CLIP_BYTES:
                        raise ClipError(f"over {MAX_CLIP_BYTES} bytes; expected one clip")
                    data = tar.extractfile(member).read()
                    if len(data) != member.size:
                        raise EOFError(f"member {member.name} is cut short")
                    self._index[rel] = (self._spool.tell(), len(data))
                    self._spool.write(data)
        except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
            raise ClipError(f"truncated or corrupt archive after {len(self._index)} members "
                            f"({type(exc).__name__}: {exc}); expected a complete .tar.gz") from None

    def _member_name(self, member: tarfile.TarInfo) -> str | None:
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

    def names(self) -> list[str]:
        return sorted(self._index)

    def read(self, rel: str) -> bytes:
        offset, size = self._index[rel]
        self._spool.seek(offset)
        return self._spool.read(size)

    def close(self) -> None:
        self._spool.close()


def open_clip(ref: ClipRef, spool_bytes: int = DEFAULT_SPOOL_BYTES) -> FolderClip | ArchiveClip:
    return ArchiveClip(ref, spool_bytes) if ref.archive else FolderClip(ref)


def find_clips(input_dir: str | Path, marker: str = "anno") -> list[ClipRef]:
    """Clip folders (holding `marker/`) and `*.tar.gz` clip archives under input_dir, sorted
    by clip name, so a folder tree and the archives of the same clips give the same order.
    A clip found twice (a folder and an archive, or two archives) is an error."""
    root = Path(input_dir)
    if not root.is_dir():
        raise PackError(f"INPUT_DIR {root} is not a directory")
    found: dict[str, ClipRef] = {}
    for dirpath, dirnames, files in os.walk(root, followlinks=True):
        dirnames.sort()
        refs = [ClipRef(f[:-len(ARCHIVE_EXT)], Path(dirpath) / f, True)
                for f in sorted(files) if f.endswith(ARCHIVE_EXT) and not f.startswith(".")]
        if marker in dirnames:
            refs.append(ClipRef(Path(dirpath).name, Path(dirpath), False))
            dirnames.clear()
        for ref in refs:
            if ref.name in found:
                raise PackError(f"clip {ref.name} is found twice: {found[ref.name].path} and "
                                f"{ref.path}. Fix: pack either the folders or the archives")
            found[ref.name] = ref
    if not found:
        raise PackError(f"INPUT_DIR {root}: no clips found; expected clip folders holding "
                        f"'{marker}/' or clip {ARCHIVE_EXT} archives. Fix: point INPUT_DIR at "
                        "the folder of the downloaded archives or of the extracted clips")
    return [found[n] for n in sorted(found)]


def split_clips(clips: list[ClipRef], split_file: str | Path, subset: str
                ) -> tuple[list[ClipRef], list[str]]:
    """The clips of `subset` in Bench2Drive's split JSON ({"val": ["v1/<clip>", ...]}, with
    an optional "train" list; without one, train is every clip not in val). Returns the kept
    clips and the names the split lists that INPUT_DIR lacks. A clip the file lists in
    neither subset, when it has both, is an error naming it."""
    try:
        doc = json.loads(Path(split_file).read_text())
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
