"""`carla-wds pack RAW s3://...`, `merge`, `verify` and `inspect` on a real S3 server (moto's,
on 127.0.0.1, through the real s3fs client), with a real HTTP proxy in front of it where the
test needs to see or disturb the traffic (tests/pack/s3proxy.py). Every object is compared
byte for byte with a local pack. Interrupted packs and --resume: test_pack_s3_resume.py."""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

from carla_wds.manifest_schema import ManifestError   # noqa: E402
from carla_wds.pack.audit import merge, summary, verify   # noqa: E402
from carla_wds.pack.routes import PackError   # noqa: E402
from carla_wds.remote import RemoteError, RemoteOptions   # noqa: E402

from ..helpers import SIZE   # noqa: E402
from ..s3server import BUCKET, FAST, client, env, fresh_prefix, options   # noqa: E402
from .s3pack import JOURNAL, files_of, objects, proxy, s3_pack   # noqa: E402,F401
from .s3proxy import Rule   # noqa: E402


def test_pack_to_s3_equals_a_local_pack_and_loads(raw_tcp, packed_tcp, s3_endpoint, tmp_path):
    from carla_wds import CARLAWebData
    prefix, stage = fresh_prefix(), tmp_path / "stage"
    manifest = s3_pack(raw_tcp, s3_endpoint, prefix, stage)
    assert objects(s3_endpoint, prefix) == files_of(packed_tcp)   # manifest.json included
    assert len(manifest["shards"]) == 12 and not stage.exists()   # nothing staged is left
    url = f"s3://{BUCKET}/{prefix}/manifest.json"

    def batches(source, **kw):
        return list(CARLAWebData(source, batch_size=5, image_size=SIZE, mode="eval", **kw))
    got, want = batches(url, storage_options=options(s3_endpoint), remote=FAST), \
        batches(str(packed_tcp))
    assert [b.keys for b in got] == [b.keys for b in want] and len(got) == 16
    for a, b in zip(got, want):
        assert (a.images == b.images).all() and (a.waypoints == b.waypoints).all()


@pytest.fixture
def s3_env(s3_endpoint, monkeypatch, tmp_path):
    """The AWS environment of the test server, for the CLI in this process."""
    for name, value in env(s3_endpoint).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return s3_endpoint


