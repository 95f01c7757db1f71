"""--layout bench2drive with INPUT_DIR an s3:// prefix of the .tar.gz clips, on a real S3 server
(moto's ThreadedMotoServer on 127.0.0.1) through the real s3fs client, credentials and endpoint
from the AWS environment as the CLI has them. The same archives give the same shards and
manifest from the store as from a local folder (and as the extracted folders), also with the
output on the store, through the CLI, in parts and with worker processes; a truncated
object is the same skip or error as locally, naming its URL; listing and reading failures
(missing bucket or prefix, no archives, extracted folders, no credentials, a store that stalls
mid-archive) end in errors naming the URL and the fix, and leave no output behind."""
from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

from carla_wds import objstore   # noqa: E402
from carla_wds.pack.datasets.bench2drive.plan import B2DSettings, plan_clip   # noqa: E402
from carla_wds.pack.datasets.bench2drive.clips import ArchiveClip, ClipRef, find_clips   # noqa: E402
from carla_wds.pack.errors import PackError   # noqa: E402
from tests.helpers import shared_raw   # noqa: E402
from carla_wds.pack.synth.bench2drive import SPLIT_FILE, clip_name   # noqa: E402
from carla_wds.remote import RemoteError, RemoteOptions   # noqa: E402
from tests.conftest import read_pack   # noqa: E402
# every keyframe with a full future, so the short clips fill several shards
from tests.conftest import run_pack_all_frames as run_pack   # noqa: E402
from tests.pack.stallproxy import StallingProxy   # noqa: E402
from tests.s3server import BUCKET, client, env, fresh_prefix, keys, options   # noqa: E402

EPISODES = 3
# clips under sub-prefixes in an order other than their names': the listing is recursive and
# the clips are packed sorted by name, as from a local folder
SUBDIRS = ("z/deep", "a", "m")


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> Path:
    # the same clips as test_layout_bench2drive_faults's: written once a session (read only)
    return shared_raw(tmp_path_factory, "bench2drive", episodes=EPISODES, frames=30, seed=5,
                      image_size=(54, 96))


@pytest.fixture(autouse=True)
def aws(monkeypatch, s3_endpoint) -> str:
    """The AWS environment of a user of the CLI; fsspec's cached filesystems are dropped, so
    each test's environment is the one its filesystems are made under."""
    import s3fs
    for name, value in env(s3_endpoint).items():
        monkeypatch.setenv(name, value)
    s3fs.S3FileSystem.clear_instance_cache()
    yield s3_endpoint
    s3fs.S3FileSystem.clear_instance_cache()


def put(endpoint: str, key: str, body: bytes) -> str:
    client(endpoint).put_object(Bucket=BUCKET, Key=key, Body=body)
    return f"s3://{BUCKET}/{key}"


def upload_archives(endpoint: str, archives: Path) -> str:
    """Every archive of a folder under a fresh prefix, spread over SUBDIRS; the prefix URL."""
    prefix = fresh_prefix("b2d")
    for i, path in enumerate(sorted(archives.iterdir())):
        put(endpoint, f"{prefix}/{SUBDIRS[i % len(SUBDIRS)]}/{path.name}", path.read_bytes())
    return f"s3://{BUCKET}/{prefix}"


def same_pack(a: Path, b: Path, split: tuple[str, str] | None = None) -> dict:
    """Equal manifests and byte-identical shards; the manifest. `split`: the two packs' split
    files, which their manifests' pack_args name (and nothing else may differ)."""
    ma, mb = (json.loads((p / "manifest.json").read_text()) for p in (a, b))
    if split:
        assert (ma["pack_args"]["split"], mb["pack_args"]["split"]) == split
        mb["pack_args"]["split"] = split[0]
    assert ma == mb and ma["total_samples"] > 0
    for shard in ma["shards"]:
        assert (a / shard["name"]).read_bytes() == (b / shard["name"]).read_bytes()
    return ma


def test_s3_archives_pack_like_local_archives_and_folders(raw, aws, tmp_path):
    url = upload_archives(aws, raw / "archives")
    refs = find_clips(url)
    assert [r.name for r in refs] == [clip_name(i) for i in range(EPISODES)]
    assert all(str(r.path).startswith(url + "/") and r.stored for r in refs)
    kw = {"layout": "bench2drive", "max_samples": 3,
          "sensors": ("lidar", "boxes", "expert", "radar", "depth", "semantic", "instance")}
    run_pack(url + "/", tmp_path / "s3", **kw)
    run_pack(raw / "archives", tmp_path / "local", **kw)
    run_pack(raw / "v1", tmp_path / "folders", **kw)
    m = same_pack(tmp_path / "s3", tmp_path / "local")
    same_pack(tmp_path / "s3", tmp_path / "folders")
    keys = list(read_pack(tmp_path / "s3"))
    assert len(keys) == len(set(keys)) == m["total_samples"]
    assert {k.rsplit("__", 1)[0] for k in keys} == {clip_name(i) for i in range(EPISODES)}


