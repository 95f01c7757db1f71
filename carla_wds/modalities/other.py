"""The kinds stored through the generic formats, with no codec of their own: raw JSON beside a
typed member (served per sample, as lists), the radar returns (rows, padded with `radar_len`)
and the expert's feature vector. They reach the batch through its one typed mapping.
"""
from __future__ import annotations

from .base import CodecUse, Modality

JSON = Modality("json", "json", (), "", collate="list",
                codecs=(CodecUse("json", "json", (), ""),),
                doc="the source's JSON as parsed, one per sample (lists)")
RADAR = Modality("radar", "float32", (None, 5), "m, rad, rad, m/s", collate="rows",
                 doc="returns (B, R_max, 5) zero-padded, radar_len (B,)")
EXPERT = Modality("expert", "float32", (None,), "",
                  doc="the expert's feature vector (B, D)")

__all__ = ["EXPERT", "JSON", "RADAR"]
