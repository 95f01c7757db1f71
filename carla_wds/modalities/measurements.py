"""Measurements: one typed member per sample, a structured 0-d .npy (codec "record") whose
fields are the layout's `MeasField`s, so a sample's named scalars and vectors travel as one
member and decode without pickle; collated into `batch.measurements`, a dict of stacked
arrays.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ..codecbase import SchemaError
from .base import CodecUse, Modality

MEASUREMENTS = "measurements"


@dataclass(frozen=True)
class MeasField:
    """One named value of the measurements record; `future`: the values of the next pred_len
    frames (TCP's future_* lists), so its stored shape is (pred_len, *shape)."""
    name: str
    dtype: str = "float32"
    shape: tuple[int, ...] = ()
    units: str = ""
    frame: str = ""
    # the field this one's value replaces when a loader serves the augmented twin camera
    # (garage's route as seen from that camera); never served under its own name
    twin_of: str = ""

    def doc(self) -> dict[str, Any]:
        d = {**asdict(self), "shape": list(self.shape)}
        if not self.twin_of:   # manifests keep the keys they had before twin_of existed
            del d["twin_of"]
        return d


def record_dtype(fields: tuple[MeasField, ...]) -> np.dtype:
    """The structured dtype of a measurements record (little-endian, packed, in field order)."""
    return np.dtype([(f.name, "<" + np.dtype(f.dtype).str[1:] if f.dtype != "bool" else "?",
                      f.shape) for f in fields])


def make_record(fields: tuple[MeasField, ...], values: dict[str, Any]) -> np.ndarray:
    """A 0-d structured array of the named values (checked for shape and finiteness)."""
    rec = np.zeros((), record_dtype(fields))
    for f in fields:
        arr = np.asarray(values[f.name], dtype=f.dtype)
        if arr.shape != f.shape:
            raise SchemaError(f"measurement {f.name} has shape {arr.shape}; expected {f.shape}")
        if arr.dtype.kind == "f" and not np.isfinite(arr).all():
            raise SchemaError(f"measurement {f.name} holds non-finite values; expected finite "
                              f"{f.dtype}")
        rec[f.name] = arr
    return rec


def record_values(rec: np.ndarray, extra: Any, where: str) -> dict[str, np.ndarray]:
    """A decoded record -> field name -> array, refused unless its dtype is the declared one
    (`extra`: the record's carla_wds.extras.Extra: its member name and fields)."""
    want = record_dtype(extra.fields)
    if rec.dtype != want or rec.shape != ():
        raise SchemaError(f"{where}: {extra.member} holds {rec.dtype} {rec.shape}; the manifest "
                          f"declares {want} ()", fix="re-pack the shard")
    return {f.name: np.array(rec[f.name]) for f in extra.fields}


MEASUREMENTS_KIND = Modality(MEASUREMENTS, "record", (), "", collate="record",
                             batch="measurements", codecs=(CodecUse("record", "record", (), ""),),
                             doc="name -> (B, ...) arrays of the record's fields")

__all__ = ["MEASUREMENTS", "MEASUREMENTS_KIND", "MeasField", "make_record", "record_dtype",
           "record_values"]
