"""The non-camera modality codecs (carla_wds.modalities), each against files written the way
its project writes them and decoded the way its project's loader decodes them.

References, restated here independently of the codecs (checked against the projects' code):
- TransFuser 2022 depth (team_code_autopilot/data_agent.py): CARLA's depth camera gives BGRA
  bytes, the agent takes [:, :, :3] (B, G, R), swaps them with cvtColor(RGB2BGR) and
  cv2.imwrite's the result; data.py reads it with cv2.imread + BGR2RGB and computes
  dot([65536, 256, 1]) / (2^24 - 1), times 1000 for metres. CARLA's own formula on its (R, G, B)
  is (R + 256 G + 65536 B) / (2^24 - 1) * 1000 m.
- carla_garage depth: uint8 = (min(d / 1000, 0.05) * 20 * 255 + 0.5), metres = v / 255 * 50.
- TransFuser 2022 topdown (utils/map_utils.py encode_npy_to_pil): plane i -> bit 7 - i % 5 of
  channel i // 5, written with cv2.imwrite(moveaxis(img, 0, 2)).
- carla_garage lidar: laspy, point format 0, scale 1 mm, offset = per-axis minimum.
"""
from __future__ import annotations

import io

import cv2
import numpy as np
import pytest

from carla_wds.codecs import SchemaError, codec_named
from carla_wds.load.decode.fields import _image_like

CARLA24 = 2 ** 24 - 1
RNG = np.random.default_rng(14)
H, W = 12, 20


def _png(img: np.ndarray) -> bytes:
    return cv2.imencode(".png", img)[1].tobytes()


# ---------------------------------------------------------------- depth, TransFuser 24-bit

def _tf2022_depth_file(carla_bgra: np.ndarray) -> bytes:
    """The bytes data_agent.py writes for one CARLA depth image (BGRA as CARLA gives it)."""
    depth_img = carla_bgra[:, :, :3]
    return _png(cv2.cvtColor(depth_img, cv2.COLOR_RGB2BGR))


def test_depth_carla24_decodes_carlas_formula_and_transfusers_loader():
    bgra = RNG.integers(0, 256, (H, W, 4), dtype=np.uint8)
    b, g, r = (bgra[..., i].astype(np.float64) for i in range(3))
    carla_m = (r + 256 * g + 65536 * b) / CARLA24 * 1000          # CARLA's documented formula
    data = _tf2022_depth_file(bgra)
    got = codec_named("depth_carla24").decode(data)
    assert got.dtype == np.float32 and got.shape == (H, W)
    # float32 holds 1000 m to ~6e-5 m; the encoding's own step is 1000 / (2^24 - 1) = 6e-5 m
    np.testing.assert_allclose(got, carla_m, rtol=0, atol=1.2e-4)
    # TransFuser's data.py get_depth on the same file, times 1000
    rgb = cv2.cvtColor(cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR),
                       cv2.COLOR_BGR2RGB).astype(np.float32)
    loader_m = np.dot(rgb, [65536.0, 256.0, 1.0]) / CARLA24 * 1000
    np.testing.assert_allclose(got, loader_m, rtol=0, atol=1.2e-4)
    # a channel-order mistake would be kilometres off, not micrometres
    assert np.abs(carla_m - (b + 256 * g + 65536 * r) / CARLA24 * 1000).max() > 1.0


def test_depth_carla24_round_trip_within_its_precision():
    metres = RNG.uniform(0, 1000, (H, W))
    metres[0, :3] = (0.0, 1000.0, 0.5)
    codec = codec_named("depth_carla24")
    got = codec.decode(codec.encode(metres))
    assert got.dtype == np.float32 and got.shape == (H, W)
    np.testing.assert_allclose(got, metres, rtol=0, atol=1000 / CARLA24 / 2 + 1e-4)
    with pytest.raises(SchemaError, match="non-finite"):
        codec.encode(np.full((H, W), np.nan))


# ---------------------------------------------------------------- depth, garage 8-bit

