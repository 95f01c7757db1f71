"""The registry is the code path: pack, verify --deep, inspect and the loader each use the codec
the registry holds under the manifest's recorded name (or the suffix's, for old manifests).

Codecs are registered for one test and the effect is observed in real packs, shards and
batches; no private function is patched."""
from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from carla_wds import CARLAWebData
from carla_wds.codecs import CODECS, Codec, JsonCodec, PngCodec, register
from carla_wds.manifest_schema import ManifestError
from carla_wds.pack.audit import summary, verify
from carla_wds.pack.packer import PackError
from carla_wds.schema import SampleSpec, SchemaError, encode_sample, validate_sample

from .helpers import SIZE, make_pack, manifest_of


@contextlib.contextmanager
def registered(codec: Codec):
    previous = register(codec)
    try:
        yield codec
    finally:
        if previous is None:
            del CODECS[codec.name]
        else:
            register(previous)


class DoubleSpeed(JsonCodec):
    """Reads a number and doubles it: visible in whatever reads speed.json."""
    name = "speed-x2"

    def decode(self, data):
        return 2 * super().decode(data)


class Inverted(PngCodec):
    """A PNG whose pixels are stored inverted."""
    name = "png-inverted"

    def decode(self, data):
        return 255 - super().decode(data)


class Refusing(JsonCodec):
    name = "json-refusing"

    def check(self, data):
        return "the refusing codec's check ran"


class Cropping(PngCodec):
    """Decodes to one row fewer than its header says."""
    name = "png-cropping"

    def decode(self, data):
        return super().decode(data)[1:]


class SpacedJson(JsonCodec):
    """Writes JSON with spaces: other bytes than the default json codec."""
    name = "json"

    def encode(self, value):
        return json.dumps(value, sort_keys=True).encode("utf-8")


@pytest.fixture(scope="module")
def pristine(zoo) -> Path:
    return zoo(episodes=2, frames=12, max_samples=5)   # shared, read-only (conftest.zoo)


@pytest.fixture()
def shards(pristine, tmp_path) -> Path:
    out = tmp_path / "shards"
    shutil.copytree(pristine, out)
    return out


def record_codec(shards: Path, member: str, name: str | None) -> None:
    """Rewrite the manifest's codec name of one member (None: drop "members", as old packs)."""
    m = manifest_of(shards)
    if name is None:
        m.pop("members")
    else:
        m["members"][member] = name
    (shards / "manifest.json").write_text(json.dumps(m))


def epoch(shards: Path, size: tuple[int, int] = SIZE) -> list:
    data = CARLAWebData(str(shards), batch_size=4, mode="eval", image_size=size, num_workers=0)
    return list(data)


def test_the_manifest_records_each_members_codec(pristine):
    m = manifest_of(pristine)
    assert m["members"] == {"front.png": "png", "speed.json": "json", "meta.json": "json",
                            "target_point.npy": "npy", "target_command.npy": "npy",
                            "waypoints.npy": "npy", "waypoints_diff.npy": "npy",
                            "ego2world.npy": "npy"}   # the pose: issue 27


def test_a_manifest_without_members_still_loads_verifies_and_inspects(shards, pristine):
    before = epoch(pristine)
    record_codec(shards, "", None)
    after = epoch(shards)
    assert len(after) == len(before)
    for a, b in zip(after, before):
        assert a.keys == b.keys
        np.testing.assert_array_equal(a.images.numpy(), b.images.numpy())
        np.testing.assert_array_equal(a.waypoints.numpy(), b.waypoints.numpy())
    assert verify(shards, deep=True, progress=False) == []
    assert summary(shards) == summary(pristine)


def test_the_loader_decodes_with_the_recorded_codecs(shards, pristine):
    packed = tuple(manifest_of(pristine)["image_sizes"]["front"])   # no resize: exact pixels
    before = epoch(pristine, packed)
    with registered(DoubleSpeed()), registered(Inverted()):
        record_codec(shards, "speed.json", "speed-x2")
        record_codec(shards, "front.png", "png-inverted")
        after = epoch(shards, packed)
    valid = before[0].valid.numpy()
    np.testing.assert_allclose(after[0].speed.numpy()[valid], 2 * before[0].speed.numpy()[valid])
    np.testing.assert_array_equal(after[0].images.numpy(), 255 - before[0].images.numpy())


def test_inspect_decodes_with_the_recorded_codecs(shards, pristine):
    with registered(DoubleSpeed()):
        record_codec(shards, "speed.json", "speed-x2")
        doubled = summary(shards)["speed"]
    plain = summary(pristine)["speed"]
    assert doubled["max"] == pytest.approx(2 * plain["max"])
    assert doubled["mean"] == pytest.approx(2 * plain["mean"])


