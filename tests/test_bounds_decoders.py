"""One bounded-decode rule per decoder (issue 23): what a file's header declares (a LAZ point
count, an image's pixels, an .npy shape, JSON nesting) is checked against limits.py before
anything is allocated, in the codec's own code path, so pack, verify --deep, inspect and the
loader all refuse it with one line naming the file and the limit to raise.

Bombs stay small: headers declare just over a default limit, or a small limit is set with
limits.using(...), and tracemalloc shows that a refusal allocates nothing of the declared size.
"""
from __future__ import annotations

import io
import json
import shutil
import struct
import tracemalloc
import zlib
from pathlib import Path

import numpy as np
import pytest

from carla_wds import CARLAWebData, limits
from carla_wds.codecs import CODECS, codec_named
from carla_wds.limits import LimitError
from carla_wds.manifest_schema import ManifestError
from carla_wds.pack.audit import summary, verify
from carla_wds.pack.errors import PackError
from carla_wds.pack.sources import decode_json, read_npy
from tests.conftest import make_raw
# every frame with a full future: 12-frame garage routes hold none of garage's own range
from tests.conftest import run_pack_all_frames as run_pack
from tests.helpers import SIZE, rewrite_shard

OVER_POINTS = limits.DEFAULT.lidar_points + 1      # ~80 MB of LAS records if allocated


def peak_of(call) -> tuple[BaseException | None, int]:
    """(the exception `call` raised, the peak bytes traced while it ran)."""
    tracemalloc.start()
    try:
        call()
        err = None
    except Exception as exc:  # noqa: BLE001 - returned for the test to assert on
        err = exc
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return err, peak


def laz_claiming(laz: bytes, points: int) -> bytes:
    """The same LAZ with its header's legacy point count rewritten (offset 107, uint32)."""
    out = bytearray(laz)
    out[107:111] = struct.pack("<I", points)
    return bytes(out)


def png_header_only(h: int, w: int, colour: int = 0) -> bytes:
    """Signature, IHDR declaring h x w (8-bit, `colour` type), IEND: a whole PNG to the
    cheap structure check, declaring h*w pixels."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return (struct.pack(">I", len(body)) + kind + body
                + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF))
    ihdr = struct.pack(">IIBBBBB", w, h, 8, colour, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IEND", b"")


def npy_claiming(shape: tuple[int, ...], dtype: str = "<f4") -> bytes:
    """An .npy header declaring `shape`, followed by a few bytes only."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": dtype, "fortran_order": False,
                                               "shape": shape})
    return buf.getvalue() + bytes(64)


def garage_layout(tmp: Path) -> Path:
    """The garage layout keeping LAZ bytes as `lidar.laz` members (codec laz), as its YAML
    comment offers, so shards hold a LAZ member the loader decodes."""
    from carla_wds.pack.datasets.routes.layouts import LAYOUT_DIR
    text = (LAYOUT_DIR / "garage.yaml").read_text()
    text = text.replace("codec: points, read: laz_points", "codec: laz")
    assert "codec: laz}" in text
    path = tmp / "garage_laz.yaml"
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def raw_garage(tmp_path_factory) -> Path:
    return make_raw(tmp_path_factory.mktemp("bounds_garage"), "garage", episodes=1, frames=12)


@pytest.fixture()
def raw(raw_garage, tmp_path) -> Path:
    out = tmp_path / "raw"
    shutil.copytree(raw_garage, out)
    return out


def one(raw: Path, pattern: str) -> Path:
    return sorted(raw.glob("**/" + pattern))[1]   # frame 0001 of the first route


def test_laz_point_count_is_bounded_before_decompressing(raw, tmp_path):
    """LazCodec: pack (laz_points, which Bench2Drive's lidar uses too), verify --deep and the
    loader refuse a LAZ whose header claims more than lidar_points, before laspy allocates."""
    laz = one(raw, "lidar/*.laz")
    good = laz.read_bytes()
    bomb = laz_claiming(good, OVER_POINTS)
    err, peak = peak_of(lambda: codec_named("laz").decode(bomb))
    assert isinstance(err, LimitError) and err.name == "lidar_points"
    assert peak < 8 << 20   # 4M records of 20 B were never allocated
    assert "lidar_points=4,000,000" in codec_named("laz").check(bomb)

    laz.write_bytes(bomb)
    with pytest.raises(PackError) as exc:
        run_pack(raw, tmp_path / "fail", layout="garage", pred_len=4)
    line = str(exc.value)
    assert "\n" not in line and f"{laz.parent.name}/{laz.name}" in line
    assert "--limit lidar_points=N" in line and f"{OVER_POINTS:,}" in line
    manifest = run_pack(raw, tmp_path / "skip", layout="garage", pred_len=4, on_error="skip")
    assert [(s["frame"], s["file"]) for s in manifest["skipped"]] == [(1, "lidar/0001.laz")]

    # a shard holding LAZ members (codec laz): verify --deep and the loader refuse the bomb
    laz.write_bytes(good)
    shards = tmp_path / "laz"
    run_pack(raw, shards, layout=str(garage_layout(tmp_path)), pred_len=4, max_samples=50)
    rewrite_shard(shards / "shard-000000.tar",
                  lambda i, s: {**s, "lidar.laz": bomb} if i == 2 else s)
    problems = verify(shards, deep=True, progress=False)
    assert len(problems) == 1 and "lidar.laz" in problems[0] and "lidar_points" in problems[0]
    with pytest.raises(ValueError, match="lidar.laz: the point count a LAZ header declares"):
        list(CARLAWebData(str(shards), batch_size=4, mode="eval", image_size=SIZE,
                          fields=["lidar"]))
    skip = CARLAWebData(str(shards), batch_size=4, mode="eval", image_size=SIZE,
                        fields=["lidar"], on_error="skip")
    assert sum(len(b.errors) for b in skip) == 1


