"""The shard cache (carla_wds/shardcache.py) on a real S3 server (moto on 127.0.0.1, real s3fs)
and real processes: bounded by cache_limit_bytes with least-recently-used eviction that passes
over shards in use, filled once when processes race for the same shards, and left with no
wrong bytes by a filler killed with SIGKILL."""
from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

from carla_wds import CARLAWebData   # noqa: E402
from carla_wds.shardcache import ShardCache, cache_name   # noqa: E402
from carla_wds.shardread import MappedShard, open_shard   # noqa: E402
from carla_wds.remote import with_storage   # noqa: E402
from carla_wds.tario import ShardError   # noqa: E402

from .helpers import SCRIPTS, SIZE, manifest_of, make_pack   # noqa: E402
from .s3server import FAST, env, options, upload   # noqa: E402
from .test_objstore import assert_same, batches   # noqa: E402  (same eval loads, same checks)

SCRIPT = str(SCRIPTS / "s3_cache_check.py")


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    # 2 x (24 - 4) = 40 samples in 10 shards of 4
    return make_pack(tmp_path_factory.mktemp("shardcache"), episodes=2, frames=24,
                     max_samples=4)


@pytest.fixture(scope="module")
def shards(pristine) -> list[dict]:
    """The manifest's shard entries, each with its local bytes' sha256 checked."""
    entries = manifest_of(pristine)["shards"]
    for s in entries:
        assert hashlib.sha256((pristine / s["name"]).read_bytes()).hexdigest() == s["sha256"]
    return entries


def listing(cache: Path) -> dict[str, int]:
    """name -> bytes of every file in the cache folder (shards, temporary and lock files)."""
    return {p.name: p.stat().st_size for p in cache.iterdir()} if cache.exists() else {}


def usage(cache: Path) -> int:
    """Bytes in the cache folder at one instant, while other processes fill and evict."""
    return sum(ShardCache(str(cache)).usage().values())


def cached_shards(cache: Path) -> dict[str, str]:
    """shard name -> sha256 of every cached shard (neither temporary nor lock files)."""
    return {p.name.split("-", 1)[1]: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in cache.iterdir() if not p.name.endswith((".temp", ".lock"))}


def assert_clean(cache: Path, shards: list[dict]) -> None:
    """Only whole shards of the manifest's bytes: no temporary or lock file left."""
    names = sorted(listing(cache))
    assert not [n for n in names if n.endswith((".temp", ".lock"))], names
    want = {s["name"]: s["sha256"] for s in shards}
    assert all(want[name] == sha for name, sha in cached_shards(cache).items())


def shard_url(manifest_url: str, name: str) -> str:
    return manifest_url.rsplit("/", 1)[0] + "/" + name


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "100"])
def test_a_limit_that_is_not_a_positive_byte_count_is_refused(pristine, tmp_path, bad):
    with pytest.raises(ValueError, match=r"cache_limit_bytes .*expected a whole number of "
                                         r"bytes > 0 .*or None"):
        ShardCache(str(tmp_path), bad)
    with pytest.raises(ValueError, match="cache_limit_bytes"):
        CARLAWebData(str(pristine), batch_size=2, cache_dir=str(tmp_path), cache_limit_bytes=bad)


def test_a_limit_needs_a_cache_dir(pristine):
    with pytest.raises(ValueError, match="cache_dir is None. Fix: pass cache_dir="):
        CARLAWebData(str(pristine), batch_size=2, cache_limit_bytes=1 << 30)


def test_a_shard_larger_than_the_limit_is_an_error_naming_it(pristine, shards, s3_endpoint,
                                                             tmp_path):
    url = upload(s3_endpoint, pristine)
    big = max(shards, key=lambda s: s["bytes"])
    limit = big["bytes"] - 1
    kw = {"storage_options": options(s3_endpoint), "remote": FAST}
    with pytest.raises(ValueError, match=rf"shard {shard_url(url, big['name'])}: "
                                         rf"{big['bytes']} bytes, more than cache_limit_bytes "
                                         rf"{limit}. Fix: raise cache_limit_bytes"):
        CARLAWebData(url, batch_size=2, cache_dir=str(tmp_path / "c"),
                     cache_limit_bytes=limit, **kw)
    with pytest.raises(ShardError, match=rf"{big['name']}: {big['bytes']} bytes, more than the "
                                         rf"cache's limit of {limit} bytes.*Fix: raise"):
        open_shard(shard_url(url, big["name"]), str(tmp_path / "c"), big["sha256"],
                   big["bytes"], remote=with_storage(FAST, options(s3_endpoint)),
                   cache_limit_bytes=limit)
    assert listing(tmp_path / "c") == {}   # nothing was downloaded