def test_depth_garage8_matches_the_data_agent_encoding():
    metres = RNG.uniform(0, 80, (H, W))                           # past 50 m: clipped
    as_saved = (np.minimum(metres / 1000, 0.05) * 20 * 255 + 0.5).astype(np.uint8)
    codec = codec_named("depth_garage8")
    got = codec.decode(_png(as_saved))
    assert got.dtype == np.float32 and got.shape == (H, W)
    np.testing.assert_allclose(got, as_saved / 255 * 50, rtol=1e-6)
    # round trip: within half an 8-bit step (50/255/2 m) below 50 m, 50 m beyond
    back = codec.decode(codec.encode(metres))
    np.testing.assert_array_equal(back, got)
    near = metres <= 50
    assert np.abs(back[near] - metres[near]).max() <= 50 / 255 / 2 + 1e-5
    np.testing.assert_allclose(back[~near], 50.0, rtol=1e-6)


# ---------------------------------------------------------------- semantics, BEV

@pytest.mark.parametrize("name, shape", [("semantics", (H, W)), ("bev_classes", (1, H, W))])
def test_class_ids_round_trip_exactly(name, shape):
    ids = RNG.integers(0, 29, (H, W), dtype=np.uint8)
    codec = codec_named(name)
    got = codec.decode(codec.encode(ids))
    assert got.dtype == np.uint8 and got.shape == shape
    np.testing.assert_array_equal(got.reshape(H, W), ids)
    with pytest.raises(SchemaError, match="expected uint8"):
        codec.encode(ids.astype(np.float32))


def test_semantics_resize_is_nearest_neighbour_only():
    """Class ids 0 and 10 side by side: a linear resize would invent 5 (a class that is not
    there); the loader's resize must only ever pick existing ids."""
    ids = np.zeros((H, W), np.uint8)
    ids[:, 1::2] = 10
    ids[::3] = 7
    for name in ("semantics", "bev_classes", "bev_tf2022"):
        assert codec_named(name).interpolation == cv2.INTER_NEAREST, name
    codec = codec_named("semantics")
    decoded = codec.decode(codec.encode(ids))
    for size in ((7, 13), (25, 41), (H, W + 1)):
        out = _image_like(None, decoded, size, codec)
        assert out.shape == (1, *size) and out.dtype == np.uint8
        assert set(np.unique(out)) <= {0, 7, 10}, size
        np.testing.assert_array_equal(out[0], cv2.resize(ids, size[::-1],
                                                         interpolation=cv2.INTER_NEAREST))
    linear = cv2.resize(ids, (41, 25), interpolation=cv2.INTER_LINEAR)
    assert not set(np.unique(linear)) <= {0, 7, 10}   # the test above could fail


def test_depth_resizes_linearly():
    # depth is a measurement, not a class: it may be interpolated
    assert codec_named("depth_carla24").interpolation == cv2.INTER_LINEAR
    assert codec_named("depth_garage8").interpolation == cv2.INTER_LINEAR


