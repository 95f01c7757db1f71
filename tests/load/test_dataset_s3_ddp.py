"""CARLAWebData over s3:// on two DDP ranks (gloo; forked by tests/ranks.py with torchrun's
environment), 2 workers per rank, every process of the node sharing one bounded shard cache:
the batches are the local folder's, exactly."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

from ..helpers import SCRIPTS, all_keys, manifest_of   # noqa: E402
from ..ranks import run_script   # noqa: E402
from ..s3server import env, upload   # noqa: E402


@pytest.fixture(scope="module")
def shards(zoo) -> Path:
    return zoo()   # shared, read-only (conftest.zoo)


@pytest.mark.ddp
def test_torchrun_two_ranks_two_workers_share_a_bounded_cache(shards, s3_endpoint, tmp_path,
                                                               monkeypatch):
    url = upload(s3_endpoint, shards)
    for name, value in env(s3_endpoint).items():   # the forked ranks inherit them
        monkeypatch.setenv(name, value)
    entries = manifest_of(shards)["shards"]
    cache, out = tmp_path / "cache", tmp_path / "out"
    out.mkdir()
    # four readers at once, room for five shards of twelve: evictions, and sometimes a shard
    # read uncached when the others are all in use
    limit = 5 * max(s["bytes"] for s in entries)
    run_script(str(SCRIPTS / "s3_cache_check.py"), "ddp", url, str(shards), str(cache),
               str(limit), str(out), timeout=400)
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    assert [r["world"] for r in ranks] == [2, 2]
    for r in ranks:   # each rank's batches over s3:// are its batches over the local folder
        assert r["s3"] == r["local"]
        assert len(r["s3"]["train"]) == r["s3"]["train_len"] > 0
        assert r["s3"]["eval_batches"] == r["s3"]["eval_len"]
    assert ranks[0]["s3"]["eval_batches"] == ranks[1]["s3"]["eval_batches"]
    assert len(ranks[0]["s3"]["train"]) == len(ranks[1]["s3"]["train"])
    evals = ranks[0]["s3"]["eval"] + ranks[1]["s3"]["eval"]   # every sample exactly once
    assert sorted(evals) == sorted(all_keys(shards)) and len(set(evals)) == len(evals)
    train = [k for r in ranks for b in r["s3"]["train"] for k in b]
    assert len(train) == len(set(train))
    # the cache: under its limit, whole shards of the manifest's bytes, nothing left behind
    files = {p.name: p for p in cache.iterdir()}
    assert 0 < sum(p.stat().st_size for p in files.values()) <= limit
    want = {s["name"]: s["sha256"] for s in entries}
    for name, p in files.items():
        assert not name.endswith((".temp", ".lock"))
        assert hashlib.sha256(p.read_bytes()).hexdigest() == want[name.split("-", 1)[1]]
