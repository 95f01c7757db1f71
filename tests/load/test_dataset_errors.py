"""CARLAWebData on bad shards: clear errors with on_error="raise", counted skips with "skip"."""
from __future__ import annotations

import io
import json
import pickle
import shutil
import tarfile
from pathlib import Path

import numpy as np
import pytest
import webdataset as wds

from carla_wds import CARLAWebData
from carla_wds.fileio import sha256_file

from ..helpers import SIZE, all_keys, rewrite_shard


@pytest.fixture(scope="module")
def pristine(zoo) -> Path:
    return zoo(episodes=2, frames=20, max_samples=8)   # shared, read-only (conftest.zoo)


@pytest.fixture()
def shards(pristine, tmp_path) -> Path:
    out = tmp_path / "shards"
    shutil.copytree(pristine, out)
    return out




def eval_keys(shards: Path, **kw):
    data = CARLAWebData(str(shards), batch_size=4, mode="eval", image_size=SIZE, **kw)
    batches = list(data)
    assert len(batches) == len(data)   # exact counts even with skips
    return data, [k for b in batches for k, v in zip(b.keys, b.valid.tolist()) if v]


@pytest.mark.parametrize("workers", [0, 1])
def test_truncated_shard_raise_names_shard(shards, workers):
    shard = shards / "shard-000001.tar"
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    data = CARLAWebData(str(shards), batch_size=4, mode="eval", num_workers=workers,
                        image_size=SIZE)
    with pytest.raises(Exception, match="shard-000001.tar"):
        list(data)


def test_truncated_shard_skip_counts_and_keeps_batch_counts(shards, pristine):
    shard = shards / "shard-000001.tar"
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    data, keys = eval_keys(shards, on_error="skip")
    assert data.stats["skipped_samples"] >= 1
    assert set(keys) < set(all_keys(pristine)) and len(keys) == len(set(keys))


def _drop_camera(i, s):
    if i == 2:
        del s["front.png"]
    return s


def _bad_waypoints(i, s):
    if i == 1:
        buf = io.BytesIO()
        np.save(buf, np.zeros((3, 2), np.float32))
        s["waypoints.npy"] = buf.getvalue()
    return s


def _garbage_npy(i, s):
    if i == 3:
        s["target_point.npy"] = b"\x93NUMPY garbage"
    return s


def _garbage_json(i, s):
    if i == 0:
        s["speed.json"] = b"{not json"
    return s


@pytest.mark.parametrize("edit,match", [
    (_drop_camera, "missing member.*front.png"),
    (_bad_waypoints, "waypoints.npy has shape \\(3, 2\\)"),
    (_garbage_npy, "shard-000000.tar sample '[^']+__0003'.*target_point.npy does not decode"),
    (_garbage_json, "shard-000000.tar sample '[^']+__0000'.*speed.json does not decode")])
def test_bad_member_raise_and_skip(shards, edit, match):
    rewrite_shard(shards / "shard-000000.tar", edit)
    with pytest.raises(Exception, match=match):
        eval_keys(shards)
    data, keys = eval_keys(shards, on_error="skip")
    assert data.stats["skipped_samples"] == 1
    assert len(keys) == len(all_keys(shards)) - 1


class _Canary:
    """Unpickling this would create a file: proof that a pickle was decoded."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (Path.touch, (Path(self.path),))


@pytest.mark.parametrize("suffix", ["pth", "pyd", "pickle"])
def test_pickle_member_is_refused_never_decoded(shards, tmp_path, suffix):
    canary = tmp_path / f"unpickled-{suffix}"

    def add_pickle(i, s):
        s[f"target_command.{suffix}"] = pickle.dumps(_Canary(str(canary)))
        return s
    rewrite_shard(shards / "shard-000000.tar", add_pickle)
    with pytest.raises(Exception, match="pickle"):
        eval_keys(shards)
    data, _ = eval_keys(shards, on_error="skip")
    assert data.stats["skipped_samples"] == 8
    assert not canary.exists()


def test_sha256_mismatch_when_verifying(shards):
    shard = shards / "shard-000002.tar"
    data = bytearray(shard.read_bytes())
    data[700] ^= 0xFF    # inside the first member's bytes: the tar still parses
    shard.write_bytes(bytes(data))
    manifest = json.loads((shards / "manifest.json").read_text())
    assert manifest["shards"][2]["sha256"] != sha256_file(shard)
    with pytest.raises(Exception, match="sha256"):
        eval_keys(shards, verify=True)
