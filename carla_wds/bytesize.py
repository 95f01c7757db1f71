"""Byte counts as a user types them: 1G, 512M, 64k or a plain number of bytes, the one parser of
every byte-size option (`pack --max-bytes`, `--spool-bytes`). Units are binary (1k = 1024), as
the defaults are written (1 << 30 is 1G)."""
from __future__ import annotations

import math
import re

import click

UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_FORM = re.compile(r"^\s*(-?(?:\d+(?:\.\d*)?|\.\d+))\s*([kmgt]?)(?:i?b)?\s*$", re.I)
EXPECTED = "a byte count such as 1G, 512M, 64k or 1048576 (binary units: 1k = 1024)"


def parse_bytes(text: str | int) -> int:
    """'1G' -> 1073741824, '512M', '64k', '1.5G', '1GiB', '4096' -> bytes; ValueError saying
    what was expected for anything else. The form only: each option's range (a negative
    count, 0) is PackOptions' to check, for the CLI and the Python API alike."""
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    found = _FORM.match(str(text))
    if not found:
        raise ValueError(f"{str(text)!r}: expected {EXPECTED}")
    value = float(found.group(1)) * UNITS[found.group(2).lower()]
    if not math.isfinite(value):
        raise ValueError(f"{str(text)!r}: expected {EXPECTED}")
    return int(value)


class ByteSize(click.ParamType):
    """A click option of bytes, parsed by parse_bytes."""
    name = "bytes"

    def convert(self, value, param, ctx) -> int:
        try:
            return parse_bytes(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


BYTES = ByteSize()

__all__ = ["BYTES", "ByteSize", "EXPECTED", "UNITS", "parse_bytes"]
