"""shardio's tar reader against the standard library's, on tars written by tarfile itself."""
from __future__ import annotations

import gzip
import io
import tarfile

import numpy as np
import pytest

from carla_wds.shardio import ShardError, iterate_tar, tar_members


def _tar(fmt: int, members: list[tuple[str, bytes]], dirs: tuple[str, ...] = ()) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tar:
        for d in dirs:
            info = tarfile.TarInfo(d)
            info.type = tarfile.DIRTYPE
            tar.addfile(info)
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _members(rng: np.random.Generator) -> list[tuple[str, bytes]]:
    long_dir = "d" * 90 + "/" + "e" * 60          # > 100 characters: ustar prefix, GNU, PAX
    names = ["a.png", "a.speed.json", f"{long_dir}/k__0001.front.png", "x" * 150 + ".npy",
             "__meta__/skipped.txt", "b.empty", "b.block"]
    sizes = [1000, 3, 512, 70_000, 5, 0, 512 * 3]
    return [(n, rng.integers(0, 256, s, dtype=np.uint8).tobytes()) for n, s in zip(names, sizes)]


@pytest.mark.parametrize("fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_tar_members_equal_tarfile(fmt):
    members = _members(np.random.default_rng(fmt))
    if fmt == tarfile.USTAR_FORMAT:   # ustar cannot store a 154-character file name
        members = [(n, d) for n, d in members if len(n.rsplit("/", 1)[-1]) <= 100]
    data = _tar(fmt, members, dirs=("somedir",))
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        expected = [(m.name, tar.extractfile(m).read()) for m in tar
                    if m.isreg() and not m.name.startswith("__meta__")]
    found = [(m["fname"], m["data"]) for m in tar_members(io.BytesIO(data), "t.tar")]
    assert found == expected and len(found) == len(members) - 1


def test_tar_members_refuse_truncation_and_bad_checksums():
    data = _tar(tarfile.PAX_FORMAT, _members(np.random.default_rng(0)))
    for cut in (700, 512 * 5 + 100, len(data) - 2048 - 512 * 3 - 10):
        with pytest.raises(ShardError, match="cut short"):
            list(tar_members(io.BytesIO(data[:cut]), "t.tar"))
    bad = bytearray(data)
    bad[0] ^= 1                         # the first header's name: its checksum no longer fits
    with pytest.raises(ShardError, match="checksum"):
        list(tar_members(io.BytesIO(bytes(bad)), "t.tar"))


def test_iterate_tar_reads_compressed_tars_through_webdataset():
    members = _members(np.random.default_rng(1))[:2]
    data = gzip.compress(_tar(tarfile.PAX_FORMAT, members))
    found = [(m["fname"], m["data"]) for m in iterate_tar(io.BytesIO(data), "t.tar.gz")]
    assert found == members
