"""Remote shards as a hostile or unlucky server serves them (issue 23): real HTTP on 127.0.0.1
(tests/test_remote.py's fault-injecting handler) and moto's S3 server. A manifest that declares
a huge shard is refused before a byte is read, a tar member over the member limit is refused at
its header (memory stays bounded whatever the shard declares), a shard whose sha256 fails at
the end of a stream counts as skipped, an object that shrinks mid-read is its own error, and an
empty tar shard loads; a sample whose members never end is cut at sample_bytes."""
from __future__ import annotations

import contextlib
import hashlib
import io
import itertools
import json
import shutil
import tarfile
import threading
import tracemalloc
import http.server
from pathlib import Path
from typing import Iterator

import pytest

from carla_wds import CARLAWebData, limits
from carla_wds.remote import RemoteError
from carla_wds.shardread import ShardRef, open_shard, samples_of
from carla_wds.tario import ShardError

from .helpers import SIZE
from .test_remote import FAST, Faults, FaultyHandler, pristine, served   # noqa: F401

TARGET = "shard-000001.tar"


def declare(root: Path, name: str, **fields) -> None:
    """Change what manifest.json declares about shard `name`."""
    m = json.loads((root / "manifest.json").read_text())
    for s in m["shards"]:
        if s["name"] == name:
            s.update(fields)
    (root / "manifest.json").write_text(json.dumps(m))


def eval_data(url: str, **kw) -> CARLAWebData:
    return CARLAWebData(url, batch_size=2, mode="eval", image_size=SIZE, remote=FAST, **kw)


def first_member_declares(path: Path, size: int) -> None:
    """The shard's first tar header now declares `size` bytes (GNU base-256, checksum fixed)."""
    blob = bytearray(path.read_bytes())
    blob[124:136] = b"\x80" + size.to_bytes(11, "big")
    blob[148:156] = b" " * 8
    blob[148:156] = b"%06o\0 " % sum(blob[:512])
    path.write_bytes(bytes(blob))


def refused_under(url: str, **bounds: int) -> tuple[str, int]:
    """The ShardError that loading `url` under these limits raises, and the peak of Python
    allocations while it ran."""
    tracemalloc.start()
    try:
        with limits.using(limits.active().with_overrides(bounds)), \
                pytest.raises(ShardError) as err:
            list(eval_data(url))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return str(err.value), peak


@pytest.mark.parametrize("cache", [False, True])
def test_a_shard_declared_over_the_remote_limit_is_refused_before_a_byte_is_read(
        served, tmp_path, cache):
    url, faults, root = served
    faults.mode = "endless"   # were it read, it would never end
    declare(root, TARGET, bytes=64 << 30)   # the 64 GiB, under the default limits
    cache_dir = tmp_path / "c"
    with pytest.raises(ShardError) as err:
        list(eval_data(url, cache_dir=str(cache_dir) if cache else None))
    msg = str(err.value)
    assert TARGET in msg and "remote_shard_bytes" in msg and "--limit remote_shard_bytes=" in msg
    assert "\n" not in msg
    assert not [n for n, _ in faults.requests if n == TARGET]   # never asked for
    if cache:
        assert not [p for p in cache_dir.iterdir() if TARGET in p.name]


def test_the_remote_limit_is_settable(served):
    url, faults, root = served
    size = max(p.stat().st_size for p in root.glob("shard-*.tar"))
    with limits.using(limits.active().with_overrides({"remote_shard_bytes": size - 1})):
        with pytest.raises(ShardError, match=f"shard-.*remote_shard_bytes={size - 1:,}"):
            list(eval_data(url))
    with limits.using(limits.active().with_overrides({"remote_shard_bytes": size})):
        data = eval_data(url)
        assert sum(b.valid.sum().item() for b in data) == data.manifest.total_samples


def test_a_huge_member_of_an_endless_body_is_refused_at_its_header(served):
    """The issue's repro, made small: the shard declares 64 MiB, its first member 60 MiB, the
    body never ends. Memory stays bounded by the member limit, not by what the shard declares.
    (With a cache the download is cut at the declared size: test_remote.py's endless body.)"""
    url, faults, root = served
    faults.mode = "endless"
    first_member_declares(root / TARGET, 60 << 20)
    declare(root, TARGET, bytes=64 << 20)
    msg, peak = refused_under(url, member_bytes=4 << 20)
    assert TARGET in msg and "member_bytes=4,194,304" in msg and "62,914,560" in msg, msg
    assert peak < 40 << 20, peak   # under the 60 MiB member: it was never read whole


