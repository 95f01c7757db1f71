"""Members beyond the cameras and the core labels: what a layout declares, the manifest records
and the loader decodes by name (`CARLAWebData(fields=[...])`).

An `Extra` is one member of every sample (a depth PNG, a LAZ cloud, a box array, the
measurements record) with its codec and what it decodes to: dtype, shape (None for a
variable dimension), units and coordinate frame. The measurements record is one typed member:
a structured .npy (codec "record") whose fields are the layout's `MeasField`s, so a sample's
named scalars and vectors travel as one member and decode without pickle.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from .codecbase import SchemaError
from .modalities import member_kinds
from .modalities.measurements import (MEASUREMENTS, MeasField, make_record, record_dtype,
                                      record_values)

# the member kinds of the modality table (carla_wds.modalities) when this module was imported;
# manifests are checked against the live table (member_kinds), so a registered kind is known
MODALITIES = member_kinds()
_DTYPES = ("float32", "uint8", "int32", "bool")


@dataclass(frozen=True)
class Extra:
    """One extra member: `name` is the field a loader selects, `twin_of` the field it is the
    augmented twin of (garage's *_augmented sensors), `lengths`: a variable first dimension
    the loader pads, with a `<name>_len` count beside it."""
    name: str
    member: str
    codec: str
    modality: str
    dtype: str
    shape: tuple[int | None, ...]
    units: str = ""
    frame: str = ""
    twin_of: str | None = None
    fields: tuple[MeasField, ...] = ()
    # semantics: the layout's table from saved class id to served class (entry i: class of
    # id i); empty: the ids are served as saved (every manifest before tables existed)
    classes: tuple[int, ...] = ()

    @property
    def variable(self) -> bool:
        return bool(self.shape) and self.shape[0] is None

    def doc(self) -> dict[str, Any]:
        d = {k: v for k, v in asdict(self).items() if k not in ("fields", "classes")}
        d["shape"] = list(self.shape)
        if self.classes:
            d["classes"] = list(self.classes)
        if self.fields:
            d["fields"] = [f.doc() for f in self.fields]
        return d


def _shape(value: Any, where: str, variable: bool) -> tuple[int | None, ...]:
    ok = isinstance(value, list) and all(
        (isinstance(d, int) and not isinstance(d, bool) and d >= 0) or (d is None and variable)
        for d in value)
    if not ok:
        raise SchemaError(f"{where}: shape {value!r}; expected a list of whole numbers"
                          + (" (null for a variable dimension)" if variable else ""))
    return tuple(value)


def extras_from_doc(docs: Any, where: str) -> tuple[Extra, ...]:
    """The manifest's `spec.extras` list -> Extras, refusing anything malformed."""
    if not isinstance(docs, list):
        raise SchemaError(f"{where}: spec.extras is {type(docs).__name__}; expected a list")
    out, seen = [], set()
    for i, d in enumerate(docs):
        at = f"{where}: spec.extras[{i}]"
        if not isinstance(d, dict) or not all(isinstance(d.get(k), str) for k in
                                              ("name", "member", "codec", "modality", "dtype")):
            raise SchemaError(f"{at}: expected an object with string name, member, codec, "
                              "modality and dtype")
        kinds = member_kinds()
        if d["modality"] not in kinds or d["name"] in seen:
            raise SchemaError(f"{at}: modality {d['modality']!r} (one of {list(kinds)}) "
                              f"or name {d['name']!r} (each once) is wrong")
        seen.add(d["name"])
        fields = tuple(MeasField(f["name"], f.get("dtype", "float32"),
                                 _shape(f.get("shape", []), at, False), f.get("units", ""),
                                 f.get("frame", ""), str(f.get("twin_of", "")))
                       for f in d.get("fields", []) if _field_ok(f, at))
        out.append(Extra(d["name"], d["member"], d["codec"], d["modality"], d["dtype"],
                         _shape(d.get("shape", []), at, True), str(d.get("units", "")),
                         str(d.get("frame", "")), d.get("twin_of"), fields,
                         _classes(d.get("classes", []), at)))
    return tuple(out)


def _classes(value: Any, at: str) -> tuple[int, ...]:
    """A semantics table from the manifest: up to 256 classes 0..255 (a lookup table)."""
    if not isinstance(value, list) or len(value) > 256 or not all(
            isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 255 for v in value):
        shown = repr(value) if len(repr(value)) < 80 else repr(value)[:77] + "..."
        raise SchemaError(f"{at}: classes {shown}; expected a list of at most 256 class ids "
                          "0..255 (entry i: the class of saved id i)")
    return tuple(value)


def _field_ok(f: Any, at: str) -> bool:
    if not (isinstance(f, dict) and isinstance(f.get("name"), str)
            and f.get("dtype", "float32") in _DTYPES):
        raise SchemaError(f"{at}: a measurement field is {f!r}; expected an object with a "
                          f"name and a dtype from {list(_DTYPES)}")
    return True


__all__ = ["Extra", "MEASUREMENTS", "MODALITIES", "MeasField", "extras_from_doc",
           "make_record", "record_dtype", "record_values"]
