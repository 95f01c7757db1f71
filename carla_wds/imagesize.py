"""What a file's header declares, read without decoding: image dimensions from PNG and JPEG
headers and from the .npy header of a `raw` camera image (uint8 H x W x 3, stored decoded by
`pack --image-format raw`), any .npy header's shape and dtype, the point count of a LAS/LAZ file.

A 4.6 MB PNG can declare 30,000 x 50,000 pixels and decode to a 4.8 GB array, a 154 KB LAZ
2^28 points. The packer records each camera's (and each extra image's) size in the manifest,
and every decoder compares a header against it, or against the limits (limits.py), before it
allocates memory.
"""
from __future__ import annotations

import io
import struct

import numpy as np

from .limits import LimitError

PNG_SIG = b"\x89PNG\r\n\x1a\n"
NPY_SIG = b"\x93NUMPY"
# Start-of-frame markers carry the size; C4 (DHT), C8 (JPG) and CC (DAC) share the range.
_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}
_NO_LENGTH = {0x01, *range(0xD0, 0xD8)}   # TEM and RSTn stand alone


class ImageHeaderError(ValueError):
    """The bytes are not a PNG or JPEG whose header gives a size."""


class PixelLimitError(LimitError, ImageHeaderError):
    """An image header declaring more pixels than the limit image_pixels allows."""


def image_size(data: bytes | memoryview) -> tuple[int, int]:
    """(height, width) from a PNG's IHDR, a JPEG's start-of-frame segment or a raw image's
    .npy header (raw_image_header)."""
    head = bytes(data[:33])
    if head.startswith(PNG_SIG):
        if head[12:16] != b"IHDR" or len(head) < 24:
            raise ImageHeaderError("a PNG without an IHDR chunk at its start")
        width, height = struct.unpack(">II", head[16:24])
        return height, width
    if head.startswith(b"\xff\xd8"):
        return _jpeg_size(data)
    if head.startswith(NPY_SIG):
        return raw_image_header(data)[:2]
    raise ImageHeaderError("neither a PNG, a JPEG nor a raw .npy image (unknown signature)")


_RAW_HEADERS: dict[bytes, tuple[int, int, int]] = {}   # one camera size per pack: a few entries


def raw_image_header(data: bytes | memoryview) -> tuple[int, int, int]:
    """(height, width, offset of the pixels) of a raw camera image: an .npy file holding one
    uint8 (H, W, 3) array in C order. Anything else (another shape or dtype, Fortran order, an
    object array, a header numpy cannot parse) is an ImageHeaderError; nothing is unpickled.
    Headers are parsed once (numpy parses them with ast) and then looked up by their bytes."""
    end = npy_header_end(data)
    key = bytes(data[:end]) if 0 < end <= 4096 else b""
    known = _RAW_HEADERS.get(key) if key else None
    if known is not None:
        return known
    try:
        shape, fortran, dtype, offset = npy_header(data)
    except ValueError as exc:
        raise ImageHeaderError(f"a raw .npy image whose header does not parse ({exc})") from None
    if len(shape) != 3 or shape[2] != 3 or dtype != np.uint8 or fortran:
        order = " in Fortran order" if fortran else ""
        raise ImageHeaderError(f"a raw .npy image of shape {shape} dtype {dtype}{order}; "
                               "expected one (H, W, 3) uint8 array in C order")
    known = (shape[0], shape[1], offset)
    if key and len(_RAW_HEADERS) < 64:
        _RAW_HEADERS[key] = known
    return known


