"""pngs.imdecode_rgb (issue 26: pyspng for the 3-channel PNG kinds) gives imdecode's pixels in
the file's R, G, B order and refuses what imdecode refuses, with pyspng and without it: tRNS
files (4 channels for cv2, 3 for pyspng) go to cv2, whose refusal stands; the codecs built on
it (bev_tf2022) decode the same with either decoder."""
from __future__ import annotations

import io
import struct
import zlib

import cv2
import numpy as np
import pytest
from PIL import Image

from carla_wds.codecs import SchemaError, codec_named
from carla_wds.modalities import pngs

RNG = np.random.default_rng(26)
PIXELS = RNG.integers(0, 256, (23, 37, 3), dtype=np.uint8)   # R, G, B


def _pil(img: Image.Image, **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="PNG", **kw)
    return buf.getvalue()


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def _after_ihdr(png: bytes, *chunks: bytes) -> bytes:
    """The PNG with chunks inserted right after IHDR (8 + 25 bytes), each with its CRC."""
    return png[:33] + b"".join(chunks) + png[33:]


RGB = _pil(Image.fromarray(PIXELS))
DECODED = {   # files imdecode reads as 3 channels: the pixels in R, G, B order
    "rgb": (RGB, PIXELS),
    "cv2 written": (cv2.imencode(".png", PIXELS[:, :, ::-1])[1].tobytes(), PIXELS),
    "palette": (_pil(Image.fromarray(PIXELS).quantize(16)),
                np.asarray(Image.fromarray(PIXELS).quantize(16).convert("RGB"))),
    # chunk types spelled inside a text chunk's body are not chunks: the walk reads types only
    "text says tRNS": (_after_ihdr(RGB, _chunk(b"tEXt", b"note\x00tRNS IDAT tRNS")), PIXELS),
    # libpng drops an ancillary chunk with a bad CRC and reads on: cv2 decides it here too
    "text with a bad CRC": (_after_ihdr(RGB, _chunk(b"tEXt", b"a\x00b")[:-1] + b"?"), PIXELS),
}
IDAT_BODY = RGB.index(b"IDAT") + 4 + 40
REFUSED = {   # files imdecode refuses: 4 channels, 1 channel, 16 bits, broken
    "rgb tRNS": _pil(Image.fromarray(PIXELS), transparency=(1, 2, 3)),
    "palette tRNS": _pil(Image.fromarray(PIXELS).quantize(16), transparency=0),
    "tRNS after a text saying IDAT": _after_ihdr(RGB, _chunk(b"tEXt", b"x\x00IDAT"),
                                                 _chunk(b"tRNS", b"\x00\x01\x00\x02\x00\x03")),
    "rgba": _pil(Image.fromarray(np.dstack([PIXELS, PIXELS[:, :, :1]]))),
    "gray": _pil(Image.fromarray(PIXELS[:, :, 0])),
    "16-bit": cv2.imencode(".png", PIXELS.astype(np.uint16) * 257)[1].tobytes(),
    "truncated": RGB[:len(RGB) // 2] + RGB[-12:],
    "bad IDAT crc": RGB[:-16] + bytes([RGB[-16] ^ 1]) + RGB[-15:],
    # pyspng would decode this one to other pixels (it checks neither CRC nor adler32)
    "IDAT byte flipped": RGB[:IDAT_BODY] + bytes([RGB[IDAT_BODY] ^ 16]) + RGB[IDAT_BODY + 1:],
}


@pytest.fixture(params=["pyspng", "cv2 only"])
def decoder(request, monkeypatch):
    if request.param == "cv2 only":
        monkeypatch.setattr(pngs, "pyspng", None)
    elif pngs.pyspng is None:
        pytest.skip("pyspng is not installed (the [fast] extra)")
    return request.param


@pytest.mark.parametrize("name", sorted(DECODED))
def test_imdecode_rgb_is_imdecode_reversed(name, decoder):
    data, want = DECODED[name]
    got = pngs.imdecode_rgb(memoryview(data), "test")
    assert got.dtype == np.uint8 and got.flags.c_contiguous
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, pngs.imdecode(data, "test", 3)[:, :, ::-1])


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_imdecode_rgb_refuses_what_imdecode_refuses(name, decoder):
    with pytest.raises(SchemaError) as theirs:
        pngs.imdecode(REFUSED[name], "test", 3)
    with pytest.raises(SchemaError) as ours:
        pngs.imdecode_rgb(REFUSED[name], "test")
    assert str(ours.value) == str(theirs.value)


def test_bev_tf2022_decodes_the_same_with_either_decoder(monkeypatch):
    """Random bytes in all three channels (every bit, the 3 unused low ones too)."""
    codec = codec_named("bev_tf2022")
    data = cv2.imencode(".png", RNG.integers(0, 256, (50, 70, 3), dtype=np.uint8))[1].tobytes()
    first = codec.decode(data)
    monkeypatch.setattr(pngs, "pyspng", None)
    np.testing.assert_array_equal(codec.decode(data), first)
    assert first.shape == (15, 50, 70) and set(np.unique(first)) == {0, 1}


def test_spng_safe_walks_every_chunk():
    assert pngs._spng_safe(RGB) and pngs._spng_safe(DECODED["text says tRNS"][0])
    assert pngs._spng_safe(RGB + b"trailing bytes")              # after IEND: both ignore them
    for name in ("rgb tRNS", "palette tRNS", "truncated", "bad IDAT crc", "IDAT byte flipped"):
        assert not pngs._spng_safe(REFUSED[name]), name
    assert not pngs._spng_safe(DECODED["text with a bad CRC"][0])
    assert not pngs._spng_safe(RGB, most=2)                      # IHDR, IDAT: no IEND yet
    assert pngs._spng_safe(RGB, most=3)


def test_depth_carla24_is_the_float32_sum_with_either_decoder(decoder):
    """metres = (c0 + 256 c1 + 65536 c2) * float32(1000 / (2^24 - 1)) in float32 on cv2's BGR
    array, bit for bit, on random bytes (codes from 0 to 2^24 - 1 included)."""
    bgr = RNG.integers(0, 256, (40, 60, 3), dtype=np.uint8)
    bgr[0, :2] = [[0, 0, 0], [255, 255, 255]]
    c = bgr.astype(np.float32)
    want = (c[..., 0] + 256.0 * c[..., 1] + 65536.0 * c[..., 2]) * np.float32(1000 / (2 ** 24 - 1))
    got = codec_named("depth_carla24").decode(cv2.imencode(".png", bgr)[1].tobytes())
    assert got.dtype == np.float32 and got.shape == (40, 60)
    np.testing.assert_array_equal(got, want)
    assert got[0, 0] == 0 and got[0, 1] == np.float32(1000.0)
