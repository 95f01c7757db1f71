"""The codec registry (carla_wds.codecs): round trips, structural checks, pickle refusal, and
the shards already packed decoding and re-encoding to their own bytes."""
from __future__ import annotations

import io
import pickle

import cv2
import numpy as np
import pytest

from carla_wds.codecs import (
    CODECS,
    JpegCodec,
    JsonCodec,
    SchemaError,
    codec_for,
    codec_named,
    register,
)
from carla_wds.fileio import sha256_file
from carla_wds.manifest import read_manifest
from carla_wds.pack.shards import ShardSink
from carla_wds.schema import LABELS, decode_labels, encode_sample
from carla_wds.shardread import ShardRef, open_shard, samples_of

RNG = np.random.default_rng(7)
# smooth, as camera images are (JPEG's error on noise says nothing about the codec)
_Y, _X = np.mgrid[0:21, 0:34]
RGB = np.stack([_X * 7, _Y * 12, (_X + _Y) * 4], -1).astype(np.uint8)
VALUES = {
    "png": RGB,
    "jpg": RGB,
    "npy": RNG.standard_normal((5, 2)).astype(np.float32),
    "json": {"episode": "Town01/r", "frame": 3, "speed": [1.5, None, True], "é": "ü"},
}


def test_the_registry_holds_todays_kinds_under_their_names():
    assert {"png", "jpg", "npy", "json"} <= set(CODECS)
    for name, codec in CODECS.items():
        assert codec.name == name
        assert codec_named(name) is codec


@pytest.mark.parametrize("name", sorted(VALUES))
def test_each_codec_round_trips(name):
    codec = CODECS[name]
    data = codec.encode(VALUES[name])
    assert isinstance(data, bytes) and codec.check(data) is None
    back = codec.decode(data)
    if name == "jpg":   # lossy: same shape and dtype, pixels close
        assert back.shape == RGB.shape and back.dtype == np.uint8
        assert np.abs(back.astype(int) - RGB).mean() < 20
    elif name in ("png", "npy"):
        np.testing.assert_array_equal(back, VALUES[name])
        assert back.dtype == VALUES[name].dtype
    else:
        assert back == VALUES[name]
    assert codec.encode(back if name != "jpg" else VALUES[name]) == data   # deterministic
    assert codec.decode(memoryview(data)) is not None   # shards hand out memoryviews


