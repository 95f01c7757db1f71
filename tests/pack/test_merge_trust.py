"""`merge` and `merge --in-place` against hostile or mixed-up parts (issue 38, N5 and low 7):
a part manifest naming a file outside its part, a part shard that is a link, and the same
samples in two parts (a copied part, a linked shard, a forged shard repeating another part's
sample). Real packs of a real 3-part plan, each command run in process."""
from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tarfile
from pathlib import Path

import pytest

from carla_wds.manifest_schema import ManifestError
from carla_wds.pack.audit import verify
from carla_wds.pack.inplace import merge_in_place
from carla_wds.pack.merge import merge

from .clusterkit import MAX, skewed_raw


@pytest.fixture(scope="module")
def packed(raw_tcp, tmp_path_factory) -> Path:
    """OUT of a 3-part plan with every part packed (read-only: tests copy it)."""
    from click.testing import CliRunner

    from carla_wds.cli import main
    base = tmp_path_factory.mktemp("trust")
    raw, out = skewed_raw(raw_tcp, base / "raw", copies=2), base / "out"
    runner = CliRunner()
    for args in [["plan", raw, out, "--layout", "tcp", "--parts", "3"]] + [
            ["pack", raw, out, "--plan", out / "plan.json", "--part", str(i), *MAX]
            for i in range(3)]:
        result = runner.invoke(main, [str(a) for a in args], catch_exceptions=False)
        assert result.exit_code == 0, result.output
    return out


@pytest.fixture
def out(packed, tmp_path) -> Path:
    dst = tmp_path / "out"
    shutil.copytree(packed, dst)
    return dst


def _doc(out: Path, part: int) -> dict:
    return json.loads((out / f"parts/{part:05d}/manifest.json").read_text())


def _put(out: Path, part: int, doc: dict) -> None:
    (out / f"parts/{part:05d}/manifest.json").write_text(json.dumps(doc))


def _declare(doc: dict, i: int, path: Path, **more) -> None:
    """Shard i of a part's manifest declares `path`'s true size and sha256: the worst case."""
    data = path.read_bytes()
    doc["shards"][i].update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest(), **more)


@pytest.fixture
def secret(tmp_path) -> Path:
    path = tmp_path / "secret"   # beside OUT: any file the merging user can read
    path.write_bytes(b"hunter2 " * 100)
    return path


@pytest.mark.parametrize("deep", [False, True])
@pytest.mark.parametrize("name", ["../../../secret", "{secret}"])
def test_in_place_merge_refuses_a_shard_name_outside_its_part(out, secret, name, deep):
    """Size and sha256 both right: the old merge printed neither, but accepted and wrote a
    manifest naming the file; a wrong size made it print the file's size (an oracle)."""
    doc = _doc(out, 1)
    doc["shards"][0]["name"] = name.format(secret=secret)
    _declare(doc, 0, secret)
    _put(out, 1, doc)
    with pytest.raises(ManifestError) as info:
        merge_in_place(str(out), deep=deep)
    msg = str(info.value)
    assert "part parts/00001's manifest names the shard" in msg and "refused" in msg
    assert "Fix: re-pack that part (remove parts/00001/" in msg
    assert "bytes" not in msg and "sha256" not in msg   # nothing of the file was read
    assert not (out / "manifest.json").exists()


@pytest.mark.parametrize("target", ["secret", "other part"])
def test_in_place_merge_refuses_a_part_shard_that_is_a_link(out, secret, target):
    shard = out / "parts/00001/shard-000000.tar"
    to = secret if target == "secret" else out / "parts/00000/shard-000000.tar"
    shard.unlink()
    shard.symlink_to(to)
    doc = _doc(out, 1)
    _declare(doc, 0, to)
    _put(out, 1, doc)
    with pytest.raises(ManifestError, match=r"names the shard 'shard-000000.tar', which is a "
                                            r"link \(to "):
        merge_in_place(str(out), deep=True)
    assert not (out / "manifest.json").exists()


