"""Trust boundaries: a manifest is data. Its shard names stay inside its own location, and
nothing it says is run, opened elsewhere or trusted beyond its validated fields."""
from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from carla_wds import CARLAWebData
from carla_wds.manifest_schema import ManifestError
from carla_wds.pack.audit import merge, verify

from .helpers import SIZE, all_keys

TINY = "tiny"   # a shipped config, by name


@pytest.fixture(scope="module")
def pristine(zoo) -> Path:
    return zoo(episodes=2, frames=16, max_samples=6)   # shared, read-only (conftest.zoo)


@pytest.fixture()
def shards(pristine, tmp_path) -> Path:
    out = tmp_path / "data" / "shards"
    shutil.copytree(pristine, out)
    return out


def edit_manifest(shards: Path, edit) -> None:
    m = json.loads((shards / "manifest.json").read_text())
    edit(m)
    (shards / "manifest.json").write_text(json.dumps(m))


def hostile_names(shards: Path, marker: Path) -> dict[str, str]:
    outside = shards.parent / "outside"
    outside.mkdir(exist_ok=True)
    shutil.copy(shards / "shard-000000.tar", outside / "shard-000000.tar")
    return {
        "pipe": f"pipe:touch {marker}; cat {shards}/shard-000000.tar",
        "absolute": str(outside / "shard-000000.tar"),
        "file-url": f"file://{outside}/shard-000000.tar",
        "dotdot": "../outside/shard-000000.tar",
        "http": "http://127.0.0.1:9/shard-000000.tar",
        "backslash": "..\\outside\\shard-000000.tar",
        "hidden": ".hidden/shard.tar",
    }


@pytest.mark.parametrize("kind", ["pipe", "absolute", "file-url", "dotdot", "http",
                                  "backslash", "hidden"])
def test_hostile_shard_names_are_refused_and_nothing_runs(shards, tmp_path, kind):
    marker = tmp_path / "PWNED"
    name = hostile_names(shards, marker)[kind]
    edit_manifest(shards, lambda m: m["shards"][0].update(name=name))
    for verify_ in (False, True):
        with pytest.raises(ManifestError) as err:
            data = CARLAWebData(str(shards), batch_size=2, image_size=SIZE, verify=verify_)
            list(data)
        msg = str(err.value)
        assert str(shards / "manifest.json") in msg and repr(name) in msg
        assert "relative paths inside its own folder" in msg and "shard_urls" in msg
    assert verify(shards, progress=False)   # reported as a problem, not run
    assert not marker.exists()


