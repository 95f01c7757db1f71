"""An interrupted `carla-wds pack RAW s3://...` and its --resume, on a real S3 server (moto's,
on 127.0.0.1, through the real s3fs client) behind a real HTTP proxy that holds, loses or
stalls chosen uploads, with the real CLI in a child process where it is killed. A resume
finishes byte-identical to an uninterrupted local pack, from the same staging folder or from
another machine's (an empty one: the journal's copy in the store stands in)."""
from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

from carla_wds.pack.routes import PackError   # noqa: E402
from carla_wds.pack.upload import default_stage   # noqa: E402

from ..helpers import manifest_of   # noqa: E402
from ..s3server import BUCKET, client, fresh_prefix, options   # noqa: E402
from .s3pack import (JOURNAL, files_of, local3, objects, proxy, run_cli,   # noqa: E402,F401
                     s3_pack)
from .s3proxy import Proxy, Rule   # noqa: E402


def journaled(text: str) -> list[str]:
    """The shard names a journal lists, in order."""
    return [json.loads(line)["shard"]["name"] for line in text.splitlines()[1:]]


def interrupted(raw: Path, endpoint: str, prefix: str, stage: Path) -> None:
    """A pack that stops at a truncated image of the last route, its input then mended."""
    bad = raw / "Town03" / "routes_town03_02" / "rgb" / "0020.png"
    good = bad.read_bytes()
    bad.write_bytes(good[:100])
    with pytest.raises(PackError, match="0020"):
        s3_pack(raw, endpoint, prefix, stage)
    bad.write_bytes(good)


def test_resume_after_a_clean_interruption(raw_tcp, packed_tcp, copy_raw, proxy, tmp_path):
    raw, prefix, stage = copy_raw(raw_tcp), fresh_prefix(), tmp_path / "stage"
    interrupted(raw, proxy.endpoint, prefix, stage)
    journal = (stage / JOURNAL).read_bytes()
    names = journaled(journal.decode())
    held = objects(proxy.upstream, prefix)
    assert 0 < len(names) < 12 and sorted(held) == [JOURNAL] + names
    assert held[JOURNAL] == journal   # the store's copy of the journal is the staged one
    assert not [p for p in stage.iterdir() if p.name != JOURNAL]

    with pytest.raises(PackError, match="Fix: pass --resume"):
        s3_pack(raw, proxy.endpoint, prefix, stage)
    s3 = client(proxy.upstream)
    s3.delete_object(Bucket=BUCKET, Key=f"{prefix}/{JOURNAL}")
    with pytest.raises(PackError, match=f"{prefix} holds {len(names)} object.* no journal .*"
                                        f"{tmp_path}/elsewhere.*Fix: --overwrite"):
        s3_pack(raw, proxy.endpoint, prefix, tmp_path / "elsewhere", resume=True)
    assert not (tmp_path / "elsewhere").exists()

    # another machine: an empty staging folder, and the journal's copy in the store
    s3.put_object(Bucket=BUCKET, Key=f"{prefix}/{JOURNAL}", Body=journal)
    proxy.seen.clear()
    s3_pack(raw, proxy.endpoint, prefix, tmp_path / "elsewhere", resume=True)
    assert objects(proxy.upstream, prefix) == files_of(packed_tcp)   # the copy is gone too
    put = [s.path.rsplit("/", 1)[1] for s in proxy.puts()]
    shards = [f"shard-{i:06d}.tar" for i in range(len(names), 12)]
    assert [p for p in put if p != JOURNAL] == shards + ["manifest.json"]
    assert put.count(JOURNAL) == len(shards)   # after each shard, before the next
    assert not (tmp_path / "elsewhere").exists()   # made by the run, left empty: removed


def test_resume_takes_the_journal_that_lists_more(raw_tcp, packed_tcp, copy_raw, proxy,
                                                  tmp_path):
    """The store's copy one shard behind the staged journal (its upload failed after the
    journal line): the staged journal is the one resumed, so no journaled shard is redone."""
    raw, prefix, stage = copy_raw(raw_tcp), fresh_prefix(), tmp_path / "stage"
    interrupted(raw, proxy.endpoint, prefix, stage)
    lines = (stage / JOURNAL).read_text().splitlines(keepends=True)
    assert len(lines) >= 3
    client(proxy.upstream).put_object(Bucket=BUCKET, Key=f"{prefix}/{JOURNAL}",
                                      Body="".join(lines[:-1]).encode())
    proxy.seen.clear()
    s3_pack(raw, proxy.endpoint, prefix, stage, resume=True)
    assert objects(proxy.upstream, prefix) == files_of(packed_tcp)
    put = [s.path.rsplit("/", 1)[1] for s in proxy.puts() if not s.path.endswith(JOURNAL)]
    assert put == [f"shard-{i:06d}.tar" for i in range(len(lines) - 1, 12)] + ["manifest.json"]