def test_verify_deep_runs_the_recorded_codecs_check(shards):
    with registered(Refusing()):
        record_codec(shards, "meta.json", "json-refusing")
        problems = verify(shards, deep=True, progress=False)
        assert verify(shards, deep=False, progress=False) == []   # only --deep decodes
    total = manifest_of(shards)["total_samples"]
    assert len(problems) == total
    assert all("meta.json: the refusing codec's check ran" in p for p in problems), problems[:2]
    assert all("__00" in p and "shard-0000" in p for p in problems)   # shard and key named


def test_verify_deep_compares_decoded_and_recorded_image_sizes(shards):
    with registered(Cropping()):
        record_codec(shards, "front.png", "png-cropping")
        problems = verify(shards, deep=True, progress=False)
    assert problems and all("front.png: decodes to" in p and "its header says" in p
                            for p in problems), problems[:2]
    record_codec(shards, "front.png", "png")
    m = manifest_of(shards)
    m["image_sizes"]["front"] = [5, 7]
    (shards / "manifest.json").write_text(json.dumps(m))
    problems = verify(shards, deep=True, progress=False)
    assert problems and all("the manifest records 5x7" in p for p in problems), problems[:2]


def test_an_unknown_recorded_codec_is_refused_with_the_fix(shards):
    record_codec(shards, "waypoints.npy", "zarr")
    with pytest.raises(ManifestError, match="members.waypoints.npy is 'zarr'.*upgrade carla-wds"):
        epoch(shards)
    with pytest.raises(ManifestError, match="members.waypoints.npy"):
        verify(shards, progress=False)


def test_a_camera_member_needs_an_image_codec(shards):
    record_codec(shards, "front.png", "json")
    with pytest.raises(SchemaError, match="front.png has codec 'json'.*not an image codec"):
        epoch(shards)


def test_pack_writes_through_the_registry(tmp_path):
    with registered(SpacedJson()):
        out = make_pack(tmp_path, episodes=1, frames=8, max_samples=10)
    from carla_wds.shardread import ShardRef, open_shard, samples_of
    entry = manifest_of(out)["shards"][0]
    ref = ShardRef(str(out / entry["name"]), entry["samples"], entry["bytes"], entry["sha256"])
    stream = open_shard(ref.url, None, ref.sha256, ref.bytes)
    try:
        metas = [bytes(raw["meta.json"]) for raw in samples_of(stream, ref)]
    finally:
        stream.close()
    assert metas and all(b'", "' in m or b'": ' in m for m in metas), metas[0]


def test_pack_checks_source_images_through_the_registry(tmp_path):
    class RefusingPng(PngCodec):
        name = "png"

        def check(self, data):
            return "refused by the registered png codec"
    with registered(RefusingPng()), pytest.raises(PackError) as exc:
        make_pack(tmp_path, episodes=1, frames=8, max_samples=10, on_error="skip")
    assert "refused by the registered png codec" in str(exc.value)
    assert "no samples" in str(exc.value)


def test_validate_sample_checks_sizes_it_is_given():
    spec = SampleSpec(("front",), 4)
    png = CODECS["png"].encode(np.zeros((6, 9, 3), np.uint8))
    labels = {"speed": 1.0, "meta": {}, "target_point": [0, 0], "target_command": np.eye(6)[3],
              "waypoints": np.zeros((4, 2)), "waypoints_diff": np.zeros((4, 2))}
    sample = encode_sample(spec, "k__0000", {"front": png}, labels)
    validate_sample(spec, sample, "s:k__0000", sizes=((6, 9),))
    validate_sample(spec, sample, "s:k__0000")   # packs made before sizes were recorded
    with pytest.raises(SchemaError, match="s:k__0000: front.png.*the manifest records 9x6"):
        validate_sample(spec, sample, "s:k__0000", sizes=((9, 6),))


def test_a_fresh_process_has_every_modality_codec():
    """Importing carla_wds.codecs alone registers the modality codecs (a pack or a loader must
    never meet 'no codec named depth_garage8' because nothing imported carla_wds.modalities)."""
    import subprocess
    import sys
    for first in ("codecs", "codecbase", "modalities", "datasets", "modalities_b2d"):   # any order
        code = (f"import carla_wds.{first}; from carla_wds.codecs import CODECS; "
                "print(' '.join(sorted(CODECS)))")
        names = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                               check=True).stdout.split()
        for name in ("png", "jpg", "npy", "json", "record", "depth_carla24", "depth_garage8",
                     "semantics", "bev_tf2022", "bev_classes", "points", "laz", "depth_b2d8",
                     "instance"):
            assert name in names
