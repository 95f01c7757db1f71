"""Image dimensions from PNG and JPEG headers, without decoding.

A 4.6 MB PNG can declare 30,000 x 50,000 pixels and decode to a 4.8 GB array. The packer records
each camera's size in the manifest and the loader (and `verify --deep`) compare a member's
header against it before any decoder allocates memory.
"""
from __future__ import annotations

import struct

PNG_SIG = b"\x89PNG\r\n\x1a\n"
# Start-of-frame markers carry the size; C4 (DHT), C8 (JPG) and CC (DAC) share the range.
_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}
_NO_LENGTH = {0x01, *range(0xD0, 0xD8)}   # TEM and RSTn stand alone


class ImageHeaderError(ValueError):
    """The bytes are not a PNG or JPEG whose header gives a size."""


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
                               f"{expected[0]}x{expected[1]} for this camera")
    if h * w > max_pixels or h == 0 or w == 0:
        raise ImageHeaderError(f"its header says {h}x{w} pixels, outside 1..{max_pixels} pixels")
    return h, w