def test_in_place_merge_refuses_a_copied_part(out):
    """Part 0 copied over part 1 (its part number edited to pass the part check)."""
    shutil.rmtree(out / "parts/00001")
    shutil.copytree(out / "parts/00000", out / "parts/00001")
    doc = _doc(out, 1)
    doc["pack_args"]["part"] = [1, 3]
    _put(out, 1, doc)
    with pytest.raises(ManifestError) as info:
        merge_in_place(str(out))
    msg = str(info.value)
    assert "shard shard-000000.tar of part parts/00000 and in shard shard-000000.tar of " \
           "part parts/00001" in msg and "twice" in msg, msg
    assert not (out / "manifest.json").exists()


def test_in_place_merge_refuses_a_shard_hard_linked_into_two_parts(out):
    """The linked file's size declared in part 1, its sha256 and keys not: without --deep
    only the link itself shows."""
    shard, other = out / "parts/00001/shard-000000.tar", out / "parts/00000/shard-000000.tar"
    shard.unlink()
    os.link(other, shard)
    doc = _doc(out, 1)
    doc["shards"][0]["bytes"] = other.stat().st_size
    _put(out, 1, doc)
    with pytest.raises(ManifestError, match="one file .* is in shard shard-000000.tar of part "
                                            "parts/00000 and in shard shard-000000.tar of part "
                                            "parts/00001"):
        merge_in_place(str(out))


def _forge(out: Path) -> None:
    """Part 1's first shard rewritten with a middle sample of part 0's first shard in place of
    its own, the manifest updated to match (sha256, size, first and last keys kept): only
    reading every key shows the repeat."""
    def samples(path: Path) -> list[list[tuple[tarfile.TarInfo, bytes]]]:
        groups: dict[str, list] = {}
        with tarfile.open(path) as tar:
            for m in tar:
                groups.setdefault(m.name.split(".")[0], []).append(
                    (m, tar.extractfile(m).read()))
        return list(groups.values())
    mine = samples(out / "parts/00001/shard-000000.tar")
    theirs = samples(out / "parts/00000/shard-000000.tar")
    assert len(mine) >= 3 and len(theirs) >= 3
    mine[1] = theirs[1]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for sample in mine:
            for info, data in sample:
                tar.addfile(info, io.BytesIO(data))
    shard = out / "parts/00001/shard-000000.tar"
    shard.write_bytes(buf.getvalue())
    doc = _doc(out, 1)
    _declare(doc, 0, shard)
    _put(out, 1, doc)


def test_deep_in_place_merge_and_deep_verify_refuse_a_sample_in_two_parts(out):
    _forge(out)
    merge_in_place(str(out))   # sizes alone hold: accepted without --deep
    assert verify(out, deep=False, progress=False) == []
    problems = verify(out, deep=True, progress=False)
    assert any(p.startswith("a sample key is in both ") and "parts/00000/shard-000000.tar" in p
               and "parts/00001/shard-000000.tar" in p for p in problems), problems
    (out / "manifest.json").unlink()
    with pytest.raises(ManifestError, match="a sample key is in shard shard-000000.tar of part "
                                            "parts/00000 and in shard shard-000000.tar of part "
                                            "parts/00001"):
        merge_in_place(str(out), deep=True)
    assert not (out / "manifest.json").exists()


def test_merge_refuses_a_copied_part_and_a_forged_repeat(out, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(out / "parts/00000", copy)
    doc = json.loads((copy / "manifest.json").read_text())
    doc["pack_args"]["part"] = [1, 3]
    (copy / "manifest.json").write_text(json.dumps(doc))
    parts = [out / "parts/00000", copy, out / "parts/00002"]
    with pytest.raises(ManifestError, match="one content"):
        merge(parts, tmp_path / "merged")
    assert not (tmp_path / "merged").exists()
    _forge(out)
    with pytest.raises(ManifestError, match="a sample key is in shard shard-000000.tar of part"):
        merge([out / f"parts/{i:05d}" for i in range(3)], tmp_path / "merged")
    assert not (tmp_path / "merged").exists()
