"""Route archives on an object store (issue 30): INPUT_DIR an s3:// prefix of `.tar.gz` and
`.zip` route archives at nested prefixes, on a real S3 server (moto's, on 127.0.0.1) through
s3fs: the same shards as from the local archives (a `.tar.gz` streamed through ObjectReader, a
`.zip` read in place through ranged reads); a prefix without archives is one line naming it."""
from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

from carla_wds.pack.errors import PackError   # noqa: E402
from carla_wds.remote import RemoteError   # noqa: E402
from tests.conftest import make_raw   # noqa: E402
from tests.conftest import run_pack_all_frames as run_pack   # noqa: E402
from tests.helpers import shard_hashes   # noqa: E402
from tests.pack.datasets.routes.test_archived_routes import (_routes, label_tree,   # noqa: E402
                                                             write_tar, write_zip)
from tests.s3server import BUCKET, client, env, fresh_prefix   # noqa: E402


@pytest.fixture(autouse=True)
def aws(monkeypatch, s3_endpoint) -> str:
    import s3fs
    for name, value in env(s3_endpoint).items():
        monkeypatch.setenv(name, value)
    s3fs.S3FileSystem.clear_instance_cache()
    yield s3_endpoint
    s3fs.S3FileSystem.clear_instance_cache()


def test_stored_route_archives_pack_like_local_ones(aws, tmp_path):
    raw = make_raw(tmp_path / "raw", "garage", episodes=4, frames=30, seed=9)
    routes = _routes(raw)
    arc = tmp_path / "archives"
    write_tar(arc / "b" / "chunk_001.tar.gz", raw, routes[:2])
    write_zip(arc / "a" / "data" / "Scenario.zip", raw, routes[2:], "Scenario/")
    label_tree(arc / "commentary_chunk_001.tar.gz")
    prefix = fresh_prefix("routes")
    for path in sorted(p for p in arc.rglob("*") if p.is_file()):
        client(aws).put_object(Bucket=BUCKET, Key=f"{prefix}/{path.relative_to(arc).as_posix()}",
                               Body=path.read_bytes())
    url = f"s3://{BUCKET}/{prefix}"
    m_s3 = run_pack(url, tmp_path / "s3", layout="garage", max_samples=5)
    m_local = run_pack(arc, tmp_path / "local", layout="garage", max_samples=5)
    assert shard_hashes(tmp_path / "s3") == shard_hashes(tmp_path / "local")
    assert m_s3["counts"] == m_local["counts"] and m_s3["counts"]["routes"] == 4


def test_a_prefix_without_archives_is_one_line(aws, tmp_path):
    prefix = fresh_prefix("empty")
    url = f"s3://{BUCKET}/{prefix}"
    with pytest.raises(RemoteError, match=f"INPUT_DIR {url}: no such object.*Fix: check"):
        run_pack(url, tmp_path / "out", layout="garage")
    client(aws).put_object(Bucket=BUCKET, Key=f"{prefix}/notes/README.txt", Body=b"no archive")
    with pytest.raises(PackError, match=f"INPUT_DIR {url}: no .tar.gz or .zip archives found "
                                        "under this prefix.*Fix: check the bucket"):
        run_pack(url, tmp_path / "out", layout="garage")
    assert not (tmp_path / "out").exists()
