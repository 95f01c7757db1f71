"""A plan of Bench2Drive .tar.gz clips on an s3:// prefix (issue 31): sizes from the store's
listing (no object read), parts packed from the store by the real command, merged in place:
the same samples as a single local pack of the same archives (moto's real S3 server)."""
from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

from ..helpers import shared_raw   # noqa: E402
from ..s3server import BUCKET, client, env, fresh_prefix   # noqa: E402
from .clusterkit import plan_of, run   # noqa: E402


@pytest.fixture(scope="module")
def archives(tmp_path_factory) -> Path:
    # the clips of test_layout_bench2drive_faults and test_b2d_s3_input, written once a
    # session (read only): 3 archives, spread over two sub-prefixes and two parts
    return shared_raw(tmp_path_factory, "bench2drive", episodes=3, frames=30, seed=5,
                      image_size=(54, 96)) / "archives"


def test_a_plan_of_stored_clips_takes_sizes_from_the_listing_and_packs_from_the_store(
        archives, s3_endpoint, tmp_path, packer, samples_of):
    prefix, s3 = fresh_prefix("b2d"), client(s3_endpoint)
    for i, path in enumerate(sorted(archives.iterdir())):
        s3.put_object(Bucket=BUCKET, Key=f"{prefix}/{'ab'[i % 2]}/{path.name}",
                      Body=path.read_bytes())
    url, aws, out = f"s3://{BUCKET}/{prefix}", env(s3_endpoint), tmp_path / "out"
    run("plan", url, out, "--layout", "bench2drive", "--parts", "2", env=aws, check=True)
    plan = plan_of(out)
    local = {p.name[:-len(".tar.gz")]: p.stat().st_size for p in archives.iterdir()}
    assert {n: s for p in plan["part_list"] for n, s in p["episodes"].items()} == local
    for i in range(2):
        run("pack", url, out, "--layout", "bench2drive", "--plan", out / "plan.json", "--part",
            str(i), "--max-samples", "2", env=aws, check=True)
    assert run("merge", "--in-place", out, "--deep").returncode == 0
    single = tmp_path / "single"
    packer(archives, single, layout="bench2drive", max_samples=2)
    assert samples_of(out) == samples_of(single)
    # the plan was made with the layout's defaults: another --stride is refused in one line
    bad = run("pack", url, out, "--layout", "bench2drive", "--stride", "1", "--plan",
              out / "plan.json", "--part", "0", env=aws)
    assert bad.returncode == 1 and "was made for --layout bench2drive with no dataset " \
        "options" in bad.stderr


def test_a_plan_packed_into_an_s3_prefix_reports_status_and_merges_there(
        raw_tcp, s3_endpoint, tmp_path, samples_of):
    from ..s3server import keys
    prefix = fresh_prefix("planned")
    url, aws = f"s3://{BUCKET}/{prefix}", {**env(s3_endpoint),
                                            "XDG_CACHE_HOME": str(tmp_path / "cache")}
    run("plan", raw_tcp, url, "--layout", "tcp", "--parts", "2", env=aws, check=True)
    status = run("pack-status", url, env=aws, check=True).stdout.splitlines()
    assert status == ["0 done, 0 running, 0 failed, 2 missing of 2 parts", "--array=0-1"]
    run("pack", raw_tcp, url, "--plan", f"{url}/plan.json", "--part", "1", "--max-samples", "7",
        env=aws, check=True)
    status = run("pack-status", url, env=aws, check=True).stdout.splitlines()
    assert status == ["1 done, 0 running, 0 failed, 1 missing of 2 parts", "--array=0"]
    run("pack", raw_tcp, url, "--plan", f"{url}/plan.json", "--part", "0", "--max-samples", "7",
        env=aws, check=True)
    assert run("merge", "--in-place", url, "--deep", env=aws).returncode == 0
    held = sorted(k[len(prefix) + 1:] for k in keys(s3_endpoint, prefix + "/"))
    assert held[:2] == ["manifest.json", "parts/00000/manifest.json"] and "plan.json" in held
    assert run("verify", url, env=aws).returncode == 0
