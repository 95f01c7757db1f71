"""Archive readers under hostile sizes (issue 38: N3, Low 4, Low 1), on real archive files:

- a zip member whose central directory declares 1,000 bytes, over 8 MiB of deflated zeros:
  at most its declared size plus one byte is inflated (zipfile's read() without a size
  inflated up to 2 GiB before cutting), and it is refused naming the archive and member;
- a central directory of 60,000 entries is refused from its end record (or, when the end
  record lies about the count, from the entries' signatures) before zipfile parses it;
- a disk that fills while a `.tar.gz` spools stays the ResourceError naming TMPDIR: the
  spool's cleanup, which flushes its buffer to the same full disk, no longer replaces it.
"""
from __future__ import annotations

import gzip
import io
import resource
import signal
import struct
import tarfile
import tempfile
import zipfile
import zlib
from pathlib import Path

import pytest

from carla_wds import limits
from carla_wds.pack.archive_zip import ZipArchive
from carla_wds.pack.archives import ArchiveError, TarGzArchive
from carla_wds.pack.errors import ResourceError
from tests.test_bounds_decoders import peak_of

MEMBER = "route/measurements/0000.json"
DECLARED = 1000


def _open(path: Path) -> ZipArchive:
    return ZipArchive(path, lambda name: name, f"archive {path}")


def _declare(data: bytearray, name: str, size: int, crc: int) -> None:
    """Set a member's declared size and CRC in its local and central headers."""
    local = data.find(name.encode()) - 30     # local header: CRC at +14, size at +22
    central = data.rfind(name.encode()) - 46  # central header: CRC at +16, size at +24
    struct.pack_into("<I", data, local + 14, crc)
    struct.pack_into("<I", data, local + 22, size)
    struct.pack_into("<I", data, central + 16, crc)
    struct.pack_into("<I", data, central + 24, size)


def test_a_zip_member_inflates_no_further_than_it_declares(tmp_path):
    """N3: its CRC is right for the declared 1,000 bytes, so the old read returned them
    silently after inflating all 8 MiB; now 1,001 bytes at most, then refused."""
    path = tmp_path / "bomb.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("route/rgb/0000.jpg", b"jpeg" * 100)
        z.writestr(MEMBER, bytes(8 << 20))
    data = bytearray(path.read_bytes())
    _declare(data, MEMBER, DECLARED, zlib.crc32(bytes(DECLARED)))
    path.write_bytes(bytes(data))
    arc = _open(path)
    assert arc.read("route/rgb/0000.jpg") == b"jpeg" * 100   # an honest member reads
    err, peak = peak_of(lambda: arc.read(MEMBER))
    arc.close()
    assert isinstance(err, ArchiveError), err
    assert str(err).startswith(f"archive {path}: member {MEMBER} inflates past the 1,000 bytes")
    assert "Fix:" in str(err)
    assert peak < 1 << 20   # not the 8 MiB


def test_a_zip_member_with_a_wrong_crc_or_cut_short_is_corrupt(tmp_path):
    path = tmp_path / "a.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(MEMBER, b"x" * 5000)
    data = bytearray(path.read_bytes())
    _declare(data, MEMBER, 5000, zlib.crc32(b"y" * 5000))
    path.write_bytes(bytes(data))
    with pytest.raises(ArchiveError, match=rf"member {MEMBER} is corrupt .*CRC"):
        _open(path).read(MEMBER)
    _declare(data, MEMBER, 6000, zlib.crc32(b"x" * 5000))   # it declares more than it has
    path.write_bytes(bytes(data))
    with pytest.raises(ArchiveError, match=rf"member {MEMBER} (is cut short|is corrupt)"):
        _open(path).read(MEMBER)


def test_bzip2_and_lzma_members_are_refused_naming_them(tmp_path):
    """zipfile inflates a bzip2 or LZMA read's whole input at once: no bound per read."""
    for method in (zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA):
        path = tmp_path / f"{method}.zip"
        with zipfile.ZipFile(path, "w", method) as z:
            z.writestr(MEMBER, b"{}")
        with pytest.raises(ArchiveError, match=rf"archive {path}: member '{MEMBER}' is "
                                               rf"compressed with method {method}.*Fix"):
            _open(path)


def _many_entries(path: Path, entries: int, count_says: int | None = None) -> None:
    """A zip whose central directory repeats one entry `entries` times (the end record
    says `count_says` entries: its own count unless given)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        z.writestr("r/a.txt", b"x")
    data = buf.getvalue()
    cd_at = data.find(b"PK\x01\x02")
    end_at = data.find(b"PK\x05\x06")
    directory = data[cd_at:end_at] * entries
    n = entries if count_says is None else count_says
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, n, n, len(directory), cd_at, 0)
    path.write_bytes(data[:cd_at] + directory + end)


@pytest.mark.parametrize("count_says", [None, 1])
def test_a_huge_central_directory_is_refused_before_zipfile_parses_it(tmp_path, count_says):
    """Low 4: 60,000 entries over clip_members=1,000: one line naming the archive, and
    none of the 60k ZipInfos built (tracemalloc), whether the end record's count is true
    or says 1 (zipfile parses the directory's bytes, whatever the count)."""
    path = tmp_path / "many.zip"
    _many_entries(path, 60_000, count_says)
    with limits.using(limits.DEFAULT.with_overrides({"clip_members": 1000})):
        err, peak = peak_of(lambda: _open(path))
        assert isinstance(err, ArchiveError), err
        assert str(err).startswith(f"archive {path}: member count")
        assert "60,000, over the limit clip_members=1,000" in str(err)
        assert peak < 4 << 20
        with zipfile.ZipFile(path, "w") as z:   # a directory within the limit opens
            for i in range(900):
                z.writestr(f"r/{i:04d}.txt", str(i))
        arc = _open(path)
        assert arc.members == 900 and arc.read("r/0899.txt") == b"899"
        arc.close()


@pytest.fixture()
def fsize_limit():
    """A file-size limit on this process (RLIMIT_FSIZE), as a full disk: a write past 100 kB
    fails with EFBIG; restored after the test."""
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # EFBIG, not the signal
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)

    def on() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (100 << 10, hard))
    try:
        yield on
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, handler)


def test_a_full_disk_while_spooling_stays_the_resource_error(tmp_path, monkeypatch, fsize_limit):
    """Low 1: small members sit in the spool file's buffer; its cleanup flushed them to the
    same full disk and raised a bare `[Errno 27] File too large` in the ResourceError's
    place."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:   # 520 kB in 400 small members
        for i in range(400):
            data = bytes([i % 251]) * 1000 + b"x" * 300
            info = tarfile.TarInfo(f"C/m/{i}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    path = tmp_path / "C.tar.gz"
    path.write_bytes(gzip.compress(buf.getvalue()))
    spool = tmp_path / "tmp"
    spool.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spool))
    fsize_limit()
    with pytest.raises(ResourceError) as info:
        TarGzArchive(path, lambda name: name, f"clip {path}", spool_bytes=1)
    line = str(info.value)
    assert line.startswith(f"clip {path}: writing its spool to a temporary file in {spool}")
    assert "File too large" in line and "TMPDIR" in line and "--spool-bytes" in line
