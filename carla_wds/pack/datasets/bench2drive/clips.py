"""Clips of a clip-based dataset (Bench2Drive), from extracted folders or straight from the
distributed `.tar.gz` archives, and the official train/val split.

An archive is read once, as a stream (`tarfile` mode "r|" over _Gunzip: no seek, nothing
extracted; every gzip member's CRC32 and length verified, the stream required to end cleanly,
its members counted against the limits clip_members, raw_file_bytes and clip_bytes), into
one spool: its members' bytes, back to back, with an index of name -> (offset, size). The
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
import tempfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from ....codecs import json_loads
from .... import limits
from ....limits import LimitError
from ....objstore import ObjectLister, ObjectReader, is_objstore, read_object
from ....remote import RemoteError, RemoteOptions
from ...errors import PackError, ResourceError, spool_error
from ...sources import read_bytes

ARCHIVE_EXT = ".tar.gz"
DEFAULT_SPOOL_BYTES = 1 << 30
GZ_CHUNK = 1 << 16      # compressed bytes read from an archive at a time
TAR_BUFSIZE = 1 << 16   # decompressed bytes tarfile takes at a time
UNPACKED = "unpacked size (bytes)"
RATIO_FREE = 64 << 20   # unpacked bytes before clip_ratio applies (tar headers compress well)
SUBSETS = ("train", "val", "all")
MAX_SPLIT_BYTES = 16 << 20   # Bench2Drive's split file is ~1 MB for 13,638 clips


class ClipError(ValueError):
    """A clip that cannot be read as a whole (a truncated or corrupt archive)."""


class ClipURL(str):
    """An archive's URL on an object store. A str (never a Path: pathlib would fold the '//'
    of 's3://'), with a Path's `.name`, so that messages naming a clip's file (plan.py,
    packer.py) read the same for a local archive and a stored one."""

    @property
    def name(self) -> str:
        return self.rsplit("/", 1)[-1]


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


class _Gunzip:
    """A gzip file's decompressed bytes, as tarfile reads them (mode "r|"). tarfile's own
    "r|gz" checks no CRC, reads only the first gzip member and stops at the tar's end; here
    zlib (gzip mode, wbits=31) verifies each member's CRC32 and ISIZE as the member ends,
    members follow one another, only zero padding may follow the last one, and what it
    yields is counted and cut at the limit clip_bytes."""

    def __init__(self, raw: BinaryIO, what: str) -> None:
        self._raw, self._what = raw, what
        self._d = zlib.decompressobj(31)
        self._pending = b""   # compressed bytes of a member not yet given to its decompressor
        self._limit, self._ratio = limits.active().clip_bytes, limits.active().clip_ratio
        self.total, self.packed, self.ended = 0, 0, False

    def read(self, n: int = -1) -> bytes:
        n = n if n is not None and n > 0 else TAR_BUFSIZE
        while not self.ended:
            d = self._d
            if d.eof:
                self._next_member(d.unused_data)
                continue
            src = d.unconsumed_tail or self._take()
            out = d.decompress(src, n)   # at most n bytes: a bomb never inflates at once
            if out:
                self.total += len(out)
                if self.total > self._limit:
                    raise LimitError(self._what, self.total, "clip_bytes", self._limit)
                if self.total > RATIO_FREE + self._ratio * self.packed:
                    raise LimitError(f"its unpacked / compressed bytes past the first "
                                     f"{RATIO_FREE >> 20} MiB ({self.total:,} from "
                                     f"{self.packed:,})", self.total // max(self.packed, 1),
                                     "clip_ratio", self._ratio)
                return out
            if not src and not d.eof:
                raise EOFError("the gzip stream ends inside a member (the file is cut short)")
        return b""

    def _take(self) -> bytes:
        src, self._pending = self._pending, b""
        if not src:
            src = self._raw.read(GZ_CHUNK)
            self.packed += len(src)
        return src

    def _next_member(self, rest: bytes) -> None:
        """After a member's trailer: the next member, or zero padding up to the end."""
        rest = rest.lstrip(b"\0")
        while not rest:
            more = self._raw.read(GZ_CHUNK)
            self.packed += len(more)
            if not more:
                self.ended = True
                return
            rest = more.lstrip(b"\0")
        self._d, self._pending = zlib.decompressobj(31), rest


