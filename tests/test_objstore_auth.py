"""Bad credentials against an S3 server that checks them: moto's server in its own process
with request authentication on (INITIAL_NO_AUTH_ACTION_COUNT: the first 3 calls make an IAM
user and its key, every later call is signed and checked). An unknown access key and a wrong
secret each end in an error naming the URL, the cause and the credential fix, for reading a
manifest, loading, and packing to the store, without retrying (a retry cannot mend them)."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

from carla_wds import CARLAWebData   # noqa: E402
from carla_wds.manifest import read_manifest   # noqa: E402
from carla_wds.pack.errors import PackError   # noqa: E402
from carla_wds.remote import RemoteError, RemoteOptions   # noqa: E402

from .helpers import SIZE, make_pack   # noqa: E402

BUCKET = "guarded"
FAST = RemoteOptions(connect_timeout=2, read_timeout=5, retries=2, backoff=0.05)
POLICY = {"Version": "2012-10-17",
          "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    """(endpoint, good storage_options, pack folder, manifest URL) of a server that checks
    every signature."""
    import boto3
    port = _free_port()
    env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "3"}
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                             str(port)], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None, "no moto server"
                time.sleep(0.1)
        iam = boto3.client("iam", endpoint_url=url, region_name="us-east-1",
                           aws_access_key_id="boot", aws_secret_access_key="boot")
        iam.create_user(UserName="loader")
        key = iam.create_access_key(UserName="loader")["AccessKey"]
        iam.put_user_policy(UserName="loader", PolicyName="s3", PolicyDocument=json.dumps(POLICY))
        good = {"key": key["AccessKeyId"], "secret": key["SecretAccessKey"], "endpoint_url": url,
                "client_kwargs": {"region_name": "us-east-1"}}
        s3 = boto3.client("s3", endpoint_url=url, region_name="us-east-1",
                          aws_access_key_id=good["key"], aws_secret_access_key=good["secret"])
        s3.create_bucket(Bucket=BUCKET)
        pack_dir = make_pack(tmp_path_factory.mktemp("guarded"), episodes=1, frames=12,
                             max_samples=4)
        for path in sorted(pack_dir.iterdir()):
            s3.put_object(Bucket=BUCKET, Key=f"pack/{path.name}", Body=path.read_bytes())
        yield url, good, pack_dir, f"s3://{BUCKET}/pack/manifest.json"
    finally:
        proc.terminate()
        proc.wait(10)


def _bad(good: dict, how: str) -> dict:
    if how == "unknown key":
        return {**good, "key": "AKIANOBODY000000000"}
    return {**good, "secret": good["secret"][:-4] + "xxxx"}


def test_good_credentials_load(guarded):
    _, good, pack_dir, url = guarded
    assert read_manifest(url, FAST, storage_options=good).total_samples == \
        read_manifest(pack_dir).total_samples
    n = sum(int(b.valid.sum()) for b in CARLAWebData(url, batch_size=4, image_size=SIZE,
                                                     mode="eval", storage_options=good,
                                                     remote=FAST))
    assert n == read_manifest(pack_dir).total_samples


@pytest.mark.parametrize("how, code", [("unknown key", "InvalidAccessKeyId|Forbidden|403"),
                                       ("wrong secret", "SignatureDoesNotMatch|Forbidden|403")])
def test_bad_credentials_name_the_url_and_the_fix(guarded, how, code, tmp_path):
    endpoint, good, pack_dir, url = guarded
    bad = _bad(good, how)
    with pytest.raises(RemoteError, match=f"manifest {url}: access refused .*({code}).*"
                                          "Fix: check the credentials"):
        read_manifest(url, FAST, storage_options=bad)
    with pytest.raises(RemoteError, match=f"{url}: access refused"):
        CARLAWebData(url, batch_size=4, image_size=SIZE, mode="eval", storage_options=bad,
                     remote=FAST)
    from carla_wds.pack.packer import PackOptions, pack
    out = f"s3://{BUCKET}/out-{how.replace(' ', '-')}"
    with pytest.raises((RemoteError, PackError), match=f"{out}.*access refused.*Fix: check "
                                                       "the credentials"):
        pack(pack_dir.parent / "raw", out, PackOptions(progress=False, storage_options=bad,
                                                       stage=str(tmp_path / "stage"),
                                                       retries=2))
    assert not (tmp_path / "stage").exists() or not any((tmp_path / "stage").iterdir())
