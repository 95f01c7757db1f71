"""Raw input read straight from its archives, never extracted: a `.tar.gz` streamed once into a
bounded spool, a `.zip` read member by member through its central directory (archive_zip.py).

A `.tar.gz` is read as a stream (`tarfile` mode "r|" over Gunzip: no seek, nothing extracted;
every gzip member's CRC32 and length verified, the stream required to end cleanly, its members
counted against the limits clip_members, raw_file_bytes and clip_bytes, and the unpacked /
compressed ratio against clip_ratio) into one Spool: the members' bytes back to back, with an
index of name -> (offset, size). Members are in no useful order (a frame's files may be far
apart), so the spool is what bounds holding a whole archive: it lives in memory up to
`spool_bytes` and rolls over into ONE anonymous temporary file beyond that, deleted when the
archive is closed (and by the OS if the process dies). A disk, quota or memory that fills while
spooling is errors.ResourceError (TMPDIR, its free space, --spool-bytes named): the machine,
never the archive.

Whatever reads an archive, its members are data: a member that is not a plain file (a symlink,
a hard link, a device), whose name leaves the archive (`..`, an absolute path) or that appears
twice is refused in one line naming the archive and the member; nothing of an archive is ever
written out under its own name.

An archive may also be an object on a store (s3://, any fsspec URL): read through
objstore.ObjectReader (ranged reads, timeouts, bounded retries at the same offset), so memory
is bounded as for a local file.
"""
from __future__ import annotations

import logging
import tarfile
import tempfile
import zlib
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Callable, Iterable

from .. import limits
from ..limits import LimitError
from ..objstore import ObjectReader
from ..remote import RemoteError, RemoteOptions
from .errors import ResourceError, spool_error

TAR_GZ, ZIP = ".tar.gz", ".zip"
ARCHIVE_EXTS = (TAR_GZ, ZIP)
DEFAULT_SPOOL_BYTES = 1 << 30
GZ_CHUNK = 1 << 16      # compressed bytes read from an archive at a time
TAR_BUFSIZE = 1 << 16   # decompressed bytes tarfile takes at a time
LIST_BUFSIZE = 1 << 20  # the same, when only member names are wanted (keep=False)
UNPACKED = "unpacked size (bytes)"
RATIO_FREE = 64 << 20   # unpacked bytes before clip_ratio applies (tar headers compress well)
# What a member name is mapped to: its key in the archive's index, or None to leave it out.
# It raises ArchiveError for a name its reader refuses (e.g. a file outside the one folder
# the archive must hold).
Rename = Callable[[str], "str | None"]
log = logging.getLogger(__name__)


class ArchiveError(ValueError):
    """An archive that cannot be read as a whole: truncated, corrupt, or hostile."""


class ArchiveURL(str):
    """An archive's URL on an object store. A str (never a Path: pathlib would fold the '//'
    of 's3://'), with a Path's `.name`, so that messages naming an archive read the same for
    a local file and a stored one."""

    @property
    def name(self) -> str:
        return self.rsplit("/", 1)[-1]


def archive_ext(name: str) -> str | None:
    """The archive format a file name says (".tar.gz" or ".zip"), or None (hidden files are
    none: editors' and macOS' '._x.zip' companions are no archives)."""
    if name.startswith("."):
        return None
    return next((ext for ext in ARCHIVE_EXTS if name.endswith(ext)), None)


def safe_name(name: str, what: str) -> str:
    """A member name as a relative posix path, or ArchiveError if it would leave the folder
    the archive is read into (an absolute name, a drive, a `..` or empty part)."""
    parts = PurePosixPath(name.replace("\\", "/")).parts
    if not parts or name.startswith(("/", "\\")) or (":" in parts[0]) or any(
            p in ("..", "") for p in parts):
        raise ArchiveError(f"{what}: member {name!r} leaves the archive's folder (an absolute "
                           "path or '..'); expected relative member names. Fix: rebuild the "
                           "archive from its folder (e.g. tar czf A.tar.gz FOLDER)")
    return "/".join(parts)