def test_verify_and_inspect_on_s3(raw_tcp, packed_tcp, s3_env, tmp_path, cli):
    prefix = fresh_prefix()
    s3_pack(raw_tcp, s3_env, prefix, tmp_path / "stage")
    url = f"s3://{BUCKET}/{prefix}"
    for source in (url, url + "/", url + "/manifest.json"):
        for deep in ([], ["--deep"]):
            result = cli("verify", source, *deep)
            assert result.exit_code == 0 and f"OK {source}" in result.output, result.output
    inspected = cli("inspect", url, "--json", "--read-timeout", "10", "--retries", "1")
    assert inspected.exit_code == 0, inspected.output
    assert json.loads(inspected.output) == summary(packed_tcp) == summary(url)
    assert "78 samples in 12 shards" in cli("inspect", url).output

    s3 = client(s3_env)
    body = bytearray(s3.get_object(Bucket=BUCKET, Key=f"{prefix}/shard-000004.tar")["Body"].read())
    body[len(body) // 2] ^= 1                          # same size, other bytes
    s3.put_object(Bucket=BUCKET, Key=f"{prefix}/shard-000004.tar", Body=bytes(body))
    s3.delete_object(Bucket=BUCKET, Key=f"{prefix}/shard-000007.tar")
    s3.put_object(Bucket=BUCKET, Key=f"{prefix}/shard-000012.tar", Body=b"stray")
    result = cli("verify", url)
    assert result.exit_code != 0
    fails = [line for line in result.output.splitlines() if line.startswith("FAIL")]
    assert any(f"{url}/shard-000004.tar" in f and "sha256" in f for f in fails), fails
    assert any(f"{url}/shard-000007.tar" in f and "no such object" in f for f in fails), fails
    assert any(f"{url}/shard-000012.tar: in the store but not in the manifest" in f
               for f in fails), fails
    assert len(fails) == 4, fails   # the 3 above, and the total that the lost shard breaks
    assert sorted(verify(url, progress=False)) == sorted(f[len("FAIL "):] for f in fails)


@pytest.fixture(scope="module")
def one_route(zoo) -> tuple[Path, Path]:
    """(raw, its local pack): the zoo's one route of 30 frames, 26 samples in 4 shards of 7
    (shared, read-only), for the tests whose point is not the size of the pack."""
    pack = zoo(episodes=1, frames=30, max_samples=7)
    return pack.parent / "raw", pack


SDK_CHECKSUMS_OFF = {"config_kwargs": {"request_checksum_calculation": "when_required",
                                       "response_checksum_validation": "when_required"}}


@pytest.mark.parametrize("sdk", ["crc32", "off"])
def test_a_corrupted_upload_is_detected(one_route, proxy, tmp_path, sdk):
    """The proxy flips a byte of shard 2's body on its way to the store. With the SDK's own
    CRC32 on (botocore's default), reading the object back fails its CRC32; with it off (as
    for stores that refuse it), the read-back sha256 differs. Either way the upload is
    retried, and a corruption that persists stops the pack with an error naming the URL."""
    raw_tcp, packed_tcp = one_route
    extra = SDK_CHECKSUMS_OFF if sdk == "off" else {}
    prefix, stage = fresh_prefix(), tmp_path / "stage"
    proxy.rule = Rule("/shard-000002.tar", "corrupt", times=99)
    url = f"s3://{BUCKET}/{prefix}/shard-000002.tar"
    why = "did not match calculated checksum" if sdk == "crc32" else "hash to sha256"
    from carla_wds.pack import PackOptions, pack
    opts = PackOptions(max_samples=7, progress=False, stage=str(stage),
                       storage_options={**options(proxy.endpoint), **extra})
    with pytest.raises(PackError, match=f"{url}: .*{why}.*tried 4 times.*--resume"):
        pack(raw_tcp, f"s3://{BUCKET}/{prefix}", opts)
    assert sorted(objects(proxy.upstream, prefix)) == [JOURNAL, "shard-000000.tar",
                                                       "shard-000001.tar"]
    assert [s.path.endswith("/shard-000002.tar") for s in proxy.puts()].count(True) == 4

    proxy.rule.times = 1   # once more, then the proxy lets it through: the retry mends it
    pack(raw_tcp, f"s3://{BUCKET}/{prefix}", PackOptions(**{**opts.__dict__, "resume": True}))
    assert objects(proxy.upstream, prefix) == files_of(packed_tcp)


def test_overwrite_replaces_every_object(one_route, s3_env, tmp_path, cli):
    raw_tcp, packed_tcp = one_route
    url = f"s3://{BUCKET}/{fresh_prefix()}"
    assert cli("pack", raw_tcp, url, "--max-samples", "3").exit_code == 0   # 9 shards
    result = cli("pack", raw_tcp, url, "--max-samples", "7", "--overwrite")    # 4 shards
    assert result.exit_code == 0, result.output
    assert objects(s3_env, url[len(f"s3://{BUCKET}/"):]) == files_of(packed_tcp)
    _no_stage_made(tmp_path / "cache")


def test_a_failure_before_the_first_upload_leaves_nothing(raw_tcp, proxy, tmp_path,
                                                          monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    prefix = fresh_prefix()
    proxy.rule = Rule("/shard-000000.tar", "corrupt", times=99)
    from carla_wds.pack import PackOptions, pack
    with pytest.raises(PackError, match="shard-000000.tar: .*tried 4 times"):
        pack(raw_tcp, f"s3://{BUCKET}/{prefix}", PackOptions(
            max_samples=7, progress=False, storage_options=options(proxy.endpoint)))
    assert objects(proxy.upstream, prefix) == {}
    _no_stage_made(tmp_path / "cache")


def test_cli_pack_parts_merge_verify_on_s3(raw_tcp, local_parts, s3_env, tmp_path, cli):
    root = f"s3://{BUCKET}/{fresh_prefix('run')}"
    for i in range(2):
        result = cli("pack", raw_tcp, f"{root}/part{i}", "--max-samples", "7", "--part",
                     f"{i}/2")
        assert result.exit_code == 0, result.output
    result = cli("merge", f"{root}/part0", f"{root}/part1", "--out", f"{root}/all")
    assert result.exit_code == 0 and "12 shards" in result.output, result.output
    merge(local_parts, tmp_path / "merged")
    merged_equal(objects(s3_env, f"{root[len(f's3://{BUCKET}/'):]}/all"),
                 files_of(tmp_path / "merged"))
    assert cli("verify", f"{root}/all", "--deep").exit_code == 0
    result = cli("merge", f"{root}/part0", f"{root}/part1", "--out", f"{root}/all")
    assert result.exit_code != 0 and f"{root}/all is not empty" in result.output


def _no_stage_made(home: Path) -> None:
    assert not home.exists(), list(home.rglob("*"))


def test_refusals_leave_nothing_behind(raw_tcp, s3_env, tmp_path, cli, monkeypatch):
    home = tmp_path / "cache"   # XDG_CACHE_HOME of s3_env: the default staging folder's root
    prefix = fresh_prefix()
    url = f"s3://{BUCKET}/{prefix}"
    assert cli("pack", raw_tcp, url, "--max-samples", "7").exit_code == 0
    before = objects(s3_env, prefix)
    for args, says in ((["--max-samples", "7"], "already holds 13 object(s)"),
                       (["--max-samples", "7", "--resume"], "finished pack"),
                       (["--max-samples", "0"], "--max-samples")):
        result = cli("pack", raw_tcp, url, *args)
        assert result.exit_code != 0 and says in result.output and "Fix:" in result.output
        assert objects(s3_env, prefix) == before
        _no_stage_made(home)
    result = cli("pack", raw_tcp, "s3://no-such-bucket/x", "--max-samples", "7")
    assert result.exit_code != 0 and "s3://no-such-bucket/x: no such bucket" in result.output
    assert "create it" in result.output
    _no_stage_made(home)

    for name in [n for n in os.environ if n.startswith("AWS_") and n != "AWS_ENDPOINT_URL"]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    from carla_wds.pack import PackOptions, pack
    with pytest.raises(RemoteError, match=f"s3://{BUCKET}/new: access refused.*Fix: check "
                                          "the credentials"):
        pack(raw_tcp, f"s3://{BUCKET}/new", PackOptions(max_samples=7, progress=False,
             storage_options={"endpoint_url": s3_env, "skip_instance_cache": True}))
    _no_stage_made(home)
    assert objects(s3_env, "new") == {}


@pytest.fixture(scope="module")
def local_parts(tmp_path_factory, raw_tcp, packer) -> list[Path]:
    root = tmp_path_factory.mktemp("parts")
    for i in range(2):
        packer(raw_tcp, root / f"part{i}", max_samples=7, part=(i, 2))
    return [root / "part0", root / "part1"]


def merged_equal(got: dict[str, bytes], want: dict[str, bytes]) -> None:
    """Every shard byte for byte; the manifests equal but for where the parts were."""
    assert sorted(got) == sorted(want)
    for name in want:
        if name != "manifest.json":
            assert got[name] == want[name], name
    a, b = (json.loads(x["manifest.json"]) for x in (got, want))
    assert len(a.pop("merged_from")) == len(b.pop("merged_from")) == 2 and a == b


def test_merge_of_s3_parts(raw_tcp, local_parts, proxy, tmp_path):
    s3 = proxy.upstream
    parts = []
    for i in range(2):
        prefix = fresh_prefix(f"part{i}")
        s3_pack(raw_tcp, s3, prefix, tmp_path / f"stage{i}", part=(i, 2))
        assert objects(s3, prefix) == files_of(local_parts[i])
        parts.append(f"s3://{BUCKET}/{prefix}")
    reference = tmp_path / "merged"
    merge(local_parts, reference)
    want = files_of(reference)
    remote = RemoteOptions(storage_options=options(proxy.endpoint))

    out = fresh_prefix("merged")
    merge(parts, f"s3://{BUCKET}/{out}", remote=remote)          # s3 parts -> s3
    merged_equal(objects(s3, out), want)
    shard_puts = [s for s in proxy.puts() if s.path.endswith(".tar")]
    assert len(shard_puts) == len(want) - 1   # one request per shard: a server-side copy
    assert all("x-amz-copy-source" in {k.lower() for k in s.headers} and s.body_bytes == 0
               for s in shard_puts)
    assert verify(f"s3://{BUCKET}/{out}", progress=False, remote=remote) == []

    merge(parts, tmp_path / "from_s3", remote=remote)            # s3 parts -> local
    merged_equal(files_of(tmp_path / "from_s3"), want)
    out2 = fresh_prefix("merged")
    merge(local_parts, f"s3://{BUCKET}/{out2}", remote=remote)   # local parts -> s3
    merged_equal(objects(s3, out2), want)


def test_merge_refuses_a_damaged_s3_part_and_leaves_nothing(raw_tcp, local_parts, s3_endpoint,
                                                          tmp_path):
    parts = []
    for i in range(2):
        prefix = fresh_prefix(f"part{i}")
        s3_pack(raw_tcp, s3_endpoint, prefix, tmp_path / f"stage{i}", part=(i, 2))
        parts.append(prefix)
    key = f"{parts[1]}/shard-000001.tar"
    s3 = client(s3_endpoint)
    body = bytearray(s3.get_object(Bucket=BUCKET, Key=key)["Body"].read())
    body[1000] ^= 0xFF
    s3.put_object(Bucket=BUCKET, Key=key, Body=bytes(body))
    remote = RemoteOptions(storage_options=options(s3_endpoint), retries=1, backoff=0.05)
    urls = [f"s3://{BUCKET}/{p}" for p in parts]
    out = fresh_prefix("merged")
    with pytest.raises(ManifestError, match=f"part {urls[1]}/manifest.json: shard "
                                            f"{urls[1]}/shard-000001.tar did not land"):
        merge(urls, f"s3://{BUCKET}/{out}", remote=remote)
    assert objects(s3_endpoint, out) == {}
    with pytest.raises(ManifestError, match="shard-000001.tar could not be fetched"):
        merge(urls, tmp_path / "local", remote=remote)
    assert not (tmp_path / "local").exists()
    with pytest.raises(FileExistsError, match="not empty"):
        merge(urls, urls[0], remote=remote)


@pytest.mark.parametrize("flag", ["overwrite", "resume", None])
def test_a_stage_folder_with_the_users_files_is_refused_untouched(raw_tcp, s3_endpoint,
                                                                  tmp_path, flag):
    """--overwrite and --resume clear what a pack staged; a --stage folder holding anything
    else (a user's own files) is refused before any of it is touched."""
    stage = tmp_path / "scratch"
    (stage / "precious").mkdir(parents=True)
    files = {stage / "precious" / "thesis.txt": b"years", stage / "notes.txt": b"notes",
             stage / "draft.tmp": b"draft", stage / ".other-000000.tar.tmp": b"x"}
    for path, body in files.items():
        path.write_bytes(body)
    prefix = fresh_prefix()
    with pytest.raises(PackError, match=f"staging folder {stage} holds .* entries a pack did "
                                        "not write.*Fix: pass an empty --stage"):
        s3_pack(raw_tcp, s3_endpoint, prefix, stage, **({flag: True} if flag else {}))
    assert all(path.read_bytes() == body for path, body in files.items())
    assert not objects(s3_endpoint, prefix)


def test_a_large_shard_goes_up_in_parts_and_unfinished_uploads_are_aborted(
        raw_tcp, s3_endpoint, tmp_path):
    """A shard over s3fs's multipart threshold (100 MiB) lands whole and checked; the parts of
    an upload a kill left unfinished (unlisted, but kept by the store) are aborted by the
    next --overwrite or --resume of that prefix, and no one else's."""
    from carla_wds.objwrite import StoreWriter
    prefix = fresh_prefix()
    big = tmp_path / "big.tar"
    body = os.urandom(1 << 20) * 101
    big.write_bytes(body)
    writer = StoreWriter(f"s3://{BUCKET}/{prefix}", RemoteOptions(storage_options=options(
        s3_endpoint)))
    writer.put_file(big, "shard-000000.tar", len(body), hashlib.sha256(body).hexdigest())
    assert objects(s3_endpoint, prefix)["shard-000000.tar"] == body
    s3 = client(s3_endpoint)
    other = fresh_prefix()
    for where in (prefix, other):   # a killed upload here, and another pack's in progress
        up = s3.create_multipart_upload(Bucket=BUCKET, Key=f"{where}/shard-000001.tar")
        s3.upload_part(Bucket=BUCKET, Key=f"{where}/shard-000001.tar", PartNumber=1,
                       UploadId=up["UploadId"], Body=b"x" * 1024)

    def unfinished(where: str) -> int:
        return len(s3.list_multipart_uploads(Bucket=BUCKET, Prefix=where + "/").get(
            "Uploads", []))
    assert unfinished(prefix) == unfinished(other) == 1
    s3_pack(raw_tcp, s3_endpoint, prefix, tmp_path / "stage", overwrite=True)
    assert unfinished(prefix) == 0 and unfinished(other) == 1