@pytest.mark.parametrize("workers", [0, 2])
def test_a_bounded_cache_stays_under_its_limit_and_gives_the_local_batches(
        pristine, shards, s3_endpoint, tmp_path, workers):
    url = upload(s3_endpoint, pristine)
    cache = tmp_path / "cache"
    limit = 2 * max(s["bytes"] for s in shards)   # about two shards of ten
    local = batches(str(pristine), num_workers=workers)
    for _ in range(2):   # evictions on both passes: a warm cache cannot hold the pack
        data = CARLAWebData(url, batch_size=4, image_size=SIZE, num_workers=workers,
                            mode="eval", storage_options=options(s3_endpoint), remote=FAST,
                            cache_dir=str(cache), cache_limit_bytes=limit)
        got = []
        for batch in data:   # the workers fill and evict while the batches arrive
            assert usage(cache) <= limit
            got.append(batch)
        assert_same(got, local)
    assert 0 < len(cached_shards(cache)) <= 2
    assert_clean(cache, shards)


def test_eviction_takes_the_least_recently_used_shard(pristine, shards, s3_endpoint,
                                                      tmp_path):
    url = upload(s3_endpoint, pristine)
    cache = tmp_path / "cache"
    a, b, c = shards[:3]
    limit = a["bytes"] + b["bytes"] + c["bytes"] - 1   # any two fit, never three
    remote = with_storage(FAST, options(s3_endpoint))

    def use(s: dict) -> None:
        stream = open_shard(shard_url(url, s["name"]), str(cache), s["sha256"], s["bytes"],
                            remote=remote, cache_limit_bytes=limit)
        assert hashlib.sha256(stream.read()).hexdigest() == s["sha256"]
        stream.close()
    for s, after in [(a, [a]), (b, [a, b]), (a, [a, b]), (c, [a, c]), (b, [c, b]),
                     (c, [c, b]), (a, [c, a])]:
        use(s)   # the shard used the longest ago goes first: b after a's reuse, then a
        assert set(cached_shards(cache)) == {x["name"] for x in after}
    assert_clean(cache, shards)


def test_a_shard_in_use_by_another_process_is_not_evicted(pristine, shards, s3_endpoint,
                                                          tmp_path):
    url = upload(s3_endpoint, pristine)
    cache = tmp_path / "cache"
    limit = 2 * max(s["bytes"] for s in shards)
    holder = subprocess.Popen([sys.executable, SCRIPT, "hold", url, str(cache), str(limit),
                               "0"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              env={**os.environ, **env(s3_endpoint)})
    try:
        assert holder.stdout.readline() == "held\n"
        held = cache / cache_name(shard_url(url, shards[0]["name"]), shards[0]["sha256"])
        inode = held.stat().st_ino
        # every other shard passes through the cache beside it, oldest first evicted
        assert_same(batches(url, storage_options=options(s3_endpoint), remote=FAST,
                            cache_dir=str(cache), cache_limit_bytes=limit),
                    batches(str(pristine)))
        assert held.stat().st_ino == inode   # the least recently used, and still there
        assert sum(listing(cache).values()) <= limit
        assert set(cached_shards(cache)) == {shards[0]["name"], shards[-1]["name"]}
    finally:
        holder.stdin.close()
        assert holder.wait(60) == 0
    # given back: now it goes first
    open_shard(shard_url(url, shards[1]["name"]), str(cache), shards[1]["sha256"],
               shards[1]["bytes"], remote=with_storage(FAST, options(s3_endpoint)),
               cache_limit_bytes=limit).close()
    assert set(cached_shards(cache)) == {shards[-1]["name"], shards[1]["name"]}
    assert_clean(cache, shards)


def test_a_shard_with_no_room_beside_the_shards_in_use_is_read_uncached(
        pristine, shards, s3_endpoint, tmp_path, caplog):
    url = upload(s3_endpoint, pristine)
    cache = tmp_path / "cache"
    a, b, c = shards[:3]
    limit = a["bytes"] + b["bytes"] + c["bytes"] - 1
    remote = with_storage(FAST, options(s3_endpoint))

    def open_(s: dict):
        return open_shard(shard_url(url, s["name"]), str(cache), s["sha256"], s["bytes"],
                          remote=remote, cache_limit_bytes=limit)
    held = [open_(a), open_(b)]   # both in use: neither may go
    stream = open_(c)
    assert not isinstance(stream, MappedShard)   # streamed from the store, checked at the end
    data = stream.read()
    stream.finish(c["sha256"])
    stream.close()
    assert hashlib.sha256(data).hexdigest() == c["sha256"]
    assert set(cached_shards(cache)) == {a["name"], b["name"]}
    assert f"cache {cache}:" in caplog.text and "reading a shard of" in caplog.text \
        and "uncached" in caplog.text and "Fix: raise cache_limit_bytes" in caplog.text
    for stream in held:
        stream.close()
    open_(c).close()   # given back: now c is cached in a's place
    assert set(cached_shards(cache)) == {b["name"], c["name"]}
    assert_clean(cache, shards)


class SlowRelay:
    """A TCP relay to the S3 server that passes its answers on at `rate` bytes/s, so that a
    fill lasts long enough for other processes to race it or for a kill to land midway; the
    requests and bytes are the server's own."""

    def __init__(self, upstream: str, rate: int) -> None:
        self.upstream = upstream.rsplit("/", 1)[1].split(":")
        self.rate, self.conns = rate, []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection((self.upstream[0], int(self.upstream[1])))
            self.conns += [client, server]
            threading.Thread(target=self._pump, args=(client, server, 0), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, self.rate),
                             daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket, rate: int) -> None:
        try:
            while data := src.recv(2048):
                dst.sendall(data)
                if rate:
                    time.sleep(len(data) / rate)
        except OSError:
            pass
        try:
            dst.shutdown(socket.SHUT_WR)   # pass the end on; the other direction goes on
        except OSError:
            pass

    def close(self) -> None:
        self.listener.close()
        for s in self.conns:
            s.close()


