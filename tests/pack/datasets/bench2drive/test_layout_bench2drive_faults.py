"""--layout bench2drive on bad input (a truncated .tar.gz, a truncated anno gzip, a missing
camera, a radar file with the wrong datasets, clips missing from the split file), killed and
resumed, and split into parts that merge into the single pack."""
from __future__ import annotations

import gzip
import io
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from carla_wds.pack.errors import PackError
from tests.helpers import shared_raw
from carla_wds.pack.synth.bench2drive import clip_name
from tests.conftest import read_pack
# every keyframe with a full future: these tests follow frames to the end of 30-frame clips
from tests.conftest import run_pack_all_frames as run_pack
from tests.pack.test_pack_resume import _kill_mid_pack

EPISODES, FRAMES = 3, 30


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> Path:
    # the same clips as test_b2d_s3_input's: written once a session (read only)
    return shared_raw(tmp_path_factory, "bench2drive", episodes=EPISODES, frames=FRAMES, seed=5,
                      image_size=(54, 96))


def copy(raw: Path, tmp_path: Path, what: str = "v1") -> Path:
    dst = tmp_path / what
    shutil.copytree(raw / what, dst)
    return dst


def pack_both(src: Path, tmp_path: Path, **kw) -> tuple[str, dict]:
    """The fail-mode error and the skip-mode manifest of one bad input."""
    with pytest.raises(PackError) as err:
        run_pack(src, tmp_path / "fail", layout="bench2drive", **kw)
    assert not (tmp_path / "fail").exists()   # a rejected pack leaves nothing behind
    m = run_pack(src, tmp_path / "skip", layout="bench2drive", on_error="skip", **kw)
    c = m["counts"]
    assert c["frames"] == c["samples"] + c["tail_frames"] + c["skipped"]
    return str(err.value), m


