"""The pickle opcode walker moved to carla_wds/pack/pickle_walk.py (issue 42: Bench2Drive's HD
map .npz is read through it too); this module keeps LEAD's old import path working."""
from __future__ import annotations

from ...pickle_walk import (GLOBALS, MAX_INT_BITS, MAX_NDIM, NUMERIC, STRING_CHARS, Global,
                            Refused, Walk, array_values)

__all__ = ["GLOBALS", "MAX_INT_BITS", "MAX_NDIM", "NUMERIC", "STRING_CHARS", "Global", "Refused",
           "Walk", "array_values"]