def test_library_credentials_from_storage_options(raw, aws, tmp_path, monkeypatch):
    """A library user without the AWS environment passes the endpoint and keys in
    PackOptions.storage_options; they reach the listing, the split file and every archive."""
    url = upload_archives(aws, raw / "archives")
    split = put(aws, f"{fresh_prefix('split')}/split.json", (raw / SPLIT_FILE).read_bytes())
    for name in list(env(aws)):
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    import s3fs
    s3fs.S3FileSystem.clear_instance_cache()
    kw = {"layout": "bench2drive", "max_samples": 3, "split": split, "subset": "all"}
    run_pack(url, tmp_path / "s3", storage_options=options(aws), **kw)
    run_pack(raw / "archives", tmp_path / "local", **{**kw, "split": None})
    ma, mb = (json.loads((tmp_path / p / "manifest.json").read_text()) for p in ("s3", "local"))
    assert ma["pack_args"]["split"] == split
    ma["pack_args"]["split"] = None
    assert ma == mb and ma["total_samples"] > 0
    with pytest.raises((PackError, RemoteError), match=url):   # no credentials at all
        run_pack(url, tmp_path / "bare", **kw)
    assert not (tmp_path / "bare").exists()


def test_parts_from_s3_through_the_cli(raw, aws, tmp_path, cli):
    url = upload_archives(aws, raw / "archives")
    whole = run_pack(raw / "archives", tmp_path / "whole", layout="bench2drive", max_samples=2)
    for i in range(2):
        # --check-images decodes every JPEG, so the frames go to 2 worker processes
        result = cli("pack", url, tmp_path / f"p{i}", "--layout", "bench2drive",
                     "--max-samples", "2", "--part", f"{i}/2", "--no-fsync", "--workers", "2",
                     "--check-images", "--all-frames")
        assert result.exit_code == 0, result.output
        run_pack(raw / "archives", tmp_path / f"local{i}", layout="bench2drive", max_samples=2,
                 part=(i, 2), check_images=True)
        same_pack(tmp_path / f"p{i}", tmp_path / f"local{i}")
    parts = [read_pack(tmp_path / f"p{i}") for i in range(2)]
    assert not set(parts[0]) & set(parts[1])
    assert {**parts[0], **parts[1]} == read_pack(tmp_path / "whole")
    assert len(parts[0]) + len(parts[1]) == whole["total_samples"]


