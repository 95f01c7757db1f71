"""A `.zip` read as data (archives.py's rules), member by member: its central directory is the
index, so nothing is spooled and memory holds one member at a time. Every entry is checked
before any member is read: a name leaving the archive, a symlink or other non-regular entry
(the Unix mode in external_attr), an encrypted entry, a name twice, declared sizes past the
limits raw_file_bytes / clip_bytes or an unpacked / compressed ratio past clip_ratio (a zip
bomb) are refused in one line. Before that, the central directory itself is bounded: its end
record's entry count, and for a directory large enough to hold more, its entries counted by
their signatures, are held to clip_members before zipfile parses it (a ZipInfo an entry: 1M
entries were 587 MB and 12 s). Only stored and deflated members are read: zipfile inflates
those in bounded steps, bzip2 and LZMA in unbounded ones. A member is read as its declared
size plus one byte, never more (zipfile's read() without a size inflates up to 2 GiB before
cutting), and its CRC32 is checked: a member that inflates past its declared size is refused.

A zip cut short has no central directory (it is at the end): refused when opened. A stored zip
(s3://, any fsspec URL) is read through RangedFile: seekable, each read a ranged request with
the store's timeouts and bounded retries.
"""
from __future__ import annotations

import copy
import io
import stat
import zipfile
import zlib
from pathlib import Path

from .. import limits
from ..limits import LimitError
from ..objstore import filesystem, with_retries
from ..remote import RemoteError, RemoteOptions
from .archives import RATIO_FREE, UNPACKED, ArchiveError, ArchiveURL, Rename, safe_name

ENCRYPTED = 0x1   # general purpose flag bit 0 (APPNOTE.TXT 4.4.4)
# the methods zipfile inflates at most n bytes at a time (bzip2, LZMA: a read's whole input)
BOUNDED = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflate"}
CENTRAL = b"PK\x01\x02"   # a central directory entry's signature (APPNOTE.TXT 4.3.12)
MIN_ENTRY = 46            # an entry's fixed part: S bytes of directory hold <= S // 46 entries
ZIP64_END = 56 + 20       # the zip64 end record and its locator, between directory and end
CHUNK = 1 << 20


class RangedFile(io.RawIOBase):
    """A stored object as a seekable binary file: every read one ranged request, retried
    (RemoteOptions) at the same offset; a failure that a retry cannot mend is RemoteError."""

    def __init__(self, url: str, opts: RemoteOptions | None) -> None:
        super().__init__()
        self.url, self.opts, self._failures, self._pos = url, opts or RemoteOptions(), 0, 0
        self._fs, self._path = filesystem(url, self.opts)
        self.size = int(with_retries(self, lambda: self._fs.size(self._path)))

    def _fail(self, cause: str, fix: str) -> RemoteError:
        return RemoteError(f"archive {self.url}: {cause}, at byte {self._pos}. Fix: {fix}")

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buf) -> int:
        end = min(self.size, self._pos + len(buf))
        if end <= self._pos:
            return 0
        start = self._pos
        data = with_retries(self, lambda: self._fs.cat_file(self._path, start=start, end=end))
        buf[:len(data)] = data
        self._pos += len(data)
        return len(data)