@pytest.mark.parametrize("codec", ["depth_garage8", "semantics", "bev_classes", "depth_b2d8",
                                   "instance", "bev_tf2022", "depth_carla24", "png"])
def test_every_image_codec_bounds_the_header_before_decoding(codec):
    """Every image codec, not only the cameras': a 20000x20000 header is refused by check()
    and by decode(), which allocates nothing of its size."""
    colour = {"instance": 6, "bev_tf2022": 2, "depth_carla24": 2}.get(codec, 0)
    bomb = png_header_only(20000, 20000, colour)
    assert "image_pixels=67,108,864" in CODECS[codec].check(bomb)
    err, peak = peak_of(lambda: CODECS[codec].decode(bomb))
    assert isinstance(err, LimitError) and err.name == "image_pixels", err
    assert peak < 1 << 20


def test_extra_images_are_bounded_and_held_to_one_size(raw, tmp_path):
    """Extra images (depth here) in pack, verify --deep and the loader: over image_pixels they
    are refused from the header; at pack time every frame's depth must have the first's size."""
    depth = one(raw, "depth/*.png")
    good = depth.read_bytes()
    depth.write_bytes(png_header_only(9000, 9000))   # 81 MP: over the default 67 MP
    with pytest.raises(PackError) as exc:
        run_pack(raw, tmp_path / "fail", layout="garage", pred_len=4)
    assert "depth/0001.png" in str(exc.value) and "--limit image_pixels=N" in str(exc.value)
    import cv2
    depth.write_bytes(cv2.imencode(".png", np.zeros((8, 8), np.uint8))[1].tobytes())
    manifest = run_pack(raw, tmp_path / "skip", layout="garage", pred_len=4, on_error="skip")
    assert [s["frame"] for s in manifest["skipped"]] == [1]
    assert "expected one size per image field" in manifest["skipped"][0]["reason"]

    depth.write_bytes(good)
    shards = tmp_path / "ok"
    run_pack(raw, shards, layout="garage", pred_len=4, max_samples=50)
    bomb = png_header_only(9000, 9000)
    rewrite_shard(shards / "shard-000000.tar",
                  lambda i, s: {**s, "depth.png": bomb} if i == 2 else s)
    # as a pack made before extra sizes were recorded: image_pixels is then the bound (the
    # recorded size is tested below)
    doc = json.loads((shards / "manifest.json").read_text())
    (shards / "manifest.json").write_text(json.dumps({**doc, "extra_sizes": None}))
    problems = verify(shards, deep=True, progress=False)
    assert len(problems) == 1 and "depth.png" in problems[0] and "image_pixels" in problems[0]
    data = CARLAWebData(str(shards), batch_size=4, mode="eval", image_size=SIZE,
                        fields=["depth"])
    err, peak = peak_of(lambda: list(data))
    assert isinstance(err, ValueError) and "depth.png" in str(err) and "image_pixels" in str(err)
    assert peak < 64 << 20   # 81 MP were never decoded


def test_npy_header_is_bounded_before_allocating(tmp_path):
    """NpyCodec, RecordCodec, PointsCodec and pack's read_npy: the bytes (and for points the
    rows) a header declares are checked before np.load allocates; a 59.6 GiB header is one
    line, not a traceback."""
    huge = npy_claiming((4_000_000_000, 4))   # 59.6 GiB of float32
    for name in ("npy", "record", "points"):
        err, peak = peak_of(lambda: CODECS[name].decode(huge))
        assert isinstance(err, LimitError) and err.name == "array_bytes", (name, err)
        assert "\n" not in str(err) and peak < 1 << 20
        assert "array_bytes" in CODECS[name].check(huge)
    rows = npy_claiming((OVER_POINTS, 3))   # 48 MB: within array_bytes, over lidar_points
    assert "lidar_points" in CODECS["points"].check(rows)
    with pytest.raises(LimitError, match="lidar_points"):
        CODECS["points"].decode(rows)
    path = tmp_path / "0001.npy"
    path.write_bytes(huge)
    with pytest.raises(LimitError, match=r"array_bytes=268,435,456.*--limit array_bytes=N"):
        read_npy(path, allow_pickle=False, what="an array")
    with limits.using(limits.Limits(array_bytes=1 << 10)):   # a small override applies too
        with pytest.raises(LimitError, match="array_bytes"):
            CODECS["npy"].decode(CODECS["npy"].encode(np.zeros(1024, np.float32)))