@pytest.mark.parametrize("name", sorted(VALUES))
def test_check_catches_every_truncation(name):
    """Cut anywhere (a byte, a tenth, half, all but one byte): check() names a problem."""
    data = CODECS[name].encode(VALUES[name])
    cuts = sorted({1, 2, 8, len(data) // 10, len(data) // 2, len(data) - 1} - {0})
    for cut in cuts:
        problem = CODECS[name].check(data[:cut])
        assert problem, f"{name} cut to {cut} of {len(data)} bytes passed check()"
        assert CODECS[name].check(memoryview(data)[:cut]) == problem


def test_check_refuses_other_kinds_and_object_arrays():
    png, jpg = CODECS["png"].encode(RGB), CODECS["jpg"].encode(RGB)
    assert "not a PNG" in CODECS["png"].check(jpg)
    assert "JPEG" in CODECS["jpg"].check(png)
    assert CODECS["jpg"].check(jpg + b"\x00" * 7) is None   # zero padding after EOI is legal
    buf = io.BytesIO()
    np.save(buf, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    assert "object array" in CODECS["npy"].check(buf.getvalue())
    assert "not UTF-8 JSON" in CODECS["json"].check(b"\xff\xfe{")
    assert "complete .npy" in CODECS["npy"].check(CODECS["npy"].encode(VALUES["npy"]) + b"\0")


def test_image_codecs_read_the_size_from_the_header_and_take_quality():
    for name in ("png", "jpg"):
        assert CODECS[name].size(CODECS[name].encode(RGB)) == RGB.shape[:2]
    low, high = (CODECS["jpg"].with_options(quality=q).encode(RGB) for q in (10, 95))
    assert len(low) < len(high) and high == CODECS["jpg"].encode(RGB)   # 95 is the default
    assert CODECS["png"].with_options(quality=10) is CODECS["png"]   # not a PNG option
    assert isinstance(CODECS["jpg"].with_options(quality=10), JpegCodec)


def test_npy_bytes_are_np_save_bytes_for_label_shapes():
    for value in (np.zeros((4, 2), np.float32), np.ones(6, np.float32), np.float32(2.5)):
        buf = io.BytesIO()
        np.save(buf, value, allow_pickle=False)
        assert CODECS["npy"].encode(value) == buf.getvalue()


@pytest.mark.parametrize("member", ["target_command.pth", "x.pkl", "y.PICKLE", "z.pt", "w.pyd"])
def test_the_registry_refuses_pickle_suffixes(member):
    with pytest.raises(SchemaError, match="pickle") as exc:
        codec_for(member)
    assert exc.value.fix and "re-pack" in exc.value.fix


def test_a_codec_cannot_be_registered_under_a_pickle_name():
    class Pickled(JsonCodec):
        name = "pkl"
    with pytest.raises(SchemaError, match="pickle"):
        register(Pickled())
    assert "pkl" not in CODECS


def test_an_unknown_codec_name_says_what_to_do():
    with pytest.raises(SchemaError, match="no codec named 'lidar-laz'") as exc:
        codec_named("lidar-laz")
    assert "upgrade carla-wds" in str(exc.value)


def test_schema_errors_keep_reason_and_fix_across_processes():
    err = pickle.loads(pickle.dumps(SchemaError("route 'a.b' has a dot", fix="rename it")))
    assert (err.reason, err.fix) == ("route 'a.b' has a dot", "rename it")
    assert str(err) == "route 'a.b' has a dot. Fix: rename it"


@pytest.mark.parametrize("fixture", ["packed_tcp", "packed_tf4"])
def test_every_packed_shard_round_trips_byte_identically(fixture, request, tmp_path):
    """Decode every member of every shard through the manifest's codecs, encode the values
    again through the registry and write the shards anew: the same sha256, shard by shard."""
    manifest = read_manifest(request.getfixturevalue(fixture))
    spec = manifest.spec
    sink = ShardSink(tmp_path, "shard", max(s.samples for s in manifest.shards), None,
                     fsync=False)
    for entry, url in zip(manifest.shards, manifest.shard_urls()):
        ref = ShardRef(url, entry.samples, entry.bytes, entry.sha256)
        stream = open_shard(ref.url, None, ref.sha256, ref.bytes, verify=True)
        try:
            for raw in samples_of(stream, ref):
                labels = decode_labels(spec, raw, raw["__key__"])
                images = {c: bytes(raw[m]) for c, m in zip(spec.cameras, spec.image_members)}
                again = encode_sample(spec, raw["__key__"], images, labels)
                for label in LABELS:   # each label member on its own, too
                    assert again[label.member] == bytes(raw[label.member]), label.member
                # the other members (issue 27's ego pose), each through its own codec
                for member in sorted(set(raw) - set(again)):
                    if not member.startswith("__"):
                        codec = spec.codec(member)
                        again[member] = codec.encode(codec.decode(bytes(raw[member])))
                        assert again[member] == bytes(raw[member]), member
                sink.add(again)
        finally:
            stream.close()
    records = sink.close()
    assert [r.sha256 for r in records] == [s.sha256 for s in manifest.shards]
    assert [sha256_file(tmp_path / r.name) for r in records] == [r.sha256 for r in records]


def test_png_pixels_survive_decode_then_encode(packed_tf4, samples_of):
    sample = next(iter(samples_of(packed_tf4).values()))
    pixels = CODECS["png"].decode(sample["front.png"])
    expected = cv2.cvtColor(cv2.imdecode(np.frombuffer(sample["front.png"], np.uint8),
                                         cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
    np.testing.assert_array_equal(pixels, expected)
    np.testing.assert_array_equal(CODECS["png"].decode(CODECS["png"].encode(pixels)), pixels)


@pytest.mark.parametrize("ext,flags", [(".jpg", []), (".jpg", [cv2.IMWRITE_JPEG_QUALITY, 40]),
                                       (".png", [])])
def test_images_decode_as_rgb_the_same_with_or_without_opencvs_rgb_flag(monkeypatch, ext, flags):
    """OpenCV >= 4.10 decodes straight to RGB (codecbase._IMREAD_RGB); the pixels are those of
    a BGR decode then cvtColor, colour and gray files alike (pyspng is kept out)."""
    import carla_wds.codecbase as cb
    rng = np.random.default_rng(7)
    smooth = cv2.GaussianBlur(rng.integers(0, 256, (45, 80, 3), dtype=np.uint8), (5, 5), 0)
    for img in (smooth, cv2.cvtColor(smooth, cv2.COLOR_BGR2GRAY)):
        data = cv2.imencode(ext, img, flags)[1].tobytes()
        monkeypatch.setattr(cb, "pyspng", None)
        codec = cb.ImageCodec()   # decode does not depend on the extension
        got = codec.decode(data)
        monkeypatch.setattr(cb, "_IMREAD_RGB", None)
        want = codec.decode(data)
        monkeypatch.undo()
        assert got.shape == want.shape == (45, 80, 3) and np.array_equal(got, want)
        assert np.array_equal(want, cv2.cvtColor(cv2.imdecode(np.frombuffer(data, np.uint8),
                                                              cv2.IMREAD_COLOR),
                                                 cv2.COLOR_BGR2RGB))