def test_a_truncated_archive(raw, tmp_path):
    src = copy(raw, tmp_path, "archives")
    bad = src / f"{clip_name(1)}.tar.gz"
    bad.write_bytes(bad.read_bytes()[:bad.stat().st_size // 2])
    msg, m = pack_both(src, tmp_path)
    assert str(bad) in msg and "truncated or corrupt archive" in msg and "sha256" in msg
    assert [f["episode"] for f in m["filtered_routes"]] == [clip_name(1)]
    assert {k.rsplit("__", 1)[0] for k in read_pack(tmp_path / "skip")} == {
        clip_name(0), clip_name(2)}


def test_a_truncated_anno_gzip(raw, tmp_path):
    src = copy(raw, tmp_path)
    bad = src / clip_name(0) / "anno" / "00005.json.gz"
    bad.write_bytes(bad.read_bytes()[:40])
    msg, m = pack_both(src, tmp_path)
    assert msg.startswith(f"{clip_name(0)} frame 0005: anno/00005.json.gz: truncated or corrupt")
    skipped = {(s["frame"], s["file"]) for s in m["skipped"]}
    # frame 5 itself, and frame 0 whose waypoints need frame 5
    assert skipped == {(5, "anno/00005.json.gz"), (0, "anno/00005.json.gz")}


def test_a_missing_camera(raw, tmp_path):
    src = copy(raw, tmp_path)
    (src / clip_name(2) / "camera" / "rgb_back_left" / "00000.jpg").unlink()
    msg, m = pack_both(src, tmp_path)
    assert "camera/rgb_back_left/00000" in msg and "missing back_left camera file" in msg
    assert [(s["episode"], s["frame"]) for s in m["skipped"]] == [(clip_name(2), 0)]


def test_a_radar_file_with_the_wrong_datasets(raw, tmp_path):
    h5py = pytest.importorskip("h5py")
    src = copy(raw, tmp_path)
    path = src / clip_name(0) / "radar" / "00005.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("radar_front", data=np.zeros((2, 4), np.float16))
        f.create_dataset("radar_rear", data=np.zeros((2, 4), np.float16))
    msg, m = pack_both(src, tmp_path, sensors=("lidar", "boxes", "expert", "radar"))
    assert "radar/00005.h5" in msg and "expected ['radar_front'" in msg
    assert [(s["frame"], s["file"]) for s in m["skipped"]] == [(5, "radar/00005.h5")]


def test_clips_missing_from_the_split_file(raw, tmp_path):
    split = tmp_path / "split.json"
    split.write_text(json.dumps({"train": [f"v1/{clip_name(0)}"], "val": [f"v1/{clip_name(1)}"]}))
    with pytest.raises(PackError, match=f"clip {clip_name(2)} .* in neither its train nor"):
        run_pack(raw / "v1", tmp_path / "a", layout="bench2drive", split=str(split))
    split.write_text(json.dumps({"val": [f"v1/{clip_name(1)}", "v1/Gone_Town01_Route9_Weather0"]}))
    with pytest.raises(PackError, match="lists 1 val clip.*Gone_Town01"):
        run_pack(raw / "v1", tmp_path / "b", layout="bench2drive", split=str(split), subset="val")
    m = run_pack(raw / "v1", tmp_path / "c", layout="bench2drive", split=str(split),
                 subset="val", on_error="skip")
    assert m["split_missing"] == ["Gone_Town01_Route9_Weather0"]
    assert {k.rsplit("__", 1)[0] for k in read_pack(tmp_path / "c")} == {clip_name(1)}


def test_archive_members_are_refused_outside_their_clip(raw, tmp_path):
    import tarfile
    src = tmp_path / "archives"
    src.mkdir()
    name = clip_name(0)
    with tarfile.open(src / f"{name}.tar.gz", "w:gz") as tar:
        data = b"x"
        info = tarfile.TarInfo(f"{name}/../../escape.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    with pytest.raises(PackError, match="not a plain file under"):
        run_pack(src, tmp_path / "out", layout="bench2drive")
    assert not (tmp_path / "escape.txt").exists()


def test_kill_9_then_resume_is_byte_identical(raw, tmp_path):
    args = ["--layout", "bench2drive", "--stride", "1", "--max-samples", "2", "--all-frames"]
    # hard-linked copies under new clip names: nothing rendered again; 2 copies (30 shards)
    # leave ample time to kill after the third shard, 8 if the pack still ended first
    for copies in (2, 8):
        src, out = tmp_path / f"many{copies}", tmp_path / f"out{copies}"
        for k in range(copies):
            for clip in sorted((raw / "v1").iterdir()):
                shutil.copytree(clip, src / f"{clip.name}{k}", copy_function=os.link)
        if _kill_mid_pack(src, out, args, min_shards=3):
            break
    else:
        pytest.skip("the pack finished before it could be killed mid-pack")
    run_pack(src, out, layout="bench2drive", stride=1, max_samples=2, resume=True)
    run_pack(src, tmp_path / "whole", layout="bench2drive", stride=1, max_samples=2)
    a, b = (json.loads((p / "manifest.json").read_text()) for p in (out, tmp_path / "whole"))
    assert a["shards"] == b["shards"] and a["counts"] == b["counts"]


def test_parts_merge_into_the_single_pack(raw, tmp_path, cli):
    whole = run_pack(raw / "archives", tmp_path / "whole", layout="bench2drive", max_samples=2)
    for i in range(2):
        run_pack(raw / "archives", tmp_path / f"p{i}", layout="bench2drive", max_samples=2,
                 part=(i, 2))
    result = cli("merge", tmp_path / "p0", tmp_path / "p1", "--out", tmp_path / "merged")
    assert result.exit_code == 0, result.output
    assert read_pack(tmp_path / "merged") == read_pack(tmp_path / "whole")
    assert whole["total_samples"] == EPISODES * 2


def test_gzip_anno_with_nan_token_reads(raw):
    """The real files hold Python's NaN token (json.dump of a NaN compass)."""
    doc = gzip.decompress((raw / "v1" / clip_name(1) / "anno" / "00005.json.gz").read_bytes())
    assert b"NaN" in doc