def test_a_store_journal_that_is_not_one_is_refused(raw_tcp, s3_endpoint, tmp_path):
    prefix = fresh_prefix()
    s3 = client(s3_endpoint)
    s3.put_object(Bucket=BUCKET, Key=f"{prefix}/shard-000000.tar", Body=b"x" * 512)
    s3.put_object(Bucket=BUCKET, Key=f"{prefix}/{JOURNAL}", Body=b"<html>not a journal\n")
    with pytest.raises(PackError, match=f"{JOURNAL} is not a pack journal.*--overwrite"):
        s3_pack(raw_tcp, s3_endpoint, prefix, tmp_path / "stage", resume=True)
    assert sorted(objects(s3_endpoint, prefix)) == [JOURNAL, "shard-000000.tar"]   # untouched
    assert not (tmp_path / "stage").exists()   # nor is the copy it read kept


def _kill_inside_upload(proxy: Proxy, raw: Path, url: str, home: Path, log: Path) -> None:
    """The real CLI, killed with SIGKILL while the proxy holds its upload of shard 5."""
    proc = run_cli(proxy.endpoint, home, "pack", raw, url, "--max-samples", "3", log=log)
    try:
        assert proxy.held.wait(timeout=120), log.read_text()[-3000:]
        # it goes on writing while the upload hangs, up to the bound on staged shards
        stage, deadline = default_stage(url), time.monotonic() + 60

        def staged() -> list[str]:
            return [p.name for p in stage.iterdir() if ".tar" in p.name]
        while len(staged()) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        # being uploaded, waiting for it, written and waiting for a slot
        assert sorted(staged()) == [".shard-000006.tar.tmp", ".shard-000007.tar.tmp",
                                    "shard-000005.tar"]
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        proxy.release()
    assert proc.returncode == -signal.SIGKILL


@pytest.mark.parametrize("landed, machine", [(False, "same"), (True, "same"),
                                             (True, "another")])
def test_kill_9_during_upload_then_resume_is_byte_identical(local3, proxy, tmp_path,
                                                            monkeypatch, landed, machine):
    """machine="another": the resume runs with another cache folder, so its default staging
    folder is empty, as on a machine that replaces the killed one."""
    raw, shards = local3.parent / "raw", len(manifest_of(local3)["shards"])   # 9 shards
    prefix, home = fresh_prefix(), tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))   # default_stage here, as in the child
    url = f"s3://{BUCKET}/{prefix}"
    proxy.rule = Rule("/shard-000005.tar", "hold", land=landed)
    _kill_inside_upload(proxy, raw, url, home, tmp_path / "killed.log")
    # what the kill left: shards 0-4 uploaded and journaled (here and in the store), 5 in
    # flight (or landed but not journaled), no manifest
    stage = default_stage(url)
    assert stage.parent.parent.parent == home
    journal = (stage / JOURNAL).read_text()
    assert journaled(journal) == [f"shard-{i:06d}.tar" for i in range(5)]
    held = objects(proxy.upstream, prefix)
    assert sorted(held) == [JOURNAL] + [f"shard-{i:06d}.tar" for i in range(6 if landed else 5)]
    assert held[JOURNAL].decode() == journal

    plain = run_cli(proxy.upstream, home, "pack", raw, url, "--max-samples", "3")
    assert plain.returncode != 0 and "--resume" in plain.stderr
    proxy.rule = None
    proxy.seen.clear()
    resumer = home if machine == "same" else tmp_path / "another"
    resumer.mkdir(exist_ok=True)
    resumed = run_cli(proxy.endpoint, resumer, "pack", raw, url, "--max-samples", "3",
                      "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    put = [s.path.rsplit("/", 1)[1] for s in proxy.puts() if not s.path.endswith(JOURNAL)]
    assert put == [f"shard-{i:06d}.tar" for i in range(5, shards)] + ["manifest.json"]
    assert objects(proxy.upstream, prefix) == files_of(local3)   # 9 shards and the manifest
    assert list(resumer.iterdir()) == []   # its staging folder and carla-wds/stage are gone
    check = run_cli(proxy.upstream, resumer, "verify", url)
    assert check.returncode == 0 and f"OK {url}" in check.stdout, check.stderr[-3000:]


def test_a_stalled_upload_ends_in_a_bounded_error_and_resumes(raw_tcp, packed_tcp, proxy,
                                                               tmp_path):
    """The store never answers shard 2's PUT: each attempt ends at the read timeout, the pack
    stops after retries + 1 of them with an error naming the object's URL, and --resume
    (once the store answers again) finishes byte-identical to a local pack."""
    from carla_wds.pack import PackOptions, pack
    prefix, stage = fresh_prefix(), tmp_path / "stage"
    proxy.rule = Rule("/shard-000002.tar", "hold")
    url = f"s3://{BUCKET}/{prefix}/shard-000002.tar"
    opts = PackOptions(max_samples=7, progress=False, stage=str(stage), read_timeout=1,
                       retries=1, storage_options=options(proxy.endpoint))
    with pytest.raises(PackError, match=f"{url}: .*[Tt]imeout.*tried 2 times.*--resume"):
        pack(raw_tcp, f"s3://{BUCKET}/{prefix}", opts)
    assert [s.path.endswith("/shard-000002.tar") for s in proxy.puts()].count(True) == 2
    assert sorted(objects(proxy.upstream, prefix)) == [JOURNAL, "shard-000000.tar",
                                                       "shard-000001.tar"]
    proxy.release()
    proxy.rule = None
    pack(raw_tcp, f"s3://{BUCKET}/{prefix}", PackOptions(**{**opts.__dict__, "resume": True}))
    assert objects(proxy.upstream, prefix) == files_of(packed_tcp)