@pytest.fixture
def relay(s3_endpoint):
    r = SlowRelay(s3_endpoint, rate=200_000)   # a shard of 60 kB: 0.3 s
    yield r
    r.close()


def fillers(url: str, cache: Path, limit: int, relay: SlowRelay, tmp_path: Path, n: int = 4,
            *extra: str) -> tuple[list[subprocess.Popen], Path]:
    """n fill processes started together (the go file); odd ones go in reverse order."""
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, SCRIPT, "fill", url, str(cache), str(limit),
                               str(tmp_path / f"out{i}.json"), "--go", str(go), *extra,
                               *(["--reverse"] if i % 2 else [])],
                              env={**os.environ, **env(relay.url)}) for i in range(n)]
    return procs, go


def test_concurrent_fills_download_each_shard_once(pristine, shards, s3_endpoint, relay,
                                                   tmp_path):
    url = upload(s3_endpoint, pristine)
    cache = tmp_path / "cache"
    procs, go = fillers(url, cache, 0, relay, tmp_path)
    go.touch()
    assert [p.wait(240) for p in procs] == [0] * len(procs)
    outs = [json.loads((tmp_path / f"out{i}.json").read_text()) for i in range(len(procs))]
    want = {s["name"]: s["sha256"] for s in shards}
    for out in outs:   # every process read every shard's exact bytes
        assert {name: r["sha256"] for name, r in out.items()} == want
    for name in want:   # one download per shard; the others waited and reused that copy
        hows = sorted(out[name]["how"] for out in outs)
        assert hows == ["downloaded"] + ["reused"] * (len(outs) - 1), (name, hows)
    assert cached_shards(cache) == want   # each cached once, under its own name
    assert len(listing(cache)) == len(want)
    assert_clean(cache, shards)


def test_concurrent_bounded_fills_stay_under_the_limit(pristine, shards, s3_endpoint, relay,
                                                       tmp_path):
    url = upload(s3_endpoint, pristine)
    cache = tmp_path / "cache"
    limit = 3 * max(s["bytes"] for s in shards)
    procs, go = fillers(url, cache, limit, relay, tmp_path)
    go.touch()
    seen = 0
    while any(p.poll() is None for p in procs):   # the bound holds at every look
        now = ShardCache(str(cache)).usage()
        assert sum(now.values()) <= limit, now
        seen = max(seen, len(now))
        time.sleep(0.005)
    assert [p.returncode for p in procs] == [0] * len(procs)
    want = {s["name"]: s["sha256"] for s in shards}
    for i in range(len(procs)):
        out = json.loads((tmp_path / f"out{i}.json").read_text())
        assert {name: r["sha256"] for name, r in out.items()} == want
    assert seen > 0 and sum(listing(cache).values()) <= limit
    assert_clean(cache, shards)