class ArchiveClip:
    """A clip `.tar.gz`, streamed once into a bounded spool (see the module docstring)."""

    def __init__(self, ref: ClipRef, spool_bytes: int = DEFAULT_SPOOL_BYTES) -> None:
        self.ref, self._spool_bytes = ref, spool_bytes
        # spool_bytes 0: nothing in memory (SpooledTemporaryFile would read 0 as "never roll")
        self._spool = tempfile.SpooledTemporaryFile(max_size=spool_bytes) if spool_bytes \
            else tempfile.TemporaryFile()
        self._index: dict[str, tuple[int, int]] = {}
        try:
            self._stream()
        except BaseException:
            self.close()
            raise

    def _stream(self) -> None:
        lim = limits.active()
        # the compressed size of an incompressible clip exceeds its unpacked size by gzip's
        # framing (5 bytes a 16 kB block) at most
        most = lim.clip_bytes + (lim.clip_bytes >> 10) + (1 << 20)
        raw = ObjectReader(self.ref.path, most, self.ref.remote, "clip archive", exact=False
                           ) if self.ref.stored else None
        try:
            raw = raw or open(self.ref.path, "rb")
            gz = _Gunzip(raw, UNPACKED)
            with tarfile.open(fileobj=gz, mode="r|", bufsize=TAR_BUFSIZE) as tar:
                self._members(tar, gz, lim)
                self._check_end(tar)
        except (RemoteError, ResourceError):
            raise   # the store or the machine failed, not the archive: never a clip left out
        except LimitError as exc:
            raise ClipError(str(exc)) from None
        except MemoryError as exc:
            raise spool_error(f"clip {self.ref.path}", exc, self._spool_bytes) from None
        except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
            raise ClipError(f"truncated or corrupt archive after {len(self._index)} members "
                            f"({type(exc).__name__}: {exc}); expected a complete .tar.gz") from None
        finally:
            if raw is not None:
                raw.close()

    def _members(self, tar: tarfile.TarFile, gz: _Gunzip, lim: limits.Limits) -> None:
        count = 0
        while (member := tar.next()) is not None:
            tar.members.clear()   # a stream's TarFile keeps every TarInfo (~800 bytes each)
            count += 1
            lim.check("clip_members", count, "member count")
            rel = self._member_name(member)
            if rel is None:
                continue
            lim.check("raw_file_bytes", member.size, f"member {member.name}'s size (bytes)")
            lim.check("clip_bytes", gz.total + member.size, UNPACKED)
            if rel in self._index:
                raise ClipError(f"member {member.name} is in the archive twice; expected one "
                                "file per name (which copy is meant is unknown)")
            data = tar.extractfile(member).read()
            if len(data) != member.size:
                raise EOFError(f"member {member.name} is cut short")
            self._put(rel, data)

    def _put(self, rel: str, data: bytes) -> None:
        try:
            self._index[rel] = (self._spool.tell(), len(data))
            self._spool.write(data)
        except OSError as exc:   # the temporary file's disk, not the archive
            raise spool_error(f"clip {self.ref.path}", exc, self._spool_bytes) from None

    @staticmethod
    def _check_end(tar: tarfile.TarFile) -> None:
        """tarfile ends a stream at the first block it cannot read as a header: a full zero
        block is the tar's end, anything else (a cut, a damaged header) must not pass as one.
        Past the end only zeros may follow; reading them to the end checks the last CRC."""
        stream = tar.fileobj
        if stream.tell() - tar.offset != tarfile.BLOCKSIZE:
            raise EOFError(f"the tar data ends at byte {stream.tell()} without its end blocks")
        while chunk := stream.read(TAR_BUFSIZE):
            if chunk.count(0) != len(chunk):
                raise tarfile.ReadError(f"data follows the tar's end (byte {tar.offset}): a "
                                        "damaged member header")

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
