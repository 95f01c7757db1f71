"""CARLAWebData on two DDP ranks (gloo; started by tests/ranks.py with torchrun's environment),
and over real HTTP."""
from __future__ import annotations

import functools
import http.server
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from carla_wds import CARLAWebData

from ..helpers import SCRIPTS, SIZE, all_keys
from ..ranks import run_script


@pytest.fixture(scope="module")
def shards(zoo) -> Path:
    return zoo()   # shared, read-only (conftest.zoo)




@pytest.mark.ddp
def test_torchrun_two_ranks_equal_batches_and_complete_eval(shards, tmp_path):
    run_script(str(SCRIPTS / "ddp_loader_check.py"), str(shards), str(tmp_path))
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert [r["world"] for r in ranks] == [2, 2]
    assert len(ranks[0]["train"]) == len(ranks[1]["train"]) == ranks[0]["len"] > 0
    train_keys = [k for r in ranks for b in r["train"] for k in b]
    assert len(train_keys) == len(set(train_keys))
    assert ranks[0]["eval_batches"] == ranks[1]["eval_batches"] == ranks[0]["eval_len"]
    assert not set(ranks[0]["eval"]) & set(ranks[1]["eval"])
    assert sorted(ranks[0]["eval"] + ranks[1]["eval"]) == sorted(all_keys(shards))


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):   # keep pytest output clean
        pass


@pytest.fixture()
def http_server(shards):
    handler = functools.partial(_QuietHandler, directory=str(shards))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_http_shards_with_cache_dir(shards, http_server, tmp_path):
    url = f"http://127.0.0.1:{http_server.server_address[1]}/manifest.json"
    cache = tmp_path / "cache" / "not-yet-created"
    remote = CARLAWebData(url, batch_size=4, mode="eval", cache_dir=str(cache), image_size=SIZE)
    local = CARLAWebData(str(shards), batch_size=4, mode="eval", image_size=SIZE)
    got, want = list(remote), list(local)
    assert [b.keys for b in got] == [b.keys for b in want]
    assert all((a.images == b.images).all() for a, b in zip(got, want))
    n_shards = len(json.loads((shards / "manifest.json").read_text())["shards"])
    assert len([p for p in cache.iterdir() if p.suffix == ".tar"]) == n_shards
    # with the server gone, the manifest cannot be fetched, but shards come from the cache
    http_server.shutdown()
    cached = CARLAWebData(str(shards), batch_size=4, mode="eval", image_size=SIZE)
    cached.urls = tuple(url.rsplit("/", 1)[0] + "/" + Path(u).name for u in cached.urls)
    cached.cache_dir = str(cache)
    assert [b.keys for b in cached] == [b.keys for b in want]


def test_http_without_cache(shards, http_server):
    url = f"http://127.0.0.1:{http_server.server_address[1]}/manifest.json"
    data = CARLAWebData(url, batch_size=5, num_workers=2, image_size=SIZE)
    assert len(list(data)) == len(data)


def test_pipe_shard_urls_from_the_caller(shards):
    """pipe: is the caller's to choose (shard_urls=); a manifest may not name one."""
    manifest = json.loads((shards / "manifest.json").read_text())
    urls = [f"pipe:cat {shards / s['name']}" for s in manifest["shards"]]
    piped = CARLAWebData(str(shards), batch_size=4, mode="eval", image_size=SIZE,
                         shard_urls=urls)
    local = CARLAWebData(str(shards), batch_size=4, mode="eval", image_size=SIZE)
    assert [b.keys for b in piped] == [b.keys for b in local]


def test_http_sha256_mismatch_drops_the_cached_copy(shards, tmp_path):
    import shutil
    served = tmp_path / "served"
    shutil.copytree(shards, served)
    manifest = json.loads((served / "manifest.json").read_text())
    manifest["shards"][0]["sha256"] = "0" * 64
    (served / "manifest.json").write_text(json.dumps(manifest))
    handler = functools.partial(_QuietHandler, directory=str(served))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/manifest.json"
        cache = tmp_path / "cache"
        data = CARLAWebData(url, batch_size=4, mode="eval", cache_dir=str(cache), verify=True,
                            image_size=SIZE)
        with pytest.raises(Exception, match="sha256"):
            list(data)
        assert not [p for p in cache.iterdir() if p.name.endswith("shard-000000.tar")]
    finally:
        server.shutdown()
        server.server_close()