class Gunzip:
    """A gzip file's decompressed bytes, as tarfile reads them (mode "r|"). tarfile's own
    "r|gz" checks no CRC, reads only the first gzip member and stops at the tar's end; here
    zlib (gzip mode, wbits=31) verifies each member's CRC32 and ISIZE as the member ends,
    members follow one another, only zero padding may follow the last one, and what it
    yields is counted and cut at the limit clip_bytes."""

    def __init__(self, raw: BinaryIO, what: str, ratio_free: int = RATIO_FREE) -> None:
        self._raw, self._what, self._free = raw, what, ratio_free
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
                if self.total > self._free + self._ratio * self.packed:
                    raise LimitError(f"its unpacked / compressed bytes past the first "
                                     f"{self._free >> 20} MiB ({self.total:,} from "
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


class Spool:
    """Members' bytes back to back, in memory up to spool_bytes, then in ONE anonymous
    temporary file (see the module docstring); `what` names the archive in a ResourceError."""

    def __init__(self, spool_bytes: int, what: str) -> None:
        self.spool_bytes, self.what = spool_bytes, what
        # spool_bytes 0: nothing in memory (SpooledTemporaryFile would read 0 as "never roll")
        self._file = tempfile.SpooledTemporaryFile(max_size=spool_bytes) if spool_bytes \
            else tempfile.TemporaryFile()
        self.index: dict[str, tuple[int, int]] = {}

    def put(self, key: str, data: bytes) -> None:
        try:
            self.index[key] = (self._file.tell(), len(data))
            self._file.write(data)
        except OSError as exc:   # the temporary file's disk, not the archive
            raise spool_error(self.what, exc, self.spool_bytes) from None

    def read(self, key: str) -> bytes:
        offset, size = self.index[key]
        self._file.seek(offset)
        return self._file.read(size)

    def close(self) -> None:
        """Never raises: closing flushes the file's buffer, which fails again on the disk
        that stopped the spool (ENOSPC), and that second error would replace the
        ResourceError naming TMPDIR. The bytes are thrown away: nothing is lost."""
        try:
            self._file.close()   # the descriptor is closed even when the flush fails
        except OSError as exc:
            log.debug("%s: closing its spool: %s", self.what, exc)


def open_raw(path: Path | ArchiveURL, remote: RemoteOptions | None, what: str) -> BinaryIO:
    """A local archive's file, or a stored one's ObjectReader (at most clip_bytes plus gzip's
    framing of an incompressible archive: 5 bytes a 16 kB block)."""
    if isinstance(path, ArchiveURL):
        lim = limits.active()
        most = lim.clip_bytes + (lim.clip_bytes >> 10) + (1 << 20)
        return ObjectReader(path, most, remote, what, exact=False)
    return open(path, "rb")


class TarGzArchive:
    """A `.tar.gz` streamed once into a Spool: `names()`, `read(key)`, `close()`. `rename`
    maps each plain file member's safe name to its key (None: left out); `what` names the
    archive in errors ("clip <path>", "archive <path>")."""

    def __init__(self, path: Path | ArchiveURL, rename: Rename | None, what: str,
                 spool_bytes: int = DEFAULT_SPOOL_BYTES, remote: RemoteOptions | None = None,
                 keep: bool = True, ratio_free: int = RATIO_FREE, kind: str = "archive"
                 ) -> None:
        self.path, self.what, self._rename, self._keep = path, what, rename, keep
        self._ratio_free, self._kind = ratio_free, kind   # kind: a store's errors name it
        # a listing skips every member's data: larger reads halve its Python overhead
        self._bufsize = TAR_BUFSIZE if keep else LIST_BUFSIZE
        self.spool = Spool(spool_bytes, what)
        self.members, self.last = 0, ""   # members read, and the last one's name
        try:
            self._stream(remote)
        except BaseException:
            self.close()   # never raises (Spool.close): the error raised is the first one
            raise

    def _stream(self, remote: RemoteOptions | None) -> None:
        raw = None
        try:
            raw = open_raw(self.path, remote, self._kind)
            gz = Gunzip(raw, UNPACKED, self._ratio_free)
            with tarfile.open(fileobj=gz, mode="r|", bufsize=self._bufsize) as tar:
                self._members(tar, gz, limits.active())
                check_tar_end(tar)
        except (RemoteError, ResourceError, ArchiveError):
            raise   # the store or the machine failed, not the archive: never an episode left out
        except LimitError as exc:
            raise ArchiveError(str(exc)) from None
        except MemoryError as exc:
            raise spool_error(self.what, exc, self.spool.spool_bytes) from None
        except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
            last = f", the last {self.last!r}" if self.last else ""
            raise ArchiveError(f"truncated or corrupt archive after {self.members} members"
                               f"{last} ({type(exc).__name__}: {exc}); expected a complete "
                               f"{TAR_GZ}") from None
        finally:
            if raw is not None:
                raw.close()

    def _members(self, tar: tarfile.TarFile, gz: Gunzip, lim: limits.Limits) -> None:
        index = self.spool.index
        while (member := tar.next()) is not None:
            tar.members.clear()   # a stream's TarFile keeps every TarInfo (~800 bytes each)
            self.members, self.last = self.members + 1, member.name
            lim.check("clip_members", self.members, "member count")
            key = self.member_key(member)
            if key is None:
                continue
            lim.check("raw_file_bytes", member.size, f"member {member.name}'s size (bytes)")
            lim.check("clip_bytes", gz.total + member.size, UNPACKED)
            if key in index:
                raise ArchiveError(f"member {member.name} is in the archive twice; expected one "
                                   "file per name (which copy is meant is unknown)")
            if not self._keep:   # a listing: the name and its size, nothing spooled
                index[key] = (0, member.size)
                continue
            data = tar.extractfile(member).read()
            if len(data) != member.size:
                raise EOFError(f"member {member.name} is cut short")
            self.spool.put(key, data)

    def member_key(self, member: tarfile.TarInfo) -> str | None:
        """The key a member is kept under, or None (a folder, or a file `rename` leaves out);
        ArchiveError for a member that is no plain file or whose name leaves the archive."""
        if member.isdir():
            return None
        if not member.isfile():
            raise ArchiveError(f"{self.what}: member {member.name!r} is a {tar_kind(member)}, "
                               "not a plain file; expected files and folders only. Fix: "
                               "rebuild the archive without links (tar --dereference)")
        return self._rename(safe_name(member.name, self.what))

    def names(self) -> list[str]:
        return sorted(self.spool.index)

    def read(self, key: str) -> bytes:
        return self.spool.read(key)

    def size(self, key: str) -> int:
        """A member's unpacked size (after a listing too)."""
        return self.spool.index[key][1]

    def close(self) -> None:
        self.spool.close()


def tar_kind(member: tarfile.TarInfo) -> str:
    return ("symlink" if member.issym() else "hard link" if member.islnk() else
            "device" if member.isdev() else "FIFO" if member.isfifo() else "special member")


def check_tar_end(tar: tarfile.TarFile) -> None:
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


class MemberTree:
    """Members seen as the files they would be once extracted into `root` (sources.Files):
    `names` are posix paths relative to root, `read(name)` gives a member's bytes. Only what
    the listing holds exists under root: a missing member is missing."""

    def __init__(self, root: str, names: Iterable[str], read: Callable[[str], bytes]) -> None:
        self.root, self._read = root.rstrip("/"), read
        self._dirs: dict[str, set[str]] = {"": set()}
        self._files: set[str] = set()
        for name in names:
            self._files.add(name)
            parts = name.split("/")
            for i in range(len(parts)):
                self._dirs.setdefault("/".join(parts[:i]), set()).add(parts[i])

    def _rel(self, path: str) -> str:
        return path[len(self.root) + 1:] if path != self.root else ""

    def owns(self, path: str) -> bool:
        return path == self.root or path.startswith(self.root + "/")

    def read(self, path: str) -> bytes:
        rel = self._rel(path)
        if rel not in self._files:
            raise FileNotFoundError(f"no member {rel} in the archive")
        return self._read(rel)

    def listdir(self, path: str) -> list[str]:
        rel = self._rel(path)
        if rel not in self._dirs:
            raise FileNotFoundError(f"no folder {rel} in the archive")
        return sorted(self._dirs[rel])

    def kind(self, path: str) -> str | None:
        rel = self._rel(path)
        return "file" if rel in self._files else "dir" if rel in self._dirs else None


__all__ = ["ARCHIVE_EXTS", "ArchiveError", "ArchiveURL", "DEFAULT_SPOOL_BYTES", "Gunzip",
           "MemberTree", "Spool", "TarGzArchive", "archive_ext", "safe_name"]