def test_a_filler_killed_midway_leaves_no_wrong_shard(pristine, shards, s3_endpoint, relay,
                                                      tmp_path):
    url = upload(s3_endpoint, pristine)
    cache = tmp_path / "cache"
    (proc,), go = fillers(url, cache, 0, relay, tmp_path, 1, "--block", "4096")
    go.touch()
    deadline = time.monotonic() + 120
    while not [n for n, size in listing(cache).items() if n.endswith(".temp") and size > 0]:
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)   # mid-download: part of a shard is on disk
    assert proc.wait(30) == -signal.SIGKILL
    partial = [n for n in listing(cache) if n.endswith(".temp")]
    assert len(partial) == 1
    want = {s["name"]: s["sha256"] for s in shards}
    assert all(want[name] == sha for name, sha in cached_shards(cache).items())
    killed = partial[0].rsplit(".", 3)[0].split("-", 1)[1]   # <hash>-<name>.<bytes>.<id>.temp
    assert killed in want and killed not in cached_shards(cache)
    # a later load, bounded, reuses the whole shards, fetches the rest, sweeps the leftovers
    limit = 2 * max(s["bytes"] for s in shards)
    assert_same(batches(url, storage_options=options(s3_endpoint), remote=FAST,
                        cache_dir=str(cache), cache_limit_bytes=limit),
                batches(str(pristine)))
    assert sum(listing(cache).values()) <= limit
    assert_clean(cache, shards)


def test_the_trainer_config_bounds_its_cache(pristine, shards, s3_endpoint, tmp_path,
                                             monkeypatch):
    from carla_wds.train.config import ConfigError, load_config
    from carla_wds.train.loop import build_data
    with pytest.raises(ConfigError, match=r"data.cache_limit_bytes=0 is invalid.*integer >= 1, "
                                          r"or null"):
        load_config(None, ["data.cache_limit_bytes=0"])
    url = upload(s3_endpoint, pristine)
    for name, value in env(s3_endpoint).items():   # the trainer reads the AWS environment
        monkeypatch.setenv(name, value)
    cache, limit = tmp_path / "cache", 2 * max(s["bytes"] for s in shards)
    cfg = load_config(None, [f"data.train={url}", f"data.val={url}", "data.num_workers=0",
                             f"data.cache_dir={cache}", f"data.cache_limit_bytes={limit}",
                             "data.batch_size=4", "data.eval_batch_size=4"])
    train, val = build_data(cfg, 0, 1, False)
    assert train.cache_limit_bytes == val.cache_limit_bytes == limit
    for _ in val:
        assert usage(cache) <= limit
    assert 0 < len(cached_shards(cache)) <= 2
    assert_clean(cache, shards)


def test_a_shard_repacked_under_the_same_url_is_not_read_from_the_stale_copy(
        pristine, shards, s3_endpoint, tmp_path):
    """Same URL, same size, other bytes (a re-pack with --overwrite): the manifest's new
    sha256 names a new entry, so the cache downloads the new shard instead of handing back
    the old one, whose size alone would match."""
    from carla_wds.manifest import shard_url
    from .s3server import BUCKET, client
    url = upload(s3_endpoint, pristine)
    shard, cache = shards[0], str(tmp_path / "cache")
    where = shard_url(url, shard["name"])
    remote = with_storage(FAST, options(s3_endpoint))
    old = (pristine / shard["name"]).read_bytes()
    new = old[:-1] + bytes([old[-1] ^ 0xFF])   # the end padding: a valid shard of other bytes
    for body in (old, new):
        client(s3_endpoint).put_object(Bucket=BUCKET, Key=where[len(f"s3://{BUCKET}/"):],
                                       Body=body)
        sha = hashlib.sha256(body).hexdigest()
        stream = open_shard(where, cache, sha, len(body), remote=remote,
                            cache_limit_bytes=10 * len(body))
        try:
            assert bytes(stream.read(len(body))) == body
        finally:
            stream.close()
    held = [hashlib.sha256(p.read_bytes()).hexdigest()
            for p in (tmp_path / "cache").iterdir() if p.name.endswith(shard["name"])]
    assert sorted(held) == sorted(hashlib.sha256(b).hexdigest() for b in (old, new))
