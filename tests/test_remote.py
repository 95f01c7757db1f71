"""Shards over real HTTP on 127.0.0.1 from a server that stalls, fails, truncates, lies about
Content-Length or never ends: every read is timed, bounded and retried a bounded number of
times, and a download is cached only once it matches the manifest."""
from __future__ import annotations

import http.server
import json
import shutil
import tarfile
import threading
import time
from pathlib import Path

import pytest

from carla_wds import CARLAWebData
from carla_wds.pack.audit import verify
from carla_wds.remote import RemoteError, RemoteOptions
from carla_wds.tario import ShardError

from .helpers import SIZE, all_keys

FAST = RemoteOptions(connect_timeout=2, read_timeout=1, retries=2, backoff=0.05)


@pytest.fixture(scope="module")
def pristine(zoo) -> Path:
    return zoo(episodes=2, frames=16, max_samples=6)   # shared, read-only (conftest.zoo)


class Faults:
    """What the server does to requests for one shard name (None: serve it honestly)."""

    def __init__(self) -> None:
        self.mode: str | None = None
        self.target = "shard-000001.tar"
        self.requests: list[tuple[str, str | None]] = []
        self.left = 10 ** 9   # faulty answers before the server mends
        self.stop = threading.Event()
        self.ignore_range = False   # answer a Range request with the whole body (200)


