"""shardio's tar reader against the standard library's, on tars written by tarfile itself."""
from __future__ import annotations

import gc
import gzip
import hashlib
import io
import os
import tarfile

import numpy as np
import pytest

from carla_wds.load.stream.shardio import release_pages
from carla_wds.shardread import MappedShard, open_shard
from carla_wds.tario import ShardError, iterate_tar, tar_members

from .helpers import mapped_rss_kb


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


@pytest.fixture(params=["stream", "mapped"])
def reader(request, tmp_path, monkeypatch):
    """bytes -> what tar_members reads: a stream, or a MappedShard of a file with windows of
    one page, so that members and headers straddle windows."""
    if request.param == "stream":
        return io.BytesIO
    monkeypatch.setattr(MappedShard, "WINDOW", 4096)

    def mapped(data: bytes) -> MappedShard:
        path = tmp_path / f"{len(os.listdir(tmp_path))}.tar"
        path.write_bytes(data)
        return MappedShard(str(path))
    return mapped


@pytest.mark.parametrize("fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_tar_members_equal_tarfile(fmt, reader):
    members = _members(np.random.default_rng(fmt))
    if fmt == tarfile.USTAR_FORMAT:   # ustar cannot store a 154-character file name
        members = [(n, d) for n, d in members if len(n.rsplit("/", 1)[-1]) <= 100]
    data = _tar(fmt, members, dirs=("somedir",))
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        expected = [(m.name, tar.extractfile(m).read()) for m in tar
                    if m.isreg() and not m.name.startswith("__meta__")]
    found = [(m["fname"], m["data"]) for m in tar_members(reader(data), "t.tar")]
    assert found == expected and len(found) == len(members) - 1


def test_tar_members_refuse_truncation_and_bad_checksums(reader):
    data = _tar(tarfile.PAX_FORMAT, _members(np.random.default_rng(0)))
    for cut in (700, 512 * 5 + 100, len(data) - 2048 - 512 * 3 - 10):
        with pytest.raises(ShardError, match="cut short"):
            list(tar_members(reader(data[:cut]), "t.tar"))
    bad = bytearray(data)
    bad[0] ^= 1                         # the first header's name: its checksum no longer fits
    with pytest.raises(ShardError, match="checksum"):
        list(tar_members(reader(bytes(bad)), "t.tar"))
    assert list(tar_members(reader(b""), "t.tar")) == []


def _mappings_of(path) -> int:
    with open("/proc/self/maps") as f:
        return sum(str(path) in line for line in f)


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs Linux /proc")
def test_mapped_members_outlive_the_shard_then_free_their_windows(tmp_path, monkeypatch):
    monkeypatch.setattr(MappedShard, "WINDOW", 4096)
    members = _members(np.random.default_rng(2))
    path = tmp_path / "s.tar"
    path.write_bytes(_tar(tarfile.PAX_FORMAT, members))
    shard = open_shard(str(path), cache_dir=None, sha256=None)
    assert isinstance(shard, MappedShard)
    found = list(tar_members(shard, "s.tar"))
    shard.close()
    # large members are views of the page cache, small ones copies; all still readable
    regular = [(n, d) for n, d in members if not n.startswith("__")]
    assert [type(m["data"]) for m in found] == [
        memoryview if len(d) > MappedShard.SMALL else bytes for _, d in regular]
    assert [(m["fname"], bytes(m["data"])) for m in found] == regular
    assert _mappings_of(path) > 0
    del found
    gc.collect()
    assert _mappings_of(path) == 0


def test_iterate_tar_refuses_a_compressed_tar_by_name():
    members = _members(np.random.default_rng(1))[:2]
    data = gzip.compress(_tar(tarfile.PAX_FORMAT, members))
    with pytest.raises(ShardError, match="t.tar.gz: not an uncompressed tar"):
        iterate_tar(io.BytesIO(data), "t.tar.gz")


def test_group_samples_follows_webdataset_keys():
    """The same samples as webdataset's group_by_keys, on names with folders and many dots."""
    from webdataset.tariterators import group_by_keys

    from carla_wds.tario import group_samples
    names = ["a/x.png", "a/x.seg.PNG", "a/y.png", "b.c/z.npy", "b.c/z.json", "q"]
    members = [{"fname": n, "data": n.encode(), "__url__": "u"} for n in names]
    assert list(group_samples(iter(members))) == list(group_by_keys(iter(members)))
    with pytest.raises(ShardError, match="appears twice"):
        list(group_samples(iter(members[:1] * 2)))



@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="needs Linux /proc")
def test_release_pages_unmaps_what_decoding_touched(tmp_path):
    rng = np.random.default_rng(3)
    members = [(f"s{i:03d}.front.png", rng.integers(0, 256, 300_000, np.uint8).tobytes())
               for i in range(8)]
    path = tmp_path / "big.tar"
    path.write_bytes(_tar(tarfile.PAX_FORMAT, members))
    shard = MappedShard(str(path))
    found = {m["fname"]: m["data"] for m in tar_members(shard, "big.tar")}
    assert mapped_rss_kb(path) < 100               # nothing read yet: slices touch no page
    assert all(bytes(found[n]) == d for n, d in members)   # touches every page
    assert mapped_rss_kb(path) > 2000
    release_pages(found)
    assert mapped_rss_kb(path) < 100               # only the pages shared with headers
    assert all(bytes(found[n]) == d for n, d in members)   # the views still read right


def test_mapped_shard_falls_back_to_copies_where_mmap_fails(tmp_path, monkeypatch, caplog):
    import carla_wds.shardread as shardio

    def no_mmap(*args, **kwargs):
        raise OSError(19, "No such device")
    monkeypatch.setattr(shardio.mmap, "mmap", no_mmap)
    members = _members(np.random.default_rng(4))
    path = tmp_path / "s.tar"
    path.write_bytes(_tar(tarfile.PAX_FORMAT, members))
    found = [(m["fname"], m["data"]) for m in tar_members(MappedShard(str(path)), "s.tar")]
    assert found == [(n, d) for n, d in members if not n.startswith("__")]
    assert all(isinstance(d, bytes) for _, d in found)
    assert "cannot memory-map" in caplog.text and "s.tar" in caplog.text


def test_sha256_mismatch_never_deletes_a_users_file_url_shard(tmp_path):
    """A file:// URL with cache_dir: the cache hands back the user's own file, which a
    mismatch must leave alone (only copies inside the cache are dropped)."""
    path = tmp_path / "own.tar"
    path.write_bytes(_tar(tarfile.PAX_FORMAT, _members(np.random.default_rng(5))[:2]))
    with pytest.raises(ShardError, match="sha256"):
        open_shard(f"file://{path}", cache_dir=str(tmp_path / "cache"), sha256="0" * 64,
                   verify=True)
    assert path.exists()
    good = open_shard(str(path), cache_dir=None,
                      sha256=hashlib.sha256(path.read_bytes()).hexdigest(), verify=True)
    assert [m["fname"] for m in tar_members(good, "own.tar")] == ["a.png", "a.speed.json"]
