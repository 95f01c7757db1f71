"""One door to an archive of raw input, whatever its format (archives.py: `.tar.gz`,
archive_zip.py: `.zip`)."""
from __future__ import annotations

from pathlib import Path

from ..remote import RemoteOptions
from .archive_zip import ZipArchive
from .archives import DEFAULT_SPOOL_BYTES, ZIP, ArchiveURL, Rename, TarGzArchive, archive_ext


def open_archive(path: Path | ArchiveURL, rename: Rename, what: str,
                 spool_bytes: int = DEFAULT_SPOOL_BYTES, remote: RemoteOptions | None = None,
                 keep: bool = True):
    """The archive at `path` by its name's format: TarGzArchive or archive_zip.ZipArchive.
    keep=False: its member names only (a listing pass; a zip's come from its central
    directory, a `.tar.gz`'s from one full stream, every check included)."""
    if archive_ext(path.name) == ZIP:
        return ZipArchive(path, rename, what, remote)
    return TarGzArchive(path, rename, what, spool_bytes, remote, keep)


__all__ = ["open_archive"]