def _encode_npy_to_pil(planes: np.ndarray) -> np.ndarray:
    """TransFuser's map_utils.encode_npy_to_pil, restated."""
    img = np.zeros((3,) + planes.shape[1:], np.uint8)
    bev = np.ceil(planes).astype(np.uint8)
    for i in range(planes.shape[0]):
        img[i // 5] |= (bev[i] << (8 - i % 5 - 1)).astype(np.uint8)
    return img


def test_bev_tf2022_decodes_the_agents_file_and_round_trips():
    planes = (RNG.random((15, H, W)) < 0.3).astype(np.float32)
    data = _png(np.moveaxis(_encode_npy_to_pil(planes), 0, 2))   # as data_agent.py writes it
    codec = codec_named("bev_tf2022")
    got = codec.decode(data)
    assert got.dtype == np.uint8 and got.shape == (15, H, W)
    np.testing.assert_array_equal(got, planes)
    np.testing.assert_array_equal(codec.decode(codec.encode(planes)), planes)
    with pytest.raises(SchemaError, match="outside"):
        codec.encode(planes * 2)
    with pytest.raises(SchemaError, match="shape"):
        codec.encode(np.zeros((16, H, W)))


@pytest.mark.parametrize("shape", [(1, 1), (1, 7), (9, 1), (H, W), (500, 500)])
def test_bev_unpack_is_their_decode_on_every_byte(shape):
    """unpack_bit_planes (one pass) against TransFuser's decode formula restated per plane:
    plane i = bit 7 - i % 5 of channel i // 5, on random bytes whose low 3 bits are set too (the
    decode must ignore them), every byte value present, odd sizes and a strided input."""
    from carla_wds.modalities.bev import unpack_bit_planes
    packed = RNG.integers(0, 256, shape + (3,), dtype=np.uint8)
    packed.reshape(-1)[:min(packed.size, 256)] = np.arange(256, dtype=np.uint8)[:packed.size]
    want = np.stack([(packed[:, :, i // 5] >> (8 - i % 5 - 1)) & 1 for i in range(15)])
    got = unpack_bit_planes(packed)
    assert got.dtype == np.uint8 and got.shape == (15,) + shape and got.flags.c_contiguous
    np.testing.assert_array_equal(got, want)
    flipped = packed[::-1, ::-1]                         # a strided, non-contiguous view
    np.testing.assert_array_equal(unpack_bit_planes(flipped), want[:, ::-1, ::-1])
    codec = codec_named("bev_tf2022")                    # through a real PNG file too
    np.testing.assert_array_equal(codec.decode(_png(packed)), want)
    with pytest.raises(SchemaError, match="expected uint8"):
        unpack_bit_planes(packed[:, :, :2])
    with pytest.raises(SchemaError, match="expected uint8"):
        unpack_bit_planes(packed.astype(np.int16))


# ---------------------------------------------------------------- structure: truncation, channels

PNG_CODECS = {"depth_carla24": 3, "depth_garage8": 1, "semantics": 1, "bev_tf2022": 3,
              "bev_classes": 1}


def _image(channels: int) -> np.ndarray:
    shape = (H, W) if channels == 1 else (H, W, channels)
    return RNG.integers(0, 2, shape, dtype=np.uint8)


@pytest.mark.parametrize("name", sorted(PNG_CODECS))
def test_png_codecs_catch_truncation(name):
    data = _png(_image(PNG_CODECS[name]))
    codec = codec_named(name)
    assert codec.check(data) is None
    for cut in (len(data) - 5, len(data) // 2, 20):
        assert codec.check(data[:cut]) is not None, cut


@pytest.mark.parametrize("name", sorted(PNG_CODECS))
@pytest.mark.parametrize("channels", [1, 3, 4])
def test_png_codecs_refuse_the_wrong_channel_count(name, channels):
    data = _png(_image(channels))
    codec = codec_named(name)
    problem = codec.check(data)
    if channels == PNG_CODECS[name]:
        assert problem is None
        return
    assert problem is not None and f"{channels} channel" in problem, problem
    assert f"expected {PNG_CODECS[name]}-channel" in problem, problem
    with pytest.raises(SchemaError):
        codec.decode(data)


def test_depth_png_of_16_bits_is_refused():
    data = _png(RNG.integers(0, 60000, (H, W), dtype=np.uint16))
    assert "16-bit" in codec_named("depth_garage8").check(data)


# ---------------------------------------------------------------- points (.npy)

def _npy(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


@pytest.mark.parametrize("cols", [3, 4])
def test_points_round_trip(cols):
    pts = RNG.normal(0, 20, (500, cols)).astype(np.float32)
    codec = codec_named("points")
    data = codec.encode(pts)
    assert codec.check(data) is None and codec.check_full(data, cols) is None
    got = codec.decode(data)
    assert got.dtype == np.float32 and got.shape == (500, cols)
    np.testing.assert_array_equal(got, pts)
    # float64 input is stored as float32 (the loader's dtype)
    assert codec.decode(codec.encode(pts.astype(np.float64))).dtype == np.float32


@pytest.mark.parametrize("bad, match", [
    (np.zeros((10, 5), np.float32), "shape"), (np.zeros(40, np.float32), "shape"),
    (np.zeros((2, 10, 4), np.float32), "shape"), ([["a", "b", "c"]], "float32")])
def test_points_of_the_wrong_shape_are_refused(bad, match):
    codec = codec_named("points")
    with pytest.raises(SchemaError, match=match):
        codec.encode(bad)
    if isinstance(bad, np.ndarray):   # the same array as a raw .npy file
        assert "expected float32 (N,3) or (N,4)" in codec.check(_npy(bad))


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_points_with_nan_are_refused(value):
    pts = RNG.normal(0, 20, (100, 4)).astype(np.float32)
    pts[[3, 50], 1] = value
    codec = codec_named("points")
    with pytest.raises(SchemaError, match="2 of 100 points are NaN or infinite"):
        codec.encode(pts)
    data = _npy(pts)            # a raw file: its header is fine, only the values show it
    assert codec.check(data) is None
    assert "2 of 100 points are NaN or infinite" in codec.check_full(data)


def test_points_check_catches_truncation_dtype_and_declared_columns():
    codec = codec_named("points")
    data = _npy(RNG.normal(size=(64, 4)).astype(np.float32))
    assert codec.check(data[:-4]) is not None
    assert codec.check(data[:30]) is not None
    assert "float64" in codec.check(_npy(np.zeros((5, 4))))
    three = _npy(np.zeros((5, 3), np.float32))
    assert codec.check_full(three) is None
    assert "3 columns; expected (N,4) xyzi, as the layout declares" in codec.check_full(three, 4)


# ---------------------------------------------------------------- LAZ

def _garage_laz(points: np.ndarray) -> bytes:
    """LAZ as carla_garage's data_agent.save_sensors writes it, with laspy directly."""
    import laspy
    header = laspy.LasHeader(point_format=0)
    header.offsets = np.min(points, axis=0)
    header.scales = np.array([0.001, 0.001, 0.001])
    buf = io.BytesIO()
    with laspy.open(buf, mode="w", header=header, do_compress=True, closefd=False) as writer:
        rec = laspy.ScaleAwarePointRecord.zeros(points.shape[0], header=header)
        rec.x, rec.y, rec.z = points[:, 0], points[:, 1], points[:, 2]
        writer.write_points(rec)
    return buf.getvalue()


def test_laz_decodes_as_laspy_reads_it():
    import laspy
    pts = RNG.uniform(-40, 40, (3000, 3))
    data = _garage_laz(pts)
    codec = codec_named("laz")
    assert codec.check(data) is None and codec.check_full(data, 3) is None
    got = codec.decode(data)
    assert got.dtype == np.float32 and got.shape == (3000, 3)
    np.testing.assert_allclose(got, laspy.read(io.BytesIO(data)).xyz, rtol=0, atol=1e-5)
    np.testing.assert_allclose(got, pts, rtol=0, atol=0.0005 + 1e-5)   # 1 mm scale
    # the codec's own writer (synthetic data) makes the same points
    np.testing.assert_allclose(codec.decode(codec.encode(pts)), pts, rtol=0, atol=0.0005 + 1e-5)


def test_laz_truncated_is_caught_by_the_cheap_check():
    data = _garage_laz(RNG.uniform(-40, 40, (3000, 3)))
    codec = codec_named("laz")
    for cut in (len(data) - 10, len(data) // 2, 300, 100):
        assert codec.check(data[:cut]) is not None, cut
    assert "no LASF signature" in codec.check(b"PK\x03\x04" + data[4:])


def test_laz_corrupt_body_is_refused():
    """Bytes flipped inside the compressed points: the header is intact (the cheap check can
    pass), the full decode must refuse it."""
    data = bytearray(_garage_laz(RNG.uniform(-40, 40, (3000, 3))))
    start = int.from_bytes(data[96:100], "little") + 8       # past the chunk-table offset
    for i in range(start + 200, start + 600):
        data[i] ^= 0x5A
    codec = codec_named("laz")
    with pytest.raises(SchemaError, match="LAZ does not decode"):
        codec.decode(bytes(data))
    assert "LAZ does not decode" in codec.check_full(bytes(data))
