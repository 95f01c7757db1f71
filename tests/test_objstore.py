"""Shards and manifests on a real S3 server: moto's ThreadedMotoServer on 127.0.0.1, reached
through the real s3fs client (endpoint_url, dummy credentials). Loading from s3:// gives the
batches of the local folder, with and without a cache; a missing object, an overwritten one
and a shard name that leaves the prefix are refused with errors naming the URL."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

pytest.importorskip("s3fs")
pytest.importorskip("boto3")
pytest.importorskip("moto.server")

from carla_wds import CARLAWebData   # noqa: E402
from carla_wds.manifest import ManifestError, read_manifest   # noqa: E402
from carla_wds.remote import RemoteError, RemoteOptions   # noqa: E402
from carla_wds.tario import ShardError   # noqa: E402

from .helpers import SIZE   # noqa: E402
from .s3server import BUCKET, CREDS, FAST, client, options, upload   # noqa: E402


@pytest.fixture
def endpoint(s3_endpoint) -> str:
    return s3_endpoint


@pytest.fixture(scope="module")
def pristine(zoo) -> Path:
    return zoo(episodes=2, frames=16, max_samples=6)   # shared, read-only (conftest.zoo)


def batches(source: str, **kw) -> list:
    kw = {"batch_size": 4, "image_size": SIZE, "num_workers": 0, "mode": "eval", **kw}
    return list(CARLAWebData(source, **kw))


def assert_same(a: list, b: list) -> None:
    assert len(a) == len(b) > 0
    for x, y in zip(a, b):
        assert x.keys == y.keys
        assert torch.equal(x.images, y.images) and torch.equal(x.waypoints, y.waypoints)
        assert torch.equal(x.speed, y.speed) and torch.equal(x.command, y.command)


@pytest.mark.parametrize("workers", [0, 2])
def test_s3_batches_equal_local(pristine, endpoint, tmp_path, workers):
    url = upload(endpoint, pristine)
    local = batches(str(pristine), num_workers=workers)
    opts = options(endpoint)
    assert_same(batches(url, num_workers=workers, storage_options=opts, remote=FAST), local)
    cache = tmp_path / "cache"
    inodes = []
    for _ in range(2):   # a cold cache, then a warm one
        assert_same(batches(url, num_workers=workers, storage_options=opts, remote=FAST,
                            cache_dir=str(cache)), local)
        inodes.append({p.name: p.stat().st_ino for p in cache.iterdir()})
    names = json.loads((pristine / "manifest.json").read_text())["shards"]
    assert len(inodes[0]) == len(names)   # only checked shards, no temporary files
    assert inodes[1] == inodes[0]   # the warm pass read the cached files: nothing re-fetched


def test_credentials_from_the_aws_environment(pristine, endpoint, monkeypatch):
    url = upload(endpoint, pristine)
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_ENDPOINT_URL": endpoint, "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    assert_same(batches(url, remote=FAST), batches(str(pristine)))
    assert read_manifest(url, FAST).total_samples == len(
        [k for b in batches(str(pristine)) for k, v in zip(b.keys, b.valid) if v])


def test_deleted_object_names_the_url(pristine, endpoint):
    url = upload(endpoint, pristine)
    shard = url.rsplit("/", 1)[0] + "/shard-000001.tar"
    client(endpoint).delete_object(Bucket=BUCKET, Key=shard[len(f"s3://{BUCKET}/"):])
    with pytest.raises(ShardError, match=f"{shard}: no such object.*Fix: check the bucket"):
        batches(url, storage_options=options(endpoint), remote=FAST)
    missing = url.replace("manifest.json", "nothing/manifest.json")
    with pytest.raises(RemoteError, match=f"manifest {missing}: no such object"):
        read_manifest(missing, FAST, storage_options=options(endpoint))


@pytest.mark.parametrize("how", ["stream", "verify", "cache"])
def test_overwritten_object_fails_the_sha256(pristine, endpoint, tmp_path, how):
    url = upload(endpoint, pristine)
    key = url[len(f"s3://{BUCKET}/"):].replace("manifest.json", "shard-000001.tar")
    body = bytearray((pristine / "shard-000001.tar").read_bytes())
    body[-1] ^= 0xFF   # in the end padding: same size, every sample intact, other bytes
    client(endpoint).put_object(Bucket=BUCKET, Key=key, Body=bytes(body))
    kw = {"storage_options": options(endpoint), "remote": FAST}
    if how == "verify":
        kw["verify"] = True
    if how == "cache":
        kw["cache_dir"] = str(tmp_path / "cache")
    with pytest.raises((RemoteError, ShardError), match="sha256 .* differs from the manifest"):
        batches(url, **kw)
    if how == "cache":   # nothing unchecked was kept
        assert not [n for n in os.listdir(tmp_path / "cache") if "000001" in n]


def test_other_size_is_refused_before_reading(pristine, endpoint):
    url = upload(endpoint, pristine)
    key = url[len(f"s3://{BUCKET}/"):].replace("manifest.json", "shard-000000.tar")
    client(endpoint).put_object(Bucket=BUCKET, Key=key, Body=b"x" * 10)
    with pytest.raises(ShardError, match="shard-000000.tar: the store holds 10 bytes"):
        batches(url, storage_options=options(endpoint), remote=FAST)


@pytest.mark.parametrize("name", ["../other/shard-000000.tar", "/abs/shard.tar",
                                  "s3://elsewhere/shard.tar", "pipe:cat x"])
def test_shard_name_leaving_the_prefix_is_refused(pristine, endpoint, tmp_path, name):
    doc = json.loads((pristine / "manifest.json").read_text())
    doc["shards"][0]["name"] = name
    (tmp_path / "manifest.json").write_text(json.dumps(doc))
    url = upload(endpoint, tmp_path)
    with pytest.raises(ManifestError, match="refused"):
        batches(url, storage_options=options(endpoint), remote=FAST)


def test_unreachable_endpoint_is_a_bounded_error(pristine):
    # a port nobody listens on: connection refused, retried once, then an error naming it
    opts = {**CREDS, "endpoint_url": "http://127.0.0.1:9"}
    with pytest.raises(RemoteError, match=r"manifest s3://carla/x/manifest.json: .*tried 2 "
                                          r"times.*Fix: check the endpoint"):
        read_manifest("s3://carla/x/manifest.json", FAST, storage_options=opts)


def test_missing_credentials_name_the_fix(pristine, endpoint, monkeypatch, tmp_path):
    url = upload(endpoint, pristine)
    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")   # no instance-metadata wait
    with pytest.raises(RemoteError, match=f"manifest {url}: access refused "
                                          r"\(NoCredentialsError.*Fix: check the credentials"):
        read_manifest(url, FAST, storage_options={"endpoint_url": endpoint})


def test_stalled_endpoint_is_a_bounded_error():
    # accepts connections and never answers: each attempt ends at the read timeout
    import socket
    import threading
    import time
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    held, stop = [], threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                pass
    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    opts = {**CREDS, "endpoint_url": f"http://127.0.0.1:{listener.getsockname()[1]}"}
    start = time.monotonic()
    try:
        with pytest.raises(RemoteError, match=r"stalled/manifest.json: ReadTimeoutError.*tried 2 times"):
            read_manifest("s3://carla/stalled/manifest.json",
                          RemoteOptions(connect_timeout=1, read_timeout=1, retries=1,
                                        backoff=0.05), storage_options=opts)
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        listener.close()
    assert time.monotonic() - start < 20


@pytest.mark.parametrize("tail", ["", "/"])
def test_a_prefix_stands_for_its_manifest(pristine, endpoint, tail):
    url = upload(endpoint, pristine)
    prefix = url[:-len("/manifest.json")] + tail
    kw = {"storage_options": options(endpoint), "remote": FAST}
    assert read_manifest(prefix, FAST, storage_options=options(endpoint)).where == url
    assert_same(batches(prefix, **kw), batches(str(pristine)))
