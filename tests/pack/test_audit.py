"""manifest.json against the tar files; `carla-wds verify [--deep]`, `inspect`, `merge` checks."""
from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import webdataset as wds

# fixtures:
from tests.pack.datasets.routes.test_layout_garage import packed_garage, raw_garage  # noqa: F401

ROAD_OPTIONS = {1: "LEFT", 2: "RIGHT", 3: "STRAIGHT", 4: "LANEFOLLOW", 5: "CHANGELANELEFT",
                6: "CHANGELANERIGHT"}


def manifest_of(pack_dir: Path) -> dict:
    return json.loads((pack_dir / "manifest.json").read_text())


def test_manifest_agrees_with_tar_contents(packed_tcp, packed_tf4):
    for pack_dir in (packed_tcp, packed_tf4):
        m = manifest_of(pack_dir)
        assert sorted(p.name for p in pack_dir.glob("*.tar")) == [s["name"] for s in m["shards"]]
        total = 0
        for shard in m["shards"]:
            path = pack_dir / shard["name"]
            data = path.read_bytes()
            assert hashlib.sha256(data).hexdigest() == shard["sha256"]
            assert len(data) == shard["bytes"]
            with tarfile.open(path) as tar:
                names = tar.getnames()
            keys = {n.split(".", 1)[0] for n in names}
            assert len(keys) == shard["samples"]
            # cameras, the 6 label members and the frame's ego pose (issue 27)
            assert len(names) == shard["samples"] * (len(m["cameras"]) + 7)
            total += len(keys)
        assert total == m["total_samples"] == m["counts"]["samples"]
        assert m["schema_version"] == 2 and m["tool_version"]


def test_verify_passes_on_a_good_pack(packed_tcp, packed_tf4, cli):
    for pack_dir in (packed_tcp, packed_tf4):
        for args in ([], ["--deep"]):
            result = cli("verify", pack_dir, *args)
            assert result.exit_code == 0, result.output
            assert "OK" in result.output


def test_verify_fails_after_flipping_one_byte(packed_tcp, copy_tree, cli):
    pack_dir = copy_tree(packed_tcp, "flipped")
    shard = pack_dir / "shard-000003.tar"
    data = bytearray(shard.read_bytes())
    data[len(data) // 3] ^= 0x01
    shard.write_bytes(bytes(data))
    result = cli("verify", pack_dir)
    assert result.exit_code != 0
    assert "shard-000003.tar" in result.output and "sha256" in result.output
    assert "shard-000002.tar" not in result.output


def test_verify_fails_on_missing_shard_and_wrong_count(packed_tcp, copy_tree, cli):
    pack_dir = copy_tree(packed_tcp, "broken")
    (pack_dir / "shard-000005.tar").unlink()
    result = cli("verify", pack_dir)
    assert result.exit_code != 0 and "shard-000005.tar: missing" in result.output

    pack_dir = copy_tree(packed_tcp, "miscounted")
    m = manifest_of(pack_dir)
    m["shards"][0]["samples"] += 1
    m["total_samples"] += 1   # else the manifest itself is refused as inconsistent
    m["shards"][0].pop("buckets")   # as are bucket runs not of the shard's samples
    (pack_dir / "manifest.json").write_text(json.dumps(m))
    result = cli("verify", pack_dir)
    assert result.exit_code != 0 and "manifest says 8" in result.output


def test_verify_deep_catches_a_wrong_waypoint_shape(packed_tcp, copy_tree, cli):
    """A sample rewritten by hand with waypoints of shape (3, 2); the manifest's checksums are
    updated so that only --deep (which decodes every sample) can notice."""
    pack_dir = copy_tree(packed_tcp, "handmade")
    shard = pack_dir / "shard-000002.tar"
    samples: dict[str, dict[str, bytes]] = {}
    with tarfile.open(shard) as tar:
        for member in tar:
            key, _, suffix = member.name.partition(".")
            samples.setdefault(key, {})[suffix] = tar.extractfile(member).read()
    victim = list(samples)[3]
    buf = io.BytesIO()
    np.save(buf, np.zeros((3, 2), np.float32))
    samples[victim]["waypoints.npy"] = buf.getvalue()
    with open(shard, "wb") as f:
        writer = wds.TarWriter(f, user="", group="", mode=0o644, mtime=0, encoder=False)
        for key, members in samples.items():
            writer.write({"__key__": key, **members})
        writer.close()
    m = manifest_of(pack_dir)
    data = shard.read_bytes()
    m["shards"][2].update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))
    (pack_dir / "manifest.json").write_text(json.dumps(m))

    assert cli("verify", pack_dir).exit_code == 0
    result = cli("verify", pack_dir, "--deep")
    assert result.exit_code != 0
    assert victim in result.output and "waypoints.npy" in result.output
    assert "(3, 2)" in result.output and "(4, 2)" in result.output


