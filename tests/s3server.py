"""A real S3 endpoint for tests: moto's ThreadedMotoServer on 127.0.0.1, reached through the
real s3fs/boto3 clients with endpoint_url and dummy credentials. No outside service is needed.

Use the session fixture `s3_endpoint` (conftest.py): its URL, with bucket BUCKET created.
Subprocesses (torchrun, the CLI) reach it through `env(endpoint)`, the standard AWS variables.
"""
from __future__ import annotations

import uuid
from pathlib import Path

from carla_wds.remote import RemoteOptions

BUCKET = "carla"
CREDS = {"key": "testing", "secret": "testing"}
# short timeouts and one retry: a failing test ends in seconds, not minutes
FAST = RemoteOptions(connect_timeout=2, read_timeout=5, retries=1, backoff=0.05)


def start():
    """(server, endpoint URL) of a fresh server with BUCKET; call server.stop() when done."""
    from moto.server import ThreadedMotoServer
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    url = f"http://127.0.0.1:{server._server.server_port}"
    client(url).create_bucket(Bucket=BUCKET)
    return server, url


def client(url: str):
    """A boto3 client of the server, for arranging and inspecting objects behind the code's back."""
    import boto3
    from botocore.config import Config
    return boto3.client("s3", endpoint_url=url, region_name="us-east-1",
                        aws_access_key_id="testing", aws_secret_access_key="testing",
                        config=Config(connect_timeout=2, read_timeout=5))


def options(url: str) -> dict:
    """storage_options for s3fs that reach the server."""
    return {**CREDS, "endpoint_url": url, "client_kwargs": {"region_name": "us-east-1"}}


def env(url: str) -> dict[str, str]:
    """The AWS environment under which a subprocess's s3fs reaches the server."""
    return {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_ENDPOINT_URL": url, "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true"}


def fresh_prefix(name: str = "shards") -> str:
    """A prefix no other test uses: runs/<random>/<name>."""
    return f"runs/{uuid.uuid4().hex[:8]}/{name}"


def upload(endpoint: str, pack_dir: Path) -> str:
    """Every file of pack_dir under a fresh prefix; the s3:// URL of its manifest.json."""
    prefix = fresh_prefix()
    s3 = client(endpoint)
    for path in sorted(pack_dir.iterdir()):
        s3.put_object(Bucket=BUCKET, Key=f"{prefix}/{path.name}", Body=path.read_bytes())
    return f"s3://{BUCKET}/{prefix}/manifest.json"


def keys(endpoint: str, prefix: str) -> dict[str, bytes]:
    """key -> bytes of every object under prefix."""
    s3 = client(endpoint)
    out = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
        for obj in page.get("Contents", []):
            out[obj["Key"]] = s3.get_object(Bucket=BUCKET, Key=obj["Key"])["Body"].read()
    return out