class FaultyHandler(http.server.BaseHTTPRequestHandler):
    """Serves the files under `root`, doing to `faults.target` what `faults.mode` says; the
    subclass that `_handler` makes binds both."""

    root: Path
    faults: Faults

    def log_message(self, *args):
        pass

    def do_GET(self):
        name = self.path.lstrip("/")
        self.faults.requests.append((name, self.headers.get("Range")))
        path = self.root / name
        if not path.is_file():
            self.send_error(404)
            return
        body = path.read_bytes()
        if name == self.faults.target and self.faults.mode and self.faults.left > 0:
            self.faults.left -= 1
            return getattr(self, "_" + self.faults.mode)(body)
        self._send(body, None if self.faults.ignore_range else self.headers.get("Range"))

    def _send(self, body: bytes, rng: str | None = None) -> None:
        start = int(rng.split("=")[1].rstrip("-")) if rng else 0
        self.send_response(206 if rng else 200)
        self.send_header("Content-Length", str(len(body) - start))
        self.end_headers()
        self.wfile.write(body[start:])

    def _stall(self, body: bytes) -> None:   # headers and 1 MB (or a fifth), then silence
        rng = self.headers.get("Range")
        start = int(rng.split("=")[1].rstrip("-")) if rng else 0
        self.send_response(206 if rng else 200)
        self.send_header("Content-Length", str(len(body) - start))
        self.end_headers()
        self.wfile.write(body[start:start + min(1 << 20, len(body) // 5)])
        self.wfile.flush()
        self.faults.stop.wait(30)

    def _error500(self, body: bytes) -> None:
        self.send_error(500)

    def _short(self, body: bytes) -> None:   # an honest Content-Length of a shorter file
        cut = body[:len(body) // 2]
        self.send_response(200)
        self.send_header("Content-Length", str(len(cut)))
        self.end_headers()
        self.wfile.write(cut)

    def _lie(self, body: bytes) -> None:   # announces it all, sends half, hangs up
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body[:len(body) // 2])
        self.close_connection = True

    def _endless(self, body: bytes) -> None:   # no Content-Length, bytes for ever
        self.send_response(200)
        self.end_headers()
        try:
            self.wfile.write(body)
            while not self.faults.stop.is_set():
                self.wfile.write(b"\0" * 65536)
        except OSError:
            pass


def _handler(root: Path, faults: Faults):
    return type("Handler", (FaultyHandler,), {"root": root, "faults": faults})


@pytest.fixture()
def served(pristine, tmp_path):
    root = tmp_path / "www"
    shutil.copytree(pristine, root)
    faults = Faults()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(root, faults))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/manifest.json", faults, root
    faults.stop.set()
    server.shutdown()
    server.server_close()


def eval_keys(url: str, **kw) -> list[str]:
    data = CARLAWebData(url, batch_size=2, mode="eval", image_size=SIZE, remote=FAST, **kw)
    return [k for b in data for k, v in zip(b.keys, b.valid.tolist()) if v]


def test_honest_server_with_and_without_cache(served, pristine, tmp_path):
    url, faults, _ = served
    want = sorted(all_keys(pristine))
    assert sorted(eval_keys(url)) == want
    assert sorted(eval_keys(url, verify=True)) == want
    assert sorted(eval_keys(url, cache_dir=str(tmp_path / "c"), verify=True)) == want
    assert not list((tmp_path / "c").glob("*.temp"))


@pytest.mark.parametrize("cache", [False, True])
def test_a_stalled_server_gives_a_bounded_error(served, tmp_path, cache):
    url, faults, _ = served
    faults.mode = "stall"
    cache_dir = str(tmp_path / "cache") if cache else None
    started = time.monotonic()
    with pytest.raises(ShardError) as err:
        eval_keys(url, cache_dir=cache_dir)
    msg = str(err.value)
    assert "shard-000001.tar" in msg and "stalled" in msg and "tried 3 times" in msg
    assert "bytes of" in msg and "declared" in msg and "Fix:" in msg
    assert time.monotonic() - started < 25   # bounded: not a timing claim, a hang detector
    if cache:
        # the stalled shard is not cached, and no .temp is left
        assert [p.name.split("-", 1)[1] for p in Path(cache_dir).iterdir()] == [
            "shard-000000.tar"]
    # every retry after the first asked for the rest only
    ranges = [r for n, r in faults.requests if n == faults.target]
    assert ranges[0] is None and all(r and r.startswith("bytes=") for r in ranges[1:])


def test_http_500_is_retried_a_bounded_number_of_times(served):
    url, faults, _ = served
    faults.mode = "error500"
    with pytest.raises(ShardError, match="HTTP 500.*tried 3 times"):
        eval_keys(url)
    assert sum(n == faults.target for n, _ in faults.requests) == FAST.retries + 1


def test_a_transient_500_is_retried_and_the_data_is_exact(served, pristine):
    url, faults, _ = served
    faults.mode, faults.left = "error500", 1
    assert sorted(eval_keys(url)) == sorted(all_keys(pristine))


def test_a_dropped_connection_resumes_with_a_range_request(served, pristine, tmp_path):
    url, faults, _ = served
    faults.mode, faults.left = "lie", 1
    assert sorted(eval_keys(url, cache_dir=str(tmp_path / "c"))) == sorted(all_keys(pristine))
    ranges = [r for n, r in faults.requests if n == faults.target]
    assert len(ranges) == 2 and ranges[1].startswith("bytes=")


@pytest.mark.parametrize("cache", [False, True])
def test_a_server_that_ignores_ranges_still_gives_exact_data(served, pristine, tmp_path, cache):
    url, faults, _ = served
    faults.mode, faults.left, faults.ignore_range = "lie", 1, True
    cache_dir = str(tmp_path / "c") if cache else None
    assert sorted(eval_keys(url, cache_dir=cache_dir, verify=True)) == sorted(
        all_keys(pristine))
    ranges = [r for n, r in faults.requests if n == faults.target]
    assert len(ranges) == 2 and ranges[1].startswith("bytes=")


def test_a_short_download_is_never_cached(served, pristine, tmp_path):
    url, faults, _ = served
    faults.mode = "short"
    cache = tmp_path / "cache"
    with pytest.raises(ShardError, match="announces .* bytes .*not the declared size"):
        eval_keys(url, cache_dir=str(cache))
    assert not [p for p in cache.iterdir() if faults.target in p.name]
    faults.mode = None   # the server is fixed: the next run fetches the shard again
    assert sorted(eval_keys(url, cache_dir=str(cache))) == sorted(all_keys(pristine))
    assert not list(cache.glob("*.temp"))


def test_a_cached_copy_of_the_wrong_size_is_fetched_again(served, pristine, tmp_path):
    url, faults, _ = served
    cache = tmp_path / "cache"
    eval_keys(url, cache_dir=str(cache))
    (copy,) = [p for p in cache.iterdir() if p.name.endswith(faults.target)]
    copy.write_bytes(copy.read_bytes()[:5000])
    assert sorted(eval_keys(url, cache_dir=str(cache))) == sorted(all_keys(pristine))
    assert copy.stat().st_size == (pristine / faults.target).stat().st_size


@pytest.mark.parametrize("cache", [False, True])
def test_an_endless_body_is_cut_at_the_declared_size(served, tmp_path, cache):
    url, faults, root = served
    faults.mode = "endless"
    data = CARLAWebData(url, batch_size=2, mode="eval", image_size=SIZE, remote=FAST,
                        cache_dir=str(tmp_path / "c") if cache else None)
    # the first len(body) bytes are the real shard: the stream stops there, whole and exact
    keys = [k for b in data for k, v in zip(b.keys, b.valid.tolist()) if v]
    assert len(keys) == data.manifest.total_samples
    if cache:
        size = (root / faults.target).stat().st_size
        assert all(p.stat().st_size <= size for p in (tmp_path / "c").iterdir())


def test_a_member_larger_than_the_shard_is_refused_before_it_is_read(served):
    url, faults, root = served
    path = root / faults.target
    blob = bytearray(path.read_bytes())
    blob[124:136] = b"%011o\0" % (4 << 30)   # the first member now declares 4 GiB
    blob[148:156] = b" " * 8
    blob[148:156] = b"%06o\0 " % sum(blob[:512])
    path.write_bytes(bytes(blob))
    with pytest.raises(ShardError, match="declares 4294967296 bytes, beyond the"):
        eval_keys(url)


def test_verify_and_inspect_work_on_urls(served, tmp_path):
    url, faults, root = served
    assert verify(url, progress=False) == []
    assert verify(url, deep=True, progress=False) == []
    blob = bytearray((root / faults.target).read_bytes())
    blob[2000] ^= 0xFF
    (root / faults.target).write_bytes(bytes(blob))
    problems = verify(url, progress=False)
    assert len(problems) == 1 and faults.target in problems[0] and "sha256" in problems[0]
    from carla_wds.pack.audit import summary
    (root / faults.target).write_bytes(bytes(blob[:3000]))
    with pytest.raises(Exception, match="shard-000001.tar"):
        summary(url, remote=FAST)


def test_missing_manifest_and_404_shard_name_the_url(served):
    url, faults, root = served
    with pytest.raises(RemoteError, match="HTTP 404.*Fix"):
        CARLAWebData(url.replace("manifest.json", "nope.json"), batch_size=2, remote=FAST)
    (root / faults.target).unlink()
    with pytest.raises(ShardError, match=f"{faults.target}.*HTTP 404"):
        eval_keys(url)


def test_a_huge_manifest_is_refused(served, monkeypatch):
    import carla_wds.manifest as manifest
    url, _, _ = served
    monkeypatch.setattr(manifest, "MAX_MANIFEST_BYTES", 100)
    with pytest.raises(RemoteError, match="larger than 10[01] bytes"):
        CARLAWebData(url, batch_size=2, remote=FAST)


def test_the_trainer_and_verify_pass_their_timeouts_on(served, tmp_path):
    from carla_wds.train.config import load_config
    from carla_wds.train.loop import build_data
    url, faults, _ = served
    cfg = load_config(None, [f"data.train={url}", f"data.val={url}", "data.read_timeout=1",
                             "data.retries=1", "data.batch_size=2", "data.eval_batch_size=2"])
    train, val = build_data(cfg, 0, 1, False)
    assert train.remote == val.remote == RemoteOptions(read_timeout=1, retries=1)
    faults.mode = "stall"
    import subprocess
    import sys
    proc = subprocess.run([sys.executable, "-m", "carla_wds.cli", "verify", url,
                           "--read-timeout", "0.5", "--retries", "1"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "tried 2 times" in proc.stderr, proc.stderr[-2000:]
