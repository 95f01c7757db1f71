"""`carla-wds merge --in-place OUT` (issue 31): one manifest naming the parts' shards where they
are, nothing copied, each shard checked against its part's manifest; on a folder and on an
s3:// prefix (moto's real S3 server), with the real command in child processes."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from carla_wds.sequence import sequence_doc

from ..helpers import SIZE
from .clusterkit import MAX, error_lines, run, skewed_raw


@pytest.fixture(scope="module")
def packed(raw_tcp, tmp_path_factory) -> Path:
    """OUT of a 3-part plan with every part packed (read-only: tests copy it)."""
    base = tmp_path_factory.mktemp("inplace")
    raw, out = skewed_raw(raw_tcp, base / "raw", copies=2), base / "out"
    run("plan", raw, out, "--layout", "tcp", "--parts", "3", check=True)
    for i in range(3):
        run("pack", raw, out, "--plan", out / "plan.json", "--part", str(i), *MAX, check=True)
    return out


def _state(folder: Path) -> dict[str, tuple[int, int, int]]:
    """rel path -> (inode, size, mtime_ns) of every file: what a copy or a rewrite would change."""
    return {p.relative_to(folder).as_posix(): (p.stat().st_ino, p.stat().st_size,
                                               p.stat().st_mtime_ns)
            for p in folder.rglob("*") if p.is_file()}


def _keys(source: str, **kw) -> list[str]:
    from carla_wds import CARLAWebData
    data = CARLAWebData(source, batch_size=4, image_size=SIZE, mode="eval", **kw)
    return [k for batch in data for k in batch.keys]


def test_in_place_merge_writes_only_the_manifest_and_loads_every_key_once(
        packed, copy_tree):
    out = copy_tree(packed, "out")
    before = _state(out)
    result = run("merge", "--in-place", out, check=True)
    assert "merged 3 parts in place" in result.stdout
    after = _state(out)
    assert set(after) - set(before) == {"manifest.json"}
    assert {k: v for k, v in after.items() if k != "manifest.json"} == before   # no byte moved
    merged = json.loads((out / "manifest.json").read_text())
    parts = [json.loads((out / f"parts/{i:05d}/manifest.json").read_text()) for i in range(3)]
    want = [{**s, "name": f"parts/{i:05d}/{s['name']}"} for i, m in enumerate(parts)
            for s in m["shards"]]
    assert merged["shards"] == want
    assert merged["sequence"] == sequence_doc(want)
    assert merged["total_samples"] == merged["counts"]["samples"] == sum(
        m["total_samples"] for m in parts)
    assert merged["counts"]["routes"] == 6 and merged["pack_args"]["part"] is None
    keys = _keys(str(out))
    assert len(keys) == len(set(keys)) == merged["total_samples"]
    assert run("verify", out, "--deep").returncode == 0


@pytest.mark.parametrize("change", ["size", "sha256"])
def test_in_place_merge_refuses_a_shard_that_differs_from_its_part(packed, copy_tree, change):
    out = copy_tree(packed, "out")
    shard = out / "parts" / "00001" / "shard-000001.tar"
    data = bytearray(shard.read_bytes())
    shard.unlink()   # a hard link of the fixture's: write a new file, never through the link
    if change == "size":
        shard.write_bytes(bytes(data) + b"\0" * 512)
    else:
        data[700] ^= 0xFF
        shard.write_bytes(bytes(data))
    if change == "sha256":   # the size holds, so only --deep sees it
        assert run("merge", "--in-place", out).returncode == 0
        (out / "manifest.json").unlink()
    result = run("merge", "--in-place", out, "--deep")
    assert result.returncode == 1 and not (out / "manifest.json").exists()
    [line] = error_lines(result)
    assert line.startswith("Error: merge --in-place: shard parts/00001/shard-000001.tar ")
    assert "refused. Fix: re-pack that part (remove parts/00001/ and run its task again)" in line


def test_in_place_merge_of_an_unfinished_plan_names_the_parts_to_run(packed, copy_tree):
    out = copy_tree(packed, "out")
    (out / "parts" / "00002" / "manifest.json").unlink()
    result = run("merge", "--in-place", out)
    [line] = error_lines(result)
    assert "1 of 3 parts have no manifest (not done), e.g. parts/00002" in line
    assert "sbatch --array=2 " in line and not (out / "manifest.json").exists()


def test_in_place_merge_on_an_s3_prefix(packed, s3_endpoint, tmp_path):
    from ..s3server import BUCKET, FAST, client, env, fresh_prefix, keys, options
    prefix, s3 = fresh_prefix("cluster"), client(s3_endpoint)
    for p in sorted(packed.rglob("*")):
        if p.is_file():
            s3.put_object(Bucket=BUCKET, Key=f"{prefix}/{p.relative_to(packed).as_posix()}",
                          Body=p.read_bytes())
    before = keys(s3_endpoint, prefix + "/")
    url, aws = f"s3://{BUCKET}/{prefix}", env(s3_endpoint)
    assert run("merge", "--in-place", url, "--deep", env=aws).returncode == 0
    after = keys(s3_endpoint, prefix + "/")
    assert set(after) - set(before) == {f"{prefix}/manifest.json"}
    assert all(after[k] == v for k, v in before.items())
    local = json.loads((packed / "parts/00000/manifest.json").read_text())
    merged = json.loads(after[f"{prefix}/manifest.json"])
    assert merged["shards"][:len(local["shards"])] == [
        {**s, "name": f"parts/00000/{s['name']}"} for s in local["shards"]]
    got = _keys(url + "/manifest.json", storage_options=options(s3_endpoint), remote=FAST)
    assert len(got) == len(set(got)) == merged["total_samples"]
    # an object changed behind the parts' backs: refused, and the manifest left as it was
    name = f"{prefix}/parts/00002/shard-000000.tar"
    s3.put_object(Bucket=BUCKET, Key=name, Body=before[name][:-512])
    result = run("merge", "--in-place", url, env=aws)
    assert result.returncode == 1 and "shard parts/00002/shard-000000.tar the store holds " \
        in error_lines(result)[0]
    assert keys(s3_endpoint, prefix + "/manifest.json")[f"{prefix}/manifest.json"] == \
        after[f"{prefix}/manifest.json"]