def test_a_sha256_mismatch_at_the_end_of_a_stream_counts_as_a_skipped_sample(
        pristine, s3_endpoint, caplog):
    """Replaced on the store after its manifest, same size: its samples stream to the model
    before the check at the end can fail; that failure is counted and names the shard."""
    from .s3server import BUCKET, client, options, upload
    url = upload(s3_endpoint, pristine)
    key = url[len(f"s3://{BUCKET}/"):].replace("manifest.json", TARGET)
    body = bytearray((pristine / TARGET).read_bytes())
    body[-1] ^= 0xFF   # in the end padding: same size, every sample intact, other bytes
    client(s3_endpoint).put_object(Bucket=BUCKET, Key=key, Body=bytes(body))
    data = CARLAWebData(url, batch_size=2, mode="eval", image_size=SIZE, remote=FAST,
                        storage_options=options(s3_endpoint), on_error="skip")
    errors = [e for b in data for e in b.errors]
    assert data.stats["skipped_samples"] >= 1
    assert len(errors) >= 1 and all(TARGET in e and "sha256" in e for e in errors), errors
    assert TARGET in caplog.text and "sha256" in caplog.text


def test_an_object_that_shrinks_mid_read_is_its_own_error(pristine, s3_endpoint, monkeypatch):
    from carla_wds import objstore
    from .s3server import BUCKET, client, options, upload
    from carla_wds.remote import with_storage
    monkeypatch.setattr(objstore, "BLOCK", 8192)   # several ranged reads for a small shard
    url = upload(s3_endpoint, pristine)
    where = url.replace("manifest.json", TARGET)
    body = (pristine / TARGET).read_bytes()
    stream = open_shard(where, None, hashlib.sha256(body).hexdigest(), len(body),
                        remote=with_storage(FAST, options(s3_endpoint)))
    try:
        assert bytes(stream.read(8192)) == body[:8192]
        client(s3_endpoint).put_object(Bucket=BUCKET, Key=where[len(f"s3://{BUCKET}/"):],
                                       Body=body[:12000])
        with pytest.raises(RemoteError) as err:
            while stream.read(8192):
                pass
            stream.finish(hashlib.sha256(body).hexdigest())
    finally:
        stream.close()
    msg = str(err.value)
    assert f"object is 12000 bytes, the manifest declares {len(body)}" in msg, msg
    assert "replaced after packing?" in msg and "timeout" not in msg and "stalled" not in msg


def empty_tar(path: Path) -> Path:
    tarfile.open(path, "w").close()
    return path


def test_an_empty_tar_shard_reads_as_no_samples(served, tmp_path):
    url, _, root = served
    shard = empty_tar(root / "shard-empty.tar")
    data = shard.read_bytes()
    assert len(data) == 10240
    ref = ShardRef(str(shard), 0, len(data), hashlib.sha256(data).hexdigest())
    for where in (str(shard), url.replace("manifest.json", shard.name)):
        stream = open_shard(where, None, ref.sha256, ref.bytes, verify=True, remote=FAST)
        try:
            assert list(samples_of(stream, ShardRef(where, 0, ref.bytes, ref.sha256))) == []
        finally:
            stream.close()


def test_a_pack_with_an_empty_shard_loads_and_verifies(pristine, tmp_path):
    from carla_wds.pack.audit import verify
    pack = tmp_path / "pack"
    shutil.copytree(pristine, pack)
    m = json.loads((pack / "manifest.json").read_text())
    name = f"shard-{len(m['shards']):06d}.tar"   # the next in the pack's numbering
    data = empty_tar(pack / name).read_bytes()
    m["shards"].append({"name": name, "samples": 0, "bytes": len(data),
                        "sha256": hashlib.sha256(data).hexdigest()})
    (pack / "manifest.json").write_text(json.dumps(m))
    assert verify(str(pack), progress=False) == []
    assert verify(str(pack), deep=True, progress=False) == []
    got = CARLAWebData(str(pack), batch_size=2, mode="eval", image_size=SIZE)
    assert sum(b.valid.sum().item() for b in got) == m["total_samples"]