@pytest.fixture(scope="module")
def tcp_pack(zoo) -> Path:
    return zoo(episodes=1, frames=16, max_samples=50)   # shared, read-only (conftest.zoo)


@pytest.fixture()
def shards(tcp_pack, tmp_path) -> Path:
    out = tmp_path / "shards"
    shutil.copytree(tcp_pack, out)
    return out


def test_json_nesting_is_bounded_before_parsing(shards):
    """JsonCodec and pack's decode_json: a deeply nested document is a one-line LimitError
    (json_depth), never a RecursionError that escapes --on-error skip and names no file."""
    deep = b"[" * 200_000 + b"]" * 200_000
    with pytest.raises(LimitError, match="json_depth"):
        decode_json(deep, gz=False)
    with pytest.raises(LimitError, match="json_depth"):
        decode_json(zlib_gzip(deep), gz=True)
    assert "json_depth=100" in CODECS["json"].check(deep)
    assert decode_json(b'{"a": "[[[[[[[[", "b": [[1], {"c": []}]}', gz=False)["b"][0] == [1]

    rewrite_shard(shards / "shard-000000.tar",
                  lambda i, s: {**s, "meta.json": deep} if i == 3 else s)
    problems = verify(shards, deep=True, progress=False)
    assert len(problems) == 1 and "meta.json" in problems[0] and "json_depth" in problems[0]
    with pytest.raises(ValueError, match=r"__0003'?: meta.json: the nesting depth"):
        list(CARLAWebData(str(shards), batch_size=4, mode="eval", image_size=SIZE))
    skip = CARLAWebData(str(shards), batch_size=4, mode="eval", image_size=SIZE,
                        on_error="skip")
    assert sum(len(b.errors) for b in skip) == 1
    with pytest.raises(ManifestError, match="meta.json: the nesting depth"):
        summary(shards)


def zlib_gzip(data: bytes) -> bytes:
    import gzip
    return gzip.compress(data)


def test_extra_sizes_in_a_manifest_are_checked_and_enforced(shards):
    """A manifest's extra_sizes (member -> [H, W]) are validated like image_sizes, and
    validate_sample holds an extra image's header to its recorded size."""
    from carla_wds.codecs import SchemaError
    from carla_wds.manifest_schema import validate_manifest
    from carla_wds.schema import SampleSpec, validate_sample
    m = json.loads((shards / "manifest.json").read_text())
    validate_manifest({**m, "extra_sizes": {}}, "m")
    with pytest.raises(ManifestError, match="extra_sizes"):
        validate_manifest({**m, "extra_sizes": {"nope.png": [4, 4]}}, "m")
    spec = SampleSpec(("front",), 4)
    sample = {"__key__": "k", "depth.png": png_header_only(6, 9)}
    with pytest.raises(SchemaError, match="depth.png: refused before decoding: its header says "
                                          "6x9 pixels, the manifest records 4x4"):
        validate_sample(spec, {**sample, **_tcp_sample(shards)}, "s:k", None,
                        {"depth.png": [4, 4]})
    validate_sample(spec, {**sample, **_tcp_sample(shards)}, "s:k", None,
                    {"depth.png": [6, 9]})


def _tcp_sample(shards: Path) -> dict[str, bytes]:
    from tests.conftest import read_pack
    sample = next(iter(read_pack(shards).values()))
    return {k: v for k, v in sample.items() if not k.endswith(".png") or k == "front.png"}


def test_a_pack_records_extra_sizes_and_verify_and_loader_hold_headers_to_them(raw, tmp_path):
    """End to end: the manifest records each extra image member's size; a depth PNG of
    another (small, decodable) size is refused by verify --deep and by the loader from its
    header, naming the recorded size, where image_pixels alone would let it through."""
    import cv2
    shards = tmp_path / "ok"
    manifest = run_pack(raw, shards, layout="garage", pred_len=4, max_samples=50)
    depth = manifest["extra_sizes"]["depth.png"]
    assert depth == list(cv2.imread(str(one(raw, "depth/*.png")), cv2.IMREAD_UNCHANGED).shape[:2])
    assert set(manifest["extra_sizes"]) >= {"depth.png", "semantics.png"}
    other = cv2.imencode(".png", np.zeros((depth[0] + 8, depth[1]), np.uint8))[1].tobytes()
    rewrite_shard(shards / "shard-000000.tar",
                  lambda i, s: {**s, "depth.png": other} if i == 1 else s)
    problems = verify(shards, deep=True, progress=False)
    assert len(problems) == 1 and "depth.png" in problems[0], problems
    assert f"records {depth[0]}x{depth[1]}" in problems[0], problems
    data = CARLAWebData(str(shards), batch_size=4, mode="eval", image_size=SIZE,
                        fields=["depth"])
    with pytest.raises(ValueError, match=f"depth.png.*records {depth[0]}x{depth[1]}"):
        list(data)