def npy_header(data: bytes | memoryview) -> tuple[tuple[int, ...], bool, np.dtype, int]:
    """(shape, fortran order, dtype, offset of the data) from an .npy header, never
    unpickling anything; ValueError for a header numpy cannot parse."""
    f = io.BytesIO(bytes(data[:65536 + 12]))   # a header is at most 64 KiB (numpy's limit)
    try:
        version = np.lib.format.read_magic(f)
        read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                else np.lib.format.read_array_header_2_0)
        shape, fortran, dtype = read(f)
    except (SyntaxError, TypeError, OverflowError, MemoryError) as exc:   # odd header text
        raise ValueError(f"unreadable .npy header ({type(exc).__name__})") from None
    if any(int(d) < 0 for d in shape):   # (-2, -2) multiplies out positive; np.load refuses it
        raise ValueError(f"an .npy header with a negative dimension {shape}")
    return tuple(int(d) for d in shape), bool(fortran), dtype, f.tell()


def npy_header_end(data: bytes | memoryview) -> int:
    """Offset of an .npy's data (after magic, version, header length, header); 0 if unclear."""
    if data[:6] != NPY_SIG or len(data) < 12:
        return 0
    if data[6] == 1:
        return 10 + int.from_bytes(data[8:10], "little")
    return 12 + int.from_bytes(data[8:12], "little")


def _jpeg_size(data: bytes | memoryview) -> tuple[int, int]:
    pos, n = 2, len(data)
    while pos + 4 <= n:
        if data[pos] != 0xFF:
            raise ImageHeaderError(f"a JPEG whose marker at byte {pos} is malformed")
        marker = data[pos + 1]
        if marker == 0xFF:   # fill bytes before a marker
            pos += 1
            continue
        if marker in _NO_LENGTH:
            pos += 2
            continue
        (length,) = struct.unpack(">H", bytes(data[pos + 2:pos + 4]))
        if marker in _SOF:
            if pos + 9 > n:
                break
            height, width = struct.unpack(">HH", bytes(data[pos + 5:pos + 9]))
            return height, width
        if marker == 0xDA:   # start of scan before any frame header
            break
        pos += 2 + length
    raise ImageHeaderError("a JPEG without a start-of-frame segment before its image data")


def check_size(data: bytes | memoryview, expected: tuple[int, int] | None,
               max_pixels: int) -> tuple[int, int]:
    """The header's (H, W), refused unless it equals `expected` (when known) and stays within
    `max_pixels`. Raises ImageHeaderError with what was found and what was expected."""
    h, w = image_size(data)
    if expected is not None and (h, w) != tuple(expected):
        raise ImageHeaderError(f"its header says {h}x{w} pixels, the manifest records "
                               f"{expected[0]}x{expected[1]} for this member")
    if h == 0 or w == 0:
        raise ImageHeaderError(f"its header says {h}x{w} pixels; expected at least 1x1")
    if h * w > max_pixels:
        raise PixelLimitError(f"the pixel count its header declares ({h}x{w} pixels, outside "
                              f"1..{max_pixels})", h * w, "image_pixels", max_pixels)
    return h, w


# LAS 1.x public header (ASPRS LAS 1.4 R15, table 3): the fields that size the point data
_LAS_RECORD_LENGTH, _LAS_LEGACY_COUNT, _LAS_COUNT_14 = 105, 107, 247


def las_point_count(data: bytes | memoryview) -> tuple[int, int]:
    """(points, bytes per point record) a LAS/LAZ header declares: the larger of the legacy
    32-bit count and, for LAS 1.4, the 64-bit one (laspy sizes its buffer from one of them).
    ValueError if the header is too short to say."""
    head = bytes(data[:_LAS_COUNT_14 + 8])
    if not head.startswith(b"LASF") or len(head) < _LAS_LEGACY_COUNT + 4:
        raise ValueError(f"not a LAS/LAZ header ({len(head)} bytes, no LASF signature)")
    record = int.from_bytes(head[_LAS_RECORD_LENGTH:_LAS_RECORD_LENGTH + 2], "little")
    count = int.from_bytes(head[_LAS_LEGACY_COUNT:_LAS_LEGACY_COUNT + 4], "little")
    if head[25] >= 4 and len(head) >= _LAS_COUNT_14 + 8:
        count = max(count, int.from_bytes(head[_LAS_COUNT_14:_LAS_COUNT_14 + 8], "little"))
    return count, record