def test_cli_tools_refuse_a_pipe_name_and_run_nothing(shards, tmp_path):
    marker = tmp_path / "PWNED"
    edit_manifest(shards, lambda m: m["shards"][0].update(name=f"pipe:touch {marker}; cat x"))
    for args in (["verify", str(shards)], ["verify", str(shards), "--deep"],
                 ["inspect", str(shards)],
                 ["show", str(shards), "--out", str(tmp_path / "x.png")],
                 ["train", "--config", str(TINY), f"data.train={shards}",
                  f"data.val={shards}", f"run_dir={tmp_path / 'run'}", "data.num_workers=0"]):
        proc = subprocess.run([sys.executable, "-m", "carla_wds.cli", *args],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode != 0, args
        assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
        assert "refused" in proc.stdout + proc.stderr, args
    assert not marker.exists()


def test_symlink_leading_out_of_the_folder_is_refused(shards):
    outside = shards.parent / "elsewhere.tar"
    os.replace(shards / "shard-000001.tar", outside)
    os.symlink(outside, shards / "shard-000001.tar")
    with pytest.raises(ManifestError, match="outside the manifest's folder"):
        CARLAWebData(str(shards), batch_size=2, image_size=SIZE)


def test_an_outside_file_is_never_opened(shards, tmp_path):
    """The name points at a FIFO outside the dataset: opening it would block for ever, so a
    loader that refuses the name without opening anything is the only one that returns."""
    fifo = tmp_path / "trap.tar"
    os.mkfifo(fifo)
    edit_manifest(shards, lambda m: m["shards"][0].update(name=str(fifo)))
    code = ("import sys; from carla_wds import CARLAWebData\n"
            "try:\n  list(CARLAWebData(sys.argv[1], batch_size=2, image_size=(24, 32), "
            "verify=True))\nexcept Exception as e: print(type(e).__name__, e)")
    proc = subprocess.run([sys.executable, "-c", code, str(shards)], capture_output=True,
                          text=True, timeout=120)
    assert proc.stdout.startswith("ManifestError"), proc.stdout + proc.stderr[-2000:]


def test_caller_may_pass_pipe_urls_itself(shards):
    m = json.loads((shards / "manifest.json").read_text())
    urls = [f"pipe:cat {shards / s['name']}" for s in m["shards"]]
    data = CARLAWebData(str(shards), batch_size=2, mode="eval", image_size=SIZE,
                        shard_urls=urls, verify=True)
    keys = [k for b in data for k, v in zip(b.keys, b.valid.tolist()) if v]
    assert sorted(keys) == sorted(all_keys(shards))
    with pytest.raises(ValueError, match="one URL per shard"):
        CARLAWebData(str(shards), batch_size=2, image_size=SIZE, shard_urls=urls[:-1])
    # the caller's command is still held to the manifest's sizes: a short stream is named
    short = [f"pipe:head -c 30000 {shards / s['name']}" for s in m["shards"]]
    data = CARLAWebData(str(shards), batch_size=2, mode="eval", image_size=SIZE,
                        shard_urls=short)
    with pytest.raises(Exception, match="pipe:head -c 30000 .*shard-000000.tar"):
        list(data)


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def test_hostile_name_in_a_served_manifest_is_refused(shards, tmp_path):
    marker = tmp_path / "PWNED"
    edit_manifest(shards, lambda m: m["shards"][0].update(name=f"pipe:touch {marker}; cat x"))
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_Quiet, directory=str(shards)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/manifest.json"
        with pytest.raises(ManifestError, match="refused"):
            CARLAWebData(url, batch_size=2, image_size=SIZE)
    finally:
        server.shutdown()
        server.server_close()
    assert not marker.exists()


@pytest.mark.parametrize("field,value,expect", [
    ("samples", -1, "shards[0].samples is -1; expected an integer >= 0"),
    ("samples", 2.5, "shards[0].samples is 2.5"),
    ("samples", True, "shards[0].samples is True"),
    ("bytes", "10", "shards[0].bytes is '10'"),
    ("sha256", "not-a-hash", "shards[0].sha256"),
])
def test_manifest_fields_are_validated_on_read(shards, field, value, expect):
    edit_manifest(shards, lambda m: m["shards"][0].update({field: value}))
    with pytest.raises(ManifestError) as err:
        CARLAWebData(str(shards), batch_size=2, image_size=SIZE)
    assert expect in str(err.value) and str(shards / "manifest.json") in str(err.value)


def test_duplicate_names_and_wrong_totals_are_refused(shards):
    def dup(m):
        m["shards"][1]["name"] = m["shards"][0]["name"]
    edit_manifest(shards, dup)
    with pytest.raises(ManifestError, match="lists it twice"):
        CARLAWebData(str(shards), batch_size=2, image_size=SIZE)

    def total(m):
        m["shards"][1]["name"] = "shard-000001.tar"
        m["total_samples"] += 3
    edit_manifest(shards, total)
    with pytest.raises(ManifestError, match="total_samples"):
        CARLAWebData(str(shards), batch_size=2, image_size=SIZE)


@pytest.mark.parametrize("verify_", [False, True])
def test_a_count_lower_than_the_tar_holds_is_an_error(shards, verify_):
    def lower(m):
        m["shards"][0]["samples"] -= 1
        m["total_samples"] -= 1
        m["shards"][0].pop("buckets")   # else its runs (one per sample) refuse it when read
    edit_manifest(shards, lower)
    data = CARLAWebData(str(shards), batch_size=2, mode="eval", image_size=SIZE,
                        verify=verify_)
    with pytest.raises(Exception, match="holds more than the 5 samples the manifest declares"):
        list(data)
    assert any("6 samples, manifest says 5" in p for p in verify(shards, progress=False))


def test_merge_refuses_a_name_outside_the_part_and_leaves_nothing(shards, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("not yours")
    edit_manifest(shards, lambda m: m["shards"][0].update(name=str(secret)))
    out = tmp_path / "merged"
    with pytest.raises(ManifestError, match="refused"):
        merge([shards], out)
    assert not out.exists()


def test_merge_checks_every_sha256_as_it_copies(shards, tmp_path):
    blob = bytearray((shards / "shard-000001.tar").read_bytes())
    blob[1000] ^= 0xFF
    (shards / "shard-000001.tar").write_bytes(bytes(blob))
    out = tmp_path / "merged"
    with pytest.raises(ManifestError, match="shard-000001.tar has .* sha256"):
        merge([shards], out)
    assert not out.exists()
    out.mkdir()
    with pytest.raises(ManifestError):
        merge([shards], out)
    assert list(out.iterdir()) == []   # an empty folder given by the user stays, empty


def png_bomb(height: int, width: int) -> bytes:
    """A valid grey PNG of height x width zeros: a few hundred KB that decode to H*W*3 bytes."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
    z, row = zlib.compressobj(9), b"\0" * (width + 1)
    body = b"".join(z.compress(row) for _ in range(height)) + z.flush()
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", body)
            + chunk(b"IEND", b""))


@pytest.mark.parametrize("recorded", [True, False])
def test_a_decompression_bomb_is_refused_from_its_header(shards, recorded):
    from .helpers import rewrite_shard
    bomb = png_bomb(10000, 10000)   # 300 MB as RGB
    assert len(bomb) < 1 << 20
    rewrite_shard(shards / "shard-000000.tar",
                  lambda i, s: {**s, "front.png": bomb} if i == 1 else s)
    if not recorded:   # a pack made before image sizes were recorded: the pixel cap holds
        edit_manifest(shards, lambda m: m.pop("image_sizes"))
    expect = "10000x10000 pixels, the manifest records 48x64" if recorded else \
        "10000x10000 pixels, outside 1..67108864"
    data = CARLAWebData(str(shards), batch_size=2, mode="eval", image_size=SIZE)
    with pytest.raises(Exception, match=expect):
        list(data)
    skip = CARLAWebData(str(shards), batch_size=2, mode="eval", image_size=SIZE,
                        on_error="skip")
    assert sum(len(b.errors) for b in skip) == 1
    problems = verify(shards, deep=True, progress=False)
    assert len(problems) == 1 and "front.png" in problems[0] and expect in problems[0]


def test_verify_reports_a_gap_in_the_shard_names(shards):
    """What a failed commit left before it was fixed: shard 1 on disk but not listed."""
    def drop(m):
        gone = m["shards"].pop(1)
        m["total_samples"] -= gone["samples"]
    edit_manifest(shards, drop)
    problems = verify(shards, progress=False)
    assert any("not numbered 0.." in p and "shard-000001.tar" in p for p in problems), problems
    assert any(p.endswith("shard-000001.tar: on disk but not in the manifest")
               for p in problems), problems


def _tar_with(path: Path, extra: list) -> None:
    """Rewrite a shard with extra tar members (a symlink, a folder, a huge declared size)."""
    import io
    import tarfile

    from carla_wds.fileio import sha256_file
    with tarfile.open(path) as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar]
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for m, data in members:
            tar.addfile(m, io.BytesIO(data))
        for info in extra:
            tar.addfile(info, io.BytesIO(b"x" * info.size) if info.size else None)
    m = json.loads((path.parent / "manifest.json").read_text())
    m["shards"][0].update(bytes=path.stat().st_size, sha256=sha256_file(path))
    (path.parent / "manifest.json").write_text(json.dumps(m))


def test_verify_and_inspect_report_odd_members_without_a_traceback(shards, tmp_path):
    import tarfile
    link = tarfile.TarInfo("zz.link")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    folder = tarfile.TarInfo("zz_dir")
    folder.type = tarfile.DIRTYPE
    _tar_with(shards / "shard-000000.tar", [link, folder])
    problems = verify(shards, deep=True, progress=False)
    assert sum("carla-wds shards hold regular files only" in p for p in problems) == 2
    assert any("zz.link" in p for p in problems) and any("zz_dir" in p for p in problems)
    # the loader skips them: they are not samples
    data = CARLAWebData(str(shards), batch_size=2, mode="eval", image_size=SIZE)
    assert sum(int(b.valid.sum()) for b in data) == data.manifest.total_samples

    huge = shards / "shard-000001.tar"
    blob = bytearray(huge.read_bytes())
    blob[124:136] = b"%011o\0" % (4 << 30)
    blob[148:156] = b" " * 8
    blob[148:156] = b"%06o\0 " % sum(blob[:512])
    huge.write_bytes(bytes(blob))
    from carla_wds.fileio import sha256_file
    edit_manifest(shards, lambda m: m["shards"][1].update(sha256=sha256_file(huge)))
    for args in (["verify", str(shards)], ["verify", "--deep", str(shards)],
                 ["inspect", str(shards)]):
        proc = subprocess.run([sys.executable, "-m", "carla_wds.cli", *args],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
        assert "shard-000001.tar" in proc.stderr and "4294967296 bytes" in proc.stderr, \
            proc.stderr[-2000:]


def test_merge_refuses_parts_whose_image_sizes_differ(shards, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(shards, other)
    edit_manifest(other, lambda m: m.update(image_sizes={"front": [96, 128]}))
    out = tmp_path / "merged"
    with pytest.raises(Exception, match="image_sizes"):
        merge([shards, other], out)
    assert not out.exists()
