"""`carla-wds pack` end to end on real files: round trip, determinism, readers, output-folder
policy, --part + merge, re-encoding and shard size limits (crash safety and resume:
test_pack_resume.py)."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tarfile
from pathlib import Path

import cv2
import numpy as np
import pytest
import webdataset as wds

from ..helpers import manifest_of, shard_hashes

CAMERA_FOLDERS = {"tcp": {"front": "rgb"},
                  "transfuser4": {"front": "rgb_front", "rear": "rgb_rear", "left": "rgb_left",
                                  "right": "rgb_right"}}






# ---------------------------------------------------------------- round trip

@pytest.mark.parametrize("layout", ["tcp", "transfuser4"])
def test_round_trip_bytes_pixels_meta_keys(layout, request, samples_of):
    raw = request.getfixturevalue("raw_tcp" if layout == "tcp" else "raw_tf4")
    packed = request.getfixturevalue("packed_tcp" if layout == "tcp" else "packed_tf4")
    samples = samples_of(packed)
    assert len(samples) == 78
    cams = CAMERA_FOLDERS[layout]
    expected_members = {f"{c}.png" for c in cams} | {
        "speed.json", "target_point.npy", "target_command.npy", "waypoints.npy",
        "waypoints_diff.npy", "meta.json", "ego2world.npy"}   # the pose: issue 27
    for key, members in samples.items():
        assert "." not in key
        assert set(members) == expected_members, key
        meta = json.loads(members["meta.json"])
        assert set(meta) == {"episode", "frame", "command"}
        assert key == f"{meta['episode'].replace('/', '__')}__{meta['frame']:04d}"
        route = raw / meta["episode"]
        assert (route / "measurements" / f"{meta['frame']:04d}.json").is_file()
        for cam, folder in cams.items():
            src = route / folder / f"{meta['frame']:04d}.png"
            data = members[f"{cam}.png"]
            assert data == src.read_bytes(), f"{key} {cam}: bytes not copied verbatim"
            pixels = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
            np.testing.assert_array_equal(pixels, cv2.imread(str(src), cv2.IMREAD_UNCHANGED))
            assert pixels.shape == (48, 64, 3)


def test_shards_are_uneven_and_ordered(packed_tcp, samples_of):
    manifest = manifest_of(packed_tcp)
    assert [s["samples"] for s in manifest["shards"]] == [7] * 11 + [1]
    assert [s["name"] for s in manifest["shards"]] == [f"shard-{i:06d}.tar" for i in range(12)]
    metas = [json.loads(m["meta.json"]) for m in samples_of(packed_tcp).values()]
    order = [(m["episode"], m["frame"]) for m in metas]
    assert order == sorted(order)      # routes sorted, frames ascending


def test_manifest_fields(packed_tf4):
    m = manifest_of(packed_tf4)
    for k in ("schema_version", "layout", "cameras", "pred_len", "shards", "total_samples",
              "skipped", "pack_args", "tool_version"):
        assert k in m, k
    assert m["cameras"] == ["front", "rear", "left", "right"]
    assert m["pred_len"] == 4 and m["layout"] == "transfuser4" and m["image_format"] == "png"
    assert m["pack_args"]["max_samples"] == 7 and m["pack_args"]["layout"] == "transfuser4"
    for shard in m["shards"]:
        # issue 27: where routes begin and break (sequence.py)
        assert set(shard) == {"name", "samples", "bytes", "sha256", "first_key", "last_key",
                              "steps", "buckets"}   # issue 29: pack/buckets.py


# ---------------------------------------------------------------- determinism

def test_two_packs_are_byte_identical(raw_tcp, packed_tcp, tmp_path, packer):
    packer(raw_tcp, tmp_path / "again", max_samples=7)
    assert shard_hashes(tmp_path / "again") == shard_hashes(packed_tcp)
    assert manifest_of(tmp_path / "again")["shards"] == manifest_of(packed_tcp)["shards"]


def test_workers_1_and_2_are_byte_identical(raw_tf4, packed_tf4, tmp_path, packer, caplog):
    """--check-images decodes every image, so the worker pool is really used."""
    with caplog.at_level("INFO", logger="carla_wds.pack.packer"):
        packer(raw_tf4, tmp_path / "w2", layout="transfuser4", max_samples=7, workers=2,
               check_images=True, all_frames=True)   # as packed_tf4
    assert "not needed" not in caplog.text
    one, two = shard_hashes(packed_tf4), shard_hashes(tmp_path / "w2")
    assert len(one) == 12 and one == two
    for name in one:
        assert (packed_tf4 / name).read_bytes() == (tmp_path / "w2" / name).read_bytes()


def test_workers_1_and_2_identical_when_reencoding(raw_tf4, tmp_path, packer):
    opts = dict(layout="transfuser4", max_samples=5, image_format="jpg", quality=80,
                resize=(24, 32), all_frames=True)
    packer(raw_tf4, tmp_path / "w1", workers=1, **opts)
    packer(raw_tf4, tmp_path / "w2", workers=2, **opts)
    assert shard_hashes(tmp_path / "w1") == shard_hashes(tmp_path / "w2")
    assert len(shard_hashes(tmp_path / "w1")) == 16


def test_passthrough_with_workers_is_identical(raw_tf4, packed_tf4, tmp_path, packer):
    for workers in (2, 3):
        packer(raw_tf4, tmp_path / f"w{workers}", layout="transfuser4", max_samples=7,
               workers=workers, all_frames=True)   # as packed_tf4
        assert shard_hashes(tmp_path / f"w{workers}") == shard_hashes(packed_tf4)


def test_shard_bytes_equal_webdataset_tarwriter(tmp_path):
    """The shard writer builds tar headers itself; its bytes must be TarWriter's exactly
    (short and >100-character member names, members above and below one block)."""
    import io
    import random

    from carla_wds.pack.shards import ShardSink
    rnd = random.Random(0)
    for i, key_len in enumerate((5, 80, 95, 120)):
        key = "".join(rnd.choice("abcXYZ_-0123456789") for _ in range(key_len))
        sample = {"__key__": key, "front.png": rnd.randbytes(70_000 + i), "meta.json": b"{}",
                  "speed.json": b"", "waypoints_diff.npy": rnd.randbytes(512)}
        ref = io.BytesIO()
        writer = wds.TarWriter(ref, user="", group="", mode=0o644, mtime=0, encoder=False)
        writer.write(sample)
        writer.close()
        sink = ShardSink(tmp_path, f"s{i}", max_samples=10, max_bytes=None)
        sink.add(sample)
        sink.close()
        assert (tmp_path / f"s{i}-000000.tar").read_bytes() == ref.getvalue(), key_len


def test_tar_headers_are_fixed(packed_tcp):
    with tarfile.open(packed_tcp / "shard-000000.tar") as tar:
        members = tar.getmembers()
    assert members and all(m.mtime == 0 and m.uname == "" and m.gname == "" and m.mode == 0o644
                           and m.isfile() for m in members)


# ---------------------------------------------------------------- readers

def test_plain_tarfile_and_webdataset_agree(packed_tf4, samples_of):
    from_tar = list(samples_of(packed_tf4).items())
    urls = [str(packed_tf4 / s["name"]) for s in manifest_of(packed_tf4)["shards"]]
    from_wds = [(s["__key__"], {k: v for k, v in s.items() if not k.startswith("__")})
                for s in wds.WebDataset(urls, shardshuffle=False)]
    assert len(from_wds) == len(from_tar) == 78
    assert [k for k, _ in from_wds] == [k for k, _ in from_tar]
    for (key, a), (_, b) in zip(from_tar, from_wds):
        assert a == b, key


# ---------------------------------------------------------------- output folder policy

def test_non_empty_output_dir_is_refused_and_left_alone(raw_tcp, tmp_path, cli):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    result = cli("pack", raw_tcp, out)
    assert result.exit_code != 0
    assert "not empty" in result.output and "--overwrite" in result.output
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


def test_overwrite_replaces_the_output(raw_tcp, packed_tcp, copy_tree, cli):
    out = copy_tree(packed_tcp, "out")
    (out / "stale.tar").write_bytes(b"old")
    result = cli("pack", raw_tcp, out, "--overwrite", "--max-samples", "7")
    assert result.exit_code == 0, result.output
    assert not (out / "stale.tar").exists()
    assert shard_hashes(out) == shard_hashes(packed_tcp)


# ---------------------------------------------------------------- --part and merge

def test_parts_then_merge_equal_a_single_pack(raw_tcp, packed_tcp, tmp_path, cli, samples_of):
    for i in range(2):
        result = cli("pack", raw_tcp, tmp_path / f"p{i}", "--part", f"{i}/2", "--max-samples", "7")
        assert result.exit_code == 0, result.output
    parts = [manifest_of(tmp_path / f"p{i}") for i in range(2)]
    assert all(p["total_samples"] > 0 for p in parts)
    result = cli("merge", tmp_path / "p0", tmp_path / "p1", "--out", tmp_path / "merged")
    assert result.exit_code == 0, result.output
    merged = manifest_of(tmp_path / "merged")
    full = manifest_of(packed_tcp)
    assert merged["total_samples"] == full["total_samples"] == 78
    assert merged["counts"] == full["counts"]
    assert merged["shards"][0]["name"] == "shard-000000.tar"
    a, b = samples_of(tmp_path / "merged"), samples_of(packed_tcp)
    assert list(a) == list(b)                  # same keys, same order
    assert all(a[k] == b[k] for k in a)
    assert cli("verify", tmp_path / "merged").exit_code == 0


def test_merge_refuses_repeated_or_missing_parts(raw_tcp, tmp_path, cli):
    for i in range(2):
        assert cli("pack", raw_tcp, tmp_path / f"p{i}", "--part", f"{i}/2").exit_code == 0
    repeated = cli("merge", tmp_path / "p0", tmp_path / "p0", "--out", tmp_path / "m1")
    assert repeated.exit_code != 0 and "exactly the parts 0..N-1" in repeated.output
    missing = cli("merge", tmp_path / "p1", "--out", tmp_path / "m2")
    assert missing.exit_code != 0 and "exactly the parts 0..N-1" in missing.output
    assert cli("pack", raw_tcp, tmp_path / "q1", "--part", "1/2", "--max-samples", "5"
               ).exit_code == 0
    mixed = cli("merge", tmp_path / "p0", tmp_path / "q1", "--out", tmp_path / "m3")
    assert mixed.exit_code != 0 and "max_samples" in mixed.output


def test_part_out_of_range_is_refused(raw_tcp, tmp_path, cli):
    result = cli("pack", raw_tcp, tmp_path / "out", "--part", "2/2")
    assert result.exit_code != 0 and "0 <= i < N" in result.output


# ---------------------------------------------------------------- re-encoding, sizes

def _decoded(data: bytes) -> np.ndarray:
    img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    assert img is not None
    return img


def test_jpg_reencode(raw_tf4, tmp_path, cli, samples_of):
    out = tmp_path / "jpg"
    result = cli("pack", raw_tf4, out, "--layout", "transfuser4", "--image-format", "jpg",
                 "--quality", "90", "--max-samples", "20")
    assert result.exit_code == 0, result.output
    assert manifest_of(out)["image_format"] == "jpg"
    samples = samples_of(out)
    assert len(samples) == 3 * (30 - 4 - 2)   # TransFuser 2021's frames 1 .. n - pred_len - 2
    key = "Town01_tiny__routes_00__0003"
    for cam, folder in CAMERA_FOLDERS["transfuser4"].items():
        data = samples[key][f"{cam}.jpg"]
        assert data[:2] == b"\xff\xd8"
        img = _decoded(data)
        src = cv2.imread(str(raw_tf4 / "Town01_tiny" / "routes_00" / folder / "0003.png"))
        assert img.shape == src.shape == (48, 64, 3)
        assert np.abs(img.astype(int) - src.astype(int)).mean() < 8    # lossy but close
    assert not any(k.endswith(".png") for m in samples.values() for k in m)
    assert cli("verify", out, "--deep").exit_code == 0


@pytest.mark.parametrize("fmt", ["png", "jpg"])
def test_resize(raw_tcp, tmp_path, cli, samples_of, fmt):
    out = tmp_path / fmt
    result = cli("pack", raw_tcp, out, "--resize", "24x40", "--image-format", fmt)
    assert result.exit_code == 0, result.output
    assert manifest_of(out)["pack_args"]["resize"] == [24, 40]
    for members in samples_of(out).values():
        assert _decoded(members[f"front.{fmt}"]).shape == (24, 40, 3)


def test_max_bytes_limits_shard_sizes(raw_tcp, tmp_path, packer):
    limit = 40_000
    manifest = packer(raw_tcp, tmp_path / "out", max_bytes=limit)
    sizes = {p.name: p.stat().st_size for p in (tmp_path / "out").glob("*.tar")}
    assert len(sizes) > 3 and manifest["total_samples"] == 78
    assert max(sizes.values()) <= limit, sizes
    assert {s["name"]: s["bytes"] for s in manifest["shards"]} == sizes
    # A sample larger than the limit still gets packed, alone in its shard.
    tiny = packer(raw_tcp, tmp_path / "tiny", max_bytes=1_000)
    assert [s["samples"] for s in tiny["shards"]] == [1] * 78


def test_max_bytes_with_long_route_names(raw_tcp, tmp_path, packer):
    """Member names over 100 characters get PAX headers; the size limit must count them."""
    raw = tmp_path / "raw"
    long = "a_very_long_town_folder_name_" * 3
    for route in sorted(raw_tcp.glob("*/*")):
        shutil.copytree(route, raw / long / (route.name + "_with_a_long_suffix"),
                        copy_function=os.link)
    packer(raw, tmp_path / "out", max_bytes=40_000)
    sizes = [p.stat().st_size for p in (tmp_path / "out").glob("*.tar")]
    assert len(sizes) > 3 and max(sizes) <= 40_000


def test_dot_replacement_collision_is_refused(tmp_path):
    from carla_wds.pack.packer import PackOptions, pack
    from carla_wds.pack.routes import PackError
    from carla_wds.pack.synth import synth_dataset
    raw = tmp_path / "raw"
    synth_dataset(raw, "tcp", episodes=1, frames=6, seed=0, image_size=(24, 32), progress=False)
    route = next(p for p in raw.rglob("measurements")).parent
    shutil.copytree(route, route.parent / "r.x")
    shutil.copytree(route, route.parent / "r_x")
    with pytest.raises(PackError, match="same sample keys"):
        pack(raw, tmp_path / "out", PackOptions(dot_replacement="_", progress=False))


def test_no_fsync_gives_the_same_shards(raw_tcp, packed_tcp, tmp_path, cli):
    """--no-fsync changes durability only: same bytes, same manifest shards, and a resume of
    a --no-fsync pack may use the default (the option is not part of the output's identity)."""
    result = cli("pack", raw_tcp, tmp_path / "nofsync", "--max-samples", "7", "--no-fsync")
    assert result.exit_code == 0, result.output
    assert shard_hashes(tmp_path / "nofsync") == shard_hashes(packed_tcp)
    assert manifest_of(tmp_path / "nofsync")["shards"] == manifest_of(packed_tcp)["shards"]
    assert "fsync" not in manifest_of(tmp_path / "nofsync")["pack_args"]