def test_from_s3_archives_to_an_s3_prefix(raw, aws, tmp_path, cli, monkeypatch):
    """Both ends on the store (the packer's s3:// output, upload.py): the same objects as the
    files of a local pack of the local archives."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))   # the default staging
    url, out = upload_archives(aws, raw / "archives"), fresh_prefix("out")
    result = cli("pack", url, f"s3://{BUCKET}/{out}", "--layout", "bench2drive",
                 "--max-samples", "3", "--all-frames")
    assert result.exit_code == 0, result.output
    run_pack(raw / "archives", tmp_path / "local", layout="bench2drive", max_samples=3)
    local = {p.name: p.read_bytes() for p in (tmp_path / "local").iterdir()}
    assert {k.rsplit("/", 1)[-1]: v for k, v in keys(aws, out).items()} == local
    assert len(local) > 2 and "manifest.json" in local


def test_a_truncated_archive_object(raw, aws, tmp_path):
    local = tmp_path / "archives"
    local.mkdir()
    for path in sorted((raw / "archives").iterdir()):
        data = path.read_bytes()
        (local / path.name).write_bytes(data[:len(data) // 2] if clip_name(1) in path.name
                                        else data)
    url = upload_archives(aws, local)
    bad = [str(r.path) for r in find_clips(url) if r.name == clip_name(1)]
    with pytest.raises(PackError) as err:
        run_pack(url, tmp_path / "fail", layout="bench2drive")
    assert not (tmp_path / "fail").exists()
    msg = str(err.value)
    assert bad[0] in msg and "truncated or corrupt archive" in msg and "Fix: re-download" in msg
    m = run_pack(url, tmp_path / "skip", layout="bench2drive", on_error="skip")
    run_pack(local, tmp_path / "skip_local", layout="bench2drive", on_error="skip")
    assert same_pack(tmp_path / "skip", tmp_path / "skip_local") == m
    assert [f["episode"] for f in m["filtered_routes"]] == [clip_name(1)]


def _folders_only(endpoint: str, raw: Path) -> str:
    prefix = fresh_prefix("folders")
    clip = raw / "v1" / clip_name(0)
    for path in sorted(clip.rglob("*.json.gz"))[:3]:
        put(endpoint, f"{prefix}/v1/{clip.name}/{path.relative_to(clip).as_posix()}",
            path.read_bytes())
    return f"s3://{BUCKET}/{prefix}"


def _bad_inputs(endpoint: str, raw: Path) -> dict[str, tuple[str, type, str]]:
    """what -> (INPUT_DIR, error type, message pattern)."""
    readme = fresh_prefix("readme")
    put(endpoint, f"{readme}/README.txt", b"no archives here")
    one = put(endpoint, f"{fresh_prefix('one')}/{clip_name(0)}.tar.gz",
              (raw / "archives" / f"{clip_name(0)}.tar.gz").read_bytes())
    return {
        "missing bucket": ("s3://no-such-bucket/b2d", RemoteError,
                           r"INPUT_DIR s3://no-such-bucket/b2d: no such object \(or bucket\)"
                           r".*Fix: check the bucket and prefix"),
        "missing prefix": (f"s3://{BUCKET}/{fresh_prefix('gone')}", RemoteError,
                           r"no such object \(or bucket\).*Fix: check the bucket and prefix"),
        "no archives": (f"s3://{BUCKET}/{readme}", PackError,
                        r"no clip \.tar\.gz archives found.*Fix: check the bucket and prefix"),
        "extracted folders": (_folders_only(endpoint, raw), PackError,
                              r"holds extracted clip folders .*/anno/\).*Fix: upload the clip "
                              r"archives .* or download the folders"),
        "one object": (one, PackError, r"is one object; expected the prefix.*Fix: pass that "
                       f"prefix, e.g. {one.rsplit('/', 1)[0]}/$"),
    }


@pytest.mark.parametrize("what", ["missing bucket", "missing prefix", "no archives",
                                  "extracted folders", "one object"])
def test_bad_prefixes_name_the_url_and_the_fix(raw, aws, tmp_path, cli, what):
    url, kind, pattern = _bad_inputs(aws, raw)[what]
    with pytest.raises(kind, match=pattern) as err:
        run_pack(url, tmp_path / "out", layout="bench2drive")
    assert url in str(err.value)
    assert not (tmp_path / "out").exists()
    result = cli("pack", url, tmp_path / "cli", "--layout", "bench2drive")
    assert result.exit_code == 1 and url in result.output and "Fix:" in result.output
    assert not (tmp_path / "cli").exists()


def test_missing_credentials_name_the_fix(raw, aws, tmp_path, monkeypatch):
    url = upload_archives(aws, raw / "archives")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    with pytest.raises(RemoteError, match=f"INPUT_DIR {url}: access refused "
                                          r"\(NoCredentialsError.*Fix: check the credentials"):
        run_pack(url, tmp_path / "out", layout="bench2drive")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("layout", ["tcp", "garage"])
def test_route_layouts_read_only_archives_from_a_store(raw, aws, tmp_path, cli, layout):
    """Route layouts read a store's route archives (issue 30; tests/pack/datasets/routes/
    test_archived_routes_s3.py packs them); a prefix of clip archives holds no route."""
    url = upload_archives(aws, raw / "archives")
    result = cli("pack", url, tmp_path / "out", "--layout", layout)
    assert result.exit_code == 1
    assert f"INPUT_DIR {url}: none of its {EPISODES} archives holds a route folder" \
        in result.output
    assert "Fix: add the archives" in result.output
    assert not (tmp_path / "out").exists()


def test_split_file_on_the_store(raw, aws, tmp_path):
    url = upload_archives(aws, raw / "archives")
    split = put(aws, f"{fresh_prefix('split')}/{SPLIT_FILE}", (raw / SPLIT_FILE).read_bytes())
    for subset in ("val", "train"):
        run_pack(url, tmp_path / f"s3_{subset}", layout="bench2drive", split=split,
                 subset=subset)
        run_pack(raw / "archives", tmp_path / subset, layout="bench2drive",
                 split=str(raw / SPLIT_FILE), subset=subset)
        same_pack(tmp_path / f"s3_{subset}", tmp_path / subset, (split, str(raw / SPLIT_FILE)))
    val = {k.rsplit("__", 1)[0] for k in read_pack(tmp_path / "s3_val")}
    train = {k.rsplit("__", 1)[0] for k in read_pack(tmp_path / "s3_train")}
    assert val == {clip_name(EPISODES - 1)} and train == {clip_name(i) for i in
                                                          range(EPISODES - 1)}
    gone = split.replace(SPLIT_FILE, "missing.json")
    with pytest.raises(RemoteError, match=f"--split {gone}: no such object.*Fix: check"):
        run_pack(url, tmp_path / "gone", layout="bench2drive", split=gone)
    assert not (tmp_path / "gone").exists()


@pytest.fixture
def stalling(aws):
    proxies: list[StallingProxy] = []

    def make(after: int, times: int) -> StallingProxy:
        proxies.append(StallingProxy(aws, after, times))
        return proxies[-1]
    yield make
    for proxy in proxies:
        proxy.close()


def short(endpoint: str) -> RemoteOptions:
    """One retry and a 1 s read timeout: a stall ends in seconds."""
    return RemoteOptions(connect_timeout=2, read_timeout=1, retries=1, backoff=0.05,
                         storage_options=options(endpoint))


def _ref_through(raw: Path, aws: str, proxy: StallingProxy) -> ClipRef:
    """The stored archive of clip 1, read through the proxy, in ranged reads of 256 kB (so
    the stall comes after whole blocks were read)."""
    url = upload_archives(aws, raw / "archives")
    ref = [r for r in find_clips(url) if r.name == clip_name(1)][0]
    return replace(ref, remote=short(proxy.url))


def test_a_stall_mid_archive_is_retried_at_the_same_offset(raw, aws, stalling, monkeypatch):
    monkeypatch.setattr(objstore, "BLOCK", 256 << 10)
    proxy = stalling(after=600 << 10, times=1)
    ref = _ref_through(raw, aws, proxy)
    stored = ArchiveClip(ref)
    local = ArchiveClip(ClipRef(ref.name, raw / "archives" / f"{ref.name}.tar.gz", True))
    try:
        assert proxy.stalls == 1
        assert stored.names() == local.names() and len(stored.names()) > 100
        assert all(stored.read(n) == local.read(n) for n in local.names())
    finally:
        stored.close()
        local.close()


def test_a_store_that_keeps_stalling_is_an_error_naming_the_clip(raw, aws, stalling,
                                                                monkeypatch):
    monkeypatch.setattr(objstore, "BLOCK", 256 << 10)
    proxy = stalling(after=600 << 10, times=100)
    ref = _ref_through(raw, aws, proxy)
    pattern = (f"clip archive {ref.path}: ReadTimeoutError.*tried 2 times.*"
               r"Fix: check the endpoint")
    with pytest.raises(RemoteError, match=pattern):
        ArchiveClip(ref)
    # the packer's skip mode leaves out clips whose plan is `filtered`: a failing store is
    # never one of them
    with pytest.raises(RemoteError, match=pattern):
        plan_clip(ref, B2DSettings())
    assert proxy.stalls == 4


def test_a_stalled_endpoint_is_a_bounded_listing_error(stalling):
    proxy = stalling(after=0, times=100)   # not one byte of any answer
    url = f"s3://{BUCKET}/{fresh_prefix('stalled')}"
    with pytest.raises(RemoteError, match=f"INPUT_DIR {url}: ReadTimeoutError"
                                          r".*tried 2 times.*Fix: check the endpoint"):
        find_clips(url, remote=short(proxy.url))
    assert proxy.stalls == 2


def test_cli_read_timeout_and_retries_bound_a_stalled_store(stalling, cli, tmp_path,
                                                             monkeypatch):
    proxy = stalling(after=0, times=100)
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
    url = f"s3://{BUCKET}/{fresh_prefix('stalled')}"
    result = cli("pack", url, tmp_path / "out", "--layout", "bench2drive", "--read-timeout",
                 "0.5", "--retries", "2", "--all-frames")
    assert result.exit_code != 0
    assert re.search(f"INPUT_DIR {url}: ReadTimeoutError.*tried 3 times", result.output), \
        result.output
    assert proxy.stalls == 3 and not (tmp_path / "out").exists()
    for bad in (["--retries", "-1"], ["--read-timeout", "0"]):
        result = cli("pack", url, tmp_path / "out", "--layout", "bench2drive", *bad)
        assert result.exit_code == 2 and bad[0] in result.output
