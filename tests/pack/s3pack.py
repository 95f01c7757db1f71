"""What the tests of `carla-wds pack RAW s3://...` share: the real CLI in a child process, the
objects under a prefix, a pack through the library, and the proxy and local-pack fixtures."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ..s3server import BUCKET, env, keys, options
from .s3proxy import Proxy

JOURNAL = ".pack-journal.jsonl"   # a pack's journal, and its copy in the store
EXE = str(Path(sys.executable).parent / "carla-wds")


@pytest.fixture(scope="module")
def local3(zoo) -> Path:
    """The local pack the killed packs are compared with: one route's 26 samples in 9 shards
    of 3, the zoo's (shared, read-only); the killed packs pack its raw folder beside it."""
    return zoo(episodes=1, frames=30, max_samples=3)


@pytest.fixture
def proxy(s3_endpoint):
    p = Proxy(s3_endpoint)
    p.endpoint = p.start()
    yield p
    p.stop()


def files_of(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def objects(endpoint: str, prefix: str) -> dict[str, bytes]:
    """name under the prefix -> bytes of every object there."""
    return {k[len(prefix) + 1:]: v for k, v in keys(endpoint, prefix + "/").items()}


def s3_pack(raw: Path, endpoint: str, prefix: str, stage: Path, **kw) -> dict:
    from carla_wds.pack import PackOptions, pack
    kw = {"max_samples": 7, "progress": False, **kw}
    opts = PackOptions.of(stage=str(stage), storage_options=options(endpoint), **kw)
    return pack(raw, f"s3://{BUCKET}/{prefix}", opts)


def run_cli(endpoint: str, home: Path, *args, log: Path | None = None):
    """The real `carla-wds` in a child process, reaching the store through the AWS
    environment, with its default staging folder under `home`: the finished process
    (CompletedProcess), or with `log` the running one (Popen), writing to that file."""
    child_env = {**os.environ, **env(endpoint), "XDG_CACHE_HOME": str(home)}
    cmd = [EXE, *map(str, args)]
    if log is None:
        return subprocess.run(cmd, env=child_env, capture_output=True, text=True, timeout=240)
    with open(log, "w") as f:
        return subprocess.Popen(cmd, env=child_env, stdout=f, stderr=subprocess.STDOUT)
