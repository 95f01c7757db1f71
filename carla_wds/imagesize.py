"""What a file's header declares, read without decoding: image dimensions from PNG and JPEG
headers, the point count of a LAS/LAZ file.

A 4.6 MB PNG can declare 30,000 x 50,000 pixels and decode to a 4.8 GB array, a 154 KB LAZ
2^28 points. The packer records each camera's (and each extra image's) size in the manifest,
and every decoder compares a header against it, or against the limits (limits.py), before it
allocates memory.
"""
from __future__ import annotations

import struct

from .limits import LimitError

PNG_SIG = b"\x89PNG\r\n\x1a\n"
# Start-of-frame markers carry the size; C4 (DHT), C8 (JPG) and CC (DAC) share the range.
_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}
_NO_LENGTH = {0x01, *range(0xD0, 0xD8)}   # TEM and RSTn stand alone


class ImageHeaderError(ValueError):
    """The bytes are not a PNG or JPEG whose header gives a size."""


class PixelLimitError(LimitError, ImageHeaderError):
    """An image header declaring more pixels than the limit image_pixels allows."""


def image_size(data: bytes | memoryview) -> tuple[int, int]:
    """(height, width) from a PNG's IHDR or a JPEG's start-of-frame segment."""
    head = bytes(data[:33])
    if head.startswith(PNG_SIG):
        if head[12:16] != b"IHDR" or len(head) < 24:
            raise ImageHeaderError("a PNG without an IHDR chunk at its start")
        width, height = struct.unpack(">II", head[16:24])
        return height, width
    if head.startswith(b"\xff\xd8"):
        return _jpeg_size(data)
    raise ImageHeaderError("neither a PNG nor a JPEG (unknown signature)")


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
