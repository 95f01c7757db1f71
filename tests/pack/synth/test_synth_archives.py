"""`carla-wds synth --archives FORM`: routes written as their dataset distributes them (issue
30), which pack to the same shards as the same routes written as folders."""
from __future__ import annotations

import hashlib
import json
import subprocess
import tarfile
import sys
from pathlib import Path

import pytest

from carla_wds.pack.synth import archive_forms, synth_archives

CLI = [sys.executable, "-m", "carla_wds.cli"]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True)


def samples(pack: Path) -> list[tuple[str, str]]:
    """Every sample as its frame number and the digest of its members' bytes, sorted (an
    archive's routes are named by where they extract, so route names may differ)."""
    doc = json.loads((pack / "manifest.json").read_text())
    members: dict[str, list[tuple[str, bytes]]] = {}
    for shard in doc["shards"]:
        with tarfile.open(pack / shard["name"]) as tar:
            for m in tar:
                key, _, ext = m.name.partition(".")
                members.setdefault(key, []).append((ext, tar.extractfile(m).read()))
    out = []
    for key, parts in members.items():
        digest = hashlib.sha256(b"".join(e.encode() + b for e, b in sorted(parts)
                                         if e != "meta.json")).hexdigest()
        out.append((key.rsplit("__", 1)[-1], digest))
    return sorted(out)


@pytest.mark.parametrize("layout,form,glob,flags", [
    ("garage_lb2", "simlingo", "*.tar.gz", []),
    ("garage_lb2", "pdm_lite", "*/data/*.zip", []),
    ("lead", "zip", "*/*.zip", ["--allow-pickle-input"]),
])
def test_synth_archives_pack_as_the_same_routes_in_folders(tmp_path, layout, form, glob, flags):
    common = ["--layout", layout, "--episodes", "2", "--frames", "24", "--image-size", "32x64"]
    done = run("synth", str(tmp_path / "archives"), *common, "--archives", form)
    assert done.returncode == 0, done.stderr
    archives = sorted((tmp_path / "archives").glob(glob))
    assert archives and not (tmp_path / "archives" / ".synth_routes").exists()
    assert run("synth", str(tmp_path / "folders"), *common).returncode == 0
    for src in ("archives", "folders"):
        done = run("pack", str(tmp_path / src), str(tmp_path / f"{src}_pack"), "--layout", layout,
                   *flags)
        assert done.returncode == 0, done.stderr
    got = samples(tmp_path / "archives_pack")
    assert got and got == samples(tmp_path / "folders_pack")


def test_a_form_the_layout_has_not_is_one_line_naming_the_forms(tmp_path):
    assert archive_forms("garage_lb2") == ["pdm_lite", "simlingo"]
    assert archive_forms("tcp") == []
    done = run("synth", str(tmp_path / "x"), "--layout", "lead", "--archives", "tgz")
    assert done.returncode != 0 and "one of ['zip']" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not (tmp_path / "x").exists()
    with pytest.raises(ValueError, match="route folders only"):
        synth_archives(tmp_path / "y", "tcp", "zip")
