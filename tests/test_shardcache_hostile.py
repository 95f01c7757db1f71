"""The shard cache against an unlucky machine (issue 23), on real HTTP on 127.0.0.1 and real
cache folders: a cached copy changed in place (same size) is dropped and fetched again, never
served; a full cache disk (a real EFBIG from RLIMIT_FSIZE in a subprocess, the same class as
ENOSPC and EDQUOT) names the folder and is never counted as a bad shard."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from carla_wds import cachecheck

from .test_remote import pristine, served   # noqa: F401  (fixtures)
from .test_remote_hostile import TARGET, eval_data

ROOT = Path(__file__).resolve().parents[1]


def valid_keys(url: str, **kw) -> list[str]:
    return sorted(k for b in eval_data(url, **kw) for k, v in zip(b.keys, b.valid.tolist())
                  if v)


def cached_copy(cache: Path) -> Path:
    (copy,) = [p for p in cache.iterdir() if p.name.endswith(TARGET)]
    return copy


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("how", ["write", "rot", "no-record"])
@pytest.mark.parametrize("verify", [False, True])
def test_a_cached_copy_changed_in_place_is_dropped_and_fetched_again(
        served, tmp_path, caplog, how, verify):
    """write: bytes changed through the filesystem; rot: the same, with the copy's times put
    back (as a disk's own corruption leaves them); no-record: a copy without its fill record
    (an older cache, or a filesystem without xattrs) is hashed whole instead."""
    url, faults, root = served
    cache = tmp_path / "cache"
    want = valid_keys(url, cache_dir=str(cache))
    copy = cached_copy(cache)
    st = copy.stat()
    fd = os.open(copy, os.O_RDWR)
    try:
        old = os.pread(fd, 1, st.st_size // 2)
        os.pwrite(fd, bytes([old[0] ^ 0x01]), st.st_size // 2)
        if how == "no-record":
            os.removexattr(fd, cachecheck.XATTR)
    finally:
        os.close(fd)
    if how == "rot":
        os.utime(copy, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert copy.stat().st_size == st.st_size and sha256_of(copy) != sha256_of(root / TARGET)
    fetched, dropped = len(faults.requests), cachecheck.stats["dropped"]
    assert valid_keys(url, cache_dir=str(cache), verify=verify) == want
    # fetched again: the copy now is the shard, and the drop was logged and counted
    assert sha256_of(cached_copy(cache)) == sha256_of(root / TARGET)
    assert [n for n, _ in faults.requests[fetched:]].count(TARGET) == 1
    assert cachecheck.stats["dropped"] == dropped + 1
    assert "changed in place" in caplog.text and TARGET in caplog.text


def test_an_intact_cached_copy_is_reused_without_a_download(served, tmp_path):
    url, faults, _ = served
    cache = tmp_path / "cache"
    want = valid_keys(url, cache_dir=str(cache))
    assert os.getxattr(cached_copy(cache), cachecheck.XATTR).startswith(b"v1 ")
    fetched = len(faults.requests)
    assert valid_keys(url, cache_dir=str(cache)) == want
    assert [n for n, _ in faults.requests[fetched:]] == ["manifest.json"]


# a loader in a process whose files may not grow past FSIZE bytes: a real EFBIG at the first
# write beyond it, which no shard fits
CHILD = textwrap.dedent("""
    import json, logging, resource, sys
    resource.setrlimit(resource.RLIMIT_FSIZE, (%(fsize)d, %(fsize)d))
    logging.basicConfig(level=logging.WARNING)
    from carla_wds import CARLAWebData
    from carla_wds.remote import RemoteOptions
    data = CARLAWebData(%(url)r, batch_size=2, mode="eval", image_size=(24, 32),
                        remote=RemoteOptions(connect_timeout=2, read_timeout=1, retries=2,
                                             backoff=0.05),
                        on_error="skip", **%(kw)r)
    valid = sum(int(b.valid.sum()) for b in data)
    print(json.dumps({"valid": valid, "skipped": data.stats["skipped_samples"],
                      "total": data.manifest.total_samples}))
""")


def run_child(url: str, tmp_path: Path, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp"), "PYTHONPATH": str(ROOT)}
    (tmp_path / "tmp").mkdir(exist_ok=True)
    code = CHILD % {"fsize": 4096, "url": url, "kw": kw}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, env=env, cwd=tmp_path)


def test_a_full_cache_disk_names_the_folder_and_reads_the_shard_uncached(served, tmp_path):
    url, _, _ = served
    cache = tmp_path / "cache"
    proc = run_child(url, tmp_path, cache_dir=str(cache))
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["valid"] == got["total"] and got["skipped"] == 0   # no good shard dropped
    line = next(x for x in proc.stderr.splitlines() if "no room to write a shard" in x)
    assert str(cache) in line and "bytes free" in line and "cache_dir" in line, line
    assert "File too large" in line and "uncached" in line, line
    assert not list(cache.glob("*.temp"))


def test_a_full_spool_disk_stops_the_loader_instead_of_skipping(served, tmp_path):
    url, _, _ = served
    proc = run_child(url, tmp_path, verify=True)
    assert proc.returncode != 0, proc.stdout
    last = proc.stderr.strip().splitlines()[-1]
    assert "DiskFullError" in last and str(tmp_path / "tmp") in last and "TMPDIR" in last, last