class ZipArchive:
    """A `.zip`: `names()`, `read(key)`, `close()`; `rename` and `what` as for TarGzArchive."""

    def __init__(self, path: Path | ArchiveURL, rename: Rename, what: str,
                 remote: RemoteOptions | None = None) -> None:
        self.path, self.what = path, what
        self._raw = RangedFile(path, remote) if isinstance(path, ArchiveURL) else open(path, "rb")
        f = io.BufferedReader(self._raw, 1 << 16) if isinstance(path, ArchiveURL) else self._raw
        try:
            check_directory(f, what)
            self._zip = zipfile.ZipFile(f)
        except ArchiveError:
            self._raw.close()
            raise
        except (zipfile.BadZipFile, EOFError, OSError, ValueError) as exc:
            self._raw.close()
            raise ArchiveError(f"{what}: no zip central directory ({exc}): the file is cut "
                               "short or not a zip; expected a complete .zip. Fix: download it "
                               "again (compare its size and checksum with the source's)") from None
        try:
            self._index = self._check(rename)
        except BaseException:
            self.close()
            raise
        self.members = len(self._zip.infolist())

    def _check(self, rename: Rename) -> dict[str, zipfile.ZipInfo]:
        lim, index, total, packed = limits.active(), {}, 0, 0
        for info in self._zip.infolist():   # at most clip_members: check_directory
            mode = info.external_attr >> 16
            if info.is_dir() or stat.S_ISDIR(mode):
                continue
            name = info.filename
            if stat.S_IFMT(mode) not in (0, stat.S_IFREG):   # 0: no type (permissions only)
                kind = "symlink" if stat.S_ISLNK(mode) else "special file"
                raise ArchiveError(f"{self.what}: member {name!r} is a {kind}, not a plain file; "
                                   "expected files and folders only. Fix: rebuild the zip "
                                   "without links (zip without --symlinks)")
            if info.flag_bits & ENCRYPTED:
                raise ArchiveError(f"{self.what}: member {name!r} is encrypted; expected an "
                                   "unencrypted zip. Fix: decrypt it (unzip with its password) "
                                   "and pack the folder, or rebuild the zip without a password")
            if info.compress_type not in BOUNDED:
                raise ArchiveError(f"{self.what}: member {name!r} is compressed with method "
                                   f"{info.compress_type} (bzip2 12, LZMA 14), which inflates "
                                   "unbounded; expected stored or deflate. Fix: rebuild the "
                                   "zip with deflate (zip's default)")
            key = rename(safe_name(name, self.what))
            if key is None:
                continue
            if key in index:
                raise ArchiveError(f"{self.what}: member {name} is in the archive twice; "
                                   "expected one file per name (which copy is meant is "
                                   "unknown). Fix: keep one copy of each file (rebuild the zip "
                                   "from its folder)")
            total, packed = total + info.file_size, packed + info.compress_size
            try:
                lim.check("raw_file_bytes", info.file_size, f"member {name}'s size (bytes)")
                lim.check("clip_bytes", total, UNPACKED)
                if total > RATIO_FREE + lim.clip_ratio * packed:
                    raise LimitError(f"its unpacked / compressed bytes past the first "
                                     f"{RATIO_FREE >> 20} MiB ({total:,} from {packed:,})",
                                     total // max(packed, 1), "clip_ratio", lim.clip_ratio)
            except LimitError as exc:
                raise ArchiveError(f"{self.what}: {exc}") from None
            index[key] = info
        return index

    def names(self) -> list[str]:
        return sorted(self._index)

    def size(self, key: str) -> int:
        """A member's unpacked size, as its central directory declares it."""
        return self._index[key].file_size

    def read(self, key: str) -> bytes:
        """A member's bytes: at most its declared size plus one byte are ever inflated."""
        info = self._index[key]
        probe = copy.copy(info)   # zipfile stops at file_size: one byte more shows a bomb
        probe.file_size = info.file_size + 1
        try:
            data = self._read(probe, probing=True)
            past = len(data) > info.file_size
        except zipfile.BadZipFile:
            # a bad CRC: over a member's own bytes, or over one byte more than it declares;
            # its declared bytes alone tell which (read again only on this error path)
            data, past = self._read(info), True
        if past:
            raise ArchiveError(f"{self.what}: member {info.filename} inflates past the "
                               f"{info.file_size:,} bytes its central directory declares; "
                               "expected a member of its declared size (a zip bomb or a "
                               "damaged archive). Fix: download the archive again, or rebuild "
                               "it from its folder")
        if len(data) != info.file_size:
            raise ArchiveError(f"{self.what}: member {info.filename} is cut short")
        return data

    def _read(self, info: zipfile.ZipInfo, probing: bool = False) -> bytes:
        """At most info.file_size bytes, in bounded steps (read() without a size inflated up
        to 2 GiB at once); ArchiveError for a corrupt member (probing: a bad CRC raises
        zipfile.BadZipFile, for read() to tell which)."""
        try:
            with self._zip.open(info) as f:
                return f.read(info.file_size)
        except (zipfile.BadZipFile, EOFError, zlib.error, NotImplementedError) as exc:
            if probing and isinstance(exc, zipfile.BadZipFile):
                raise
            raise ArchiveError(f"{self.what}: member {info.filename} is corrupt ({exc}); "
                               "expected a complete zip member. Fix: download the archive "
                               "again") from None

    def close(self) -> None:
        zf = getattr(self, "_zip", None)
        if zf is not None:
            zf.close()
        self._raw.close()


def check_directory(f: io.RawIOBase | io.BufferedIOBase, what: str) -> None:
    """Refuse a central directory of more than clip_members entries before zipfile parses
    it. The end record is the one zipfile's own parse uses (its _EndRecData): zipfile reads
    the directory's size in bytes and parses entries until they fill it, whatever the count
    says, so a directory that can hold more entries than the limit has them counted by their
    signatures (a name may hold one too: only more), a chunk at a time."""
    end = zipfile._EndRecData(f)
    if not end:
        return   # zipfile refuses it: no central directory
    lim, declared, size = limits.active(), end[zipfile._ECD_ENTRIES_TOTAL], end[zipfile._ECD_SIZE]
    start = end[zipfile._ECD_LOCATION] - size - (
        ZIP64_END if end[zipfile._ECD_SIGNATURE] == zipfile.stringEndArchive64 else 0)
    try:
        lim.check("clip_members", declared, "member count (its end record's)")
        if size // MIN_ENTRY > lim.clip_members and start >= 0:
            lim.check("clip_members", _entries(f, start, size),
                      "member count (entries in its central directory)")
    except LimitError as exc:
        raise ArchiveError(f"{what}: {exc}") from None


def _entries(f: io.RawIOBase | io.BufferedIOBase, start: int, size: int) -> int:
    """Entry signatures in the `size` bytes at `start` (one cut between two chunks counted
    once whole: a signature is 4 bytes, the 3 carried over hold none)."""
    f.seek(start)
    count, carry = 0, b""
    while size > 0 and (chunk := f.read(min(CHUNK, size))):
        size -= len(chunk)
        data = carry + chunk
        count, carry = count + data.count(CENTRAL), data[-3:]
    return count


__all__ = ["RangedFile", "ZipArchive", "check_directory"]