@contextlib.contextmanager
def serving(handler: type, root: Path, faults: Faults) -> Iterator[str]:
    """A real HTTP server on 127.0.0.1 with `handler` bound to `root` and `faults`; yields the
    manifest's URL."""
    bound = type("Handler", (handler,), {"root": root, "faults": faults})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), bound)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/manifest.json"
    finally:
        faults.stop.set()
        server.shutdown()
        server.server_close()


class ShrinkingHandler(FaultyHandler):
    """Sends half of the target, hangs up, then answers the Range request for the rest as a
    server whose file was replaced by that half does: 416, Content-Range bytes */half."""

    def _shrink(self, body: bytes) -> None:
        if self.headers.get("Range"):
            self.send_response(416)
            self.send_header("Content-Range", f"bytes */{len(body) // 2}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self._lie(body)


def test_an_http_body_that_shrinks_mid_read_is_its_own_error(pristine, tmp_path):
    root = tmp_path / "www"
    shutil.copytree(pristine, root)
    faults = Faults()
    faults.mode = "shrink"
    with serving(ShrinkingHandler, root, faults) as url:
        size = (root / TARGET).stat().st_size
        with pytest.raises(ShardError) as err:
            list(eval_data(url))
    msg = str(err.value)
    assert f"object is {size // 2} bytes, the manifest declares {size}" in msg, msg
    assert "replaced after packing?" in msg and "tried" not in msg
    assert [n for n, _ in faults.requests].count(TARGET) == 2   # no retry after the 416


class PileupHandler(FaultyHandler):
    """Serves the target's members, then, for ever, members of 64 KiB named with its last
    sample's key (a new suffix each): one sample that never ends (issue 38 N9)."""

    def _pileup(self, body: bytes) -> None:
        with tarfile.open(fileobj=io.BytesIO(body)) as tar:
            last = tar.getmembers()[-1]
        end = last.offset_data + last.size + -last.size % 512   # before the end blocks
        key = last.name.rpartition("/")[0] + "/" if "/" in last.name else ""
        key += last.name.rpartition("/")[2].split(".", 1)[0]
        self.faults.key = key
        self.send_response(200)
        self.end_headers()
        try:
            self.wfile.write(body[:end])
            for i in itertools.count():
                if self.faults.stop.is_set():
                    return
                info = tarfile.TarInfo(f"{key}.pile{i}")
                info.size = 65536
                self.wfile.write(info.tobuf() + bytes(65536))
        except OSError:
            pass


def test_one_sample_whose_members_never_end_is_cut_at_sample_bytes(pristine, tmp_path):
    """The issue's repro, made small: under a declared 64 MiB, the body goes on with members of
    the last sample's key. The sample is refused once it holds over sample_bytes (1 MiB here),
    naming the shard, the key and the limit; memory stays near that limit, not the 64 MiB the
    shard declares."""
    root = tmp_path / "www"
    shutil.copytree(pristine, root)
    declare(root, TARGET, bytes=64 << 20)
    faults = Faults()
    faults.mode = "pileup"
    with serving(PileupHandler, root, faults) as url:
        msg, peak = refused_under(url, sample_bytes=1 << 20)
    assert TARGET in msg and f"sample {faults.key}'s members" in msg, msg
    assert "sample_bytes=1,048,576" in msg and "\n" not in msg, msg
    assert peak < 16 << 20, peak   # the old reader gathered the declared 64 MiB


def test_a_local_sample_over_sample_bytes_is_refused(tmp_path):
    """The same bound on a local (memory-mapped) shard: one key, many members."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for i in range(8):
            info = tarfile.TarInfo(f"route/k0001.m{i}")
            info.size = 4096
            tar.addfile(info, io.BytesIO(bytes(4096)))
    path = tmp_path / "one.tar"
    path.write_bytes(buf.getvalue())
    ref = ShardRef(str(path), 1, len(buf.getvalue()))
    for limit, ok in ((8 * 4096, True), (8 * 4096 - 1, False)):
        stream = open_shard(str(path), None, None, ref.bytes)
        try:
            with limits.using(limits.active().with_overrides({"sample_bytes": limit})):
                if ok:
                    assert [s["__key__"] for s in samples_of(stream, ref)] == ["route/k0001"]
                    continue
                with pytest.raises(ShardError) as err:
                    list(samples_of(stream, ref))
        finally:
            stream.close()
        msg = str(err.value)
        assert str(path) in msg and "sample route/k0001's members" in msg, msg
        assert f"sample_bytes={limit:,}" in msg and "route/k0001.m7" in msg, msg
