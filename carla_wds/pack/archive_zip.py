"""A `.zip` read as data (archives.py's rules), member by member: its central directory is the
index, so nothing is spooled and memory holds one member at a time. Every entry is checked
before any member is read: a name leaving the archive, a symlink or other non-regular entry
(the Unix mode in external_attr), an encrypted entry, a name twice, declared sizes past the
limits raw_file_bytes / clip_bytes or an unpacked / compressed ratio past clip_ratio (a zip
bomb) are refused in one line. zipfile reads at most the declared size of a member and checks
its CRC32, so a member that lies about its size is a corrupt member, never a larger one.

A zip cut short has no central directory (it is at the end): refused when opened. A stored zip
(s3://, any fsspec URL) is read through RangedFile: seekable, each read a ranged request with
the store's timeouts and bounded retries.
"""
from __future__ import annotations

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
        try:
            self._zip = zipfile.ZipFile(io.BufferedReader(self._raw, 1 << 16)
                                        if isinstance(path, ArchiveURL) else self._raw)
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
        for n, info in enumerate(self._zip.infolist(), 1):
            lim.check("clip_members", n, "member count")
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
        info = self._index[key]
        try:
            with self._zip.open(info) as f:
                data = f.read()
        except (zipfile.BadZipFile, EOFError, zlib.error, NotImplementedError) as exc:
            raise ArchiveError(f"{self.what}: member {info.filename} is corrupt ({exc}); "
                               "expected a complete zip member. Fix: download the archive "
                               "again") from None
        if len(data) != info.file_size:
            raise ArchiveError(f"{self.what}: member {info.filename} is cut short")
        return data

    def close(self) -> None:
        zf = getattr(self, "_zip", None)
        if zf is not None:
            zf.close()
        self._raw.close()


__all__ = ["RangedFile", "ZipArchive"]