def test_verify_without_a_manifest_says_so(tmp_path, cli):
    result = cli("verify", tmp_path)
    assert result.exit_code != 0 and "no manifest" in result.output
    assert "Traceback" not in result.output


def test_verify_refuses_other_schema_version(packed_tcp, copy_tree, cli):
    pack_dir = copy_tree(packed_tcp, "future")
    m = manifest_of(pack_dir)
    m["schema_version"] = 99
    (pack_dir / "manifest.json").write_text(json.dumps(m))
    result = cli("verify", pack_dir)
    assert result.exit_code != 0 and "schema_version 99" in result.output


def test_inspect_shows_samples_and_commands(packed_tcp, raw_tcp, cli, samples_of):
    expected = Counter()
    for members in samples_of(packed_tcp).values():
        meta = json.loads(members["meta.json"])
        meas = json.loads((raw_tcp / meta["episode"] / "measurements" /
                           f"{meta['frame']:04d}.json").read_text())
        expected[ROAD_OPTIONS[meas["target_command"]]] += 1
    assert len(expected) >= 2        # the synthetic routes have turns, not only lane following
    result = cli("inspect", packed_tcp)
    assert result.exit_code == 0, result.output
    assert "78 samples in 12 shards" in result.output
    for name, n in expected.items():
        assert f"{name} {n}" in result.output, result.output
    as_json = json.loads(cli("inspect", packed_tcp, "--json").output)
    assert as_json["samples"] == 78 and as_json["commands"] == dict(expected)
    assert as_json["layout"] == "tcp" and as_json["shards"] == 12
    # the routes as history windows see them (issue 27): every frame a sample, no gap
    seq = as_json["sequence"]
    assert seq["frame_step"] == 1 and seq["gaps"] == 0 and seq["continuing_shards"] > 0
    assert f"{seq['continuing_shards']} shards go on with the route before" in result.output


def test_merge_refuses_mismatched_parts_and_busy_output(packed_tcp, packed_tf4, tmp_path, cli):
    result = cli("merge", packed_tcp, packed_tf4, "--out", tmp_path / "m")
    assert result.exit_code != 0 and "same options" in result.output
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "x").write_text("x")
    result = cli("merge", packed_tcp, "--out", busy)
    assert result.exit_code != 0 and "not empty" in result.output


def test_verify_reports_an_unreadable_tar(packed_tcp, copy_tree):
    from carla_wds.pack.audit import verify
    pack_dir = copy_tree(packed_tcp, "truncated")
    shard = pack_dir / "shard-000003.tar"
    shard.write_bytes(shard.read_bytes()[:700])
    problems = verify(pack_dir, progress=False)
    assert any("shard-000003.tar" in p and "not a readable tar" in p for p in problems), problems


@pytest.mark.parametrize("member,value", [
    ("meta.json", b"[1, 2]"), ("meta.json", b'{"command": "left"}'), ("meta.json", b"{}"),
    ("speed.json", b'"fast"'), ("speed.json", b"[3.0]")])
def test_inspect_on_members_of_other_types_is_one_line(packed_tcp, copy_tree, cli, member,
                                                       value):
    """A shard whose members hold other JSON types than a pack writes (consistent with its
    manifest, so only the values are wrong) is named by `inspect`, never a traceback."""
    from tests.helpers import rewrite_shard
    pack = copy_tree(packed_tcp)
    shard = sorted(pack.glob("*.tar"))[1]
    rewrite_shard(shard, lambda i, s: {**s, member: value} if i == 2 else s)
    result = cli("inspect", pack)
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    assert shard.name in result.output and member in result.output, result.output


def test_inspect_lists_the_fields_a_pack_holds(packed_garage, cli):  # noqa: F811
    """What CARLAWebData(fields=[...]) can select, named by inspect (text and --json): each
    one the loader accepts, the twins (served in their field's place) left out."""
    from carla_wds import CARLAWebData
    as_json = json.loads(cli("inspect", packed_garage, "--json").output)
    names = list(as_json["fields"])
    assert {"depth", "semantics", "lidar", "boxes", "measurements"} <= set(names)
    assert not any(n.endswith("_augmented") for n in names)
    assert "training classes" in as_json["fields"]["semantics"]
    assert "steer" in as_json["fields"]["measurements"]
    CARLAWebData(str(packed_garage), batch_size=2, fields=names)   # every one selectable
    text = cli("inspect", packed_garage).output
    for name in names:
        assert f"field {name}: " in text, text
