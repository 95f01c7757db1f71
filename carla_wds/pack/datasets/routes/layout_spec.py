"""A layout's sample spec: the members it packs, from the layout YAML alone.

This is where a layout's sensors become `Extra` members (name, member, codec, dtype, shape,
units, frame); the manifest records the result, and the loader builds its decoders from the
manifest, so a layout made only of known modalities needs no code.
"""
from __future__ import annotations

from .... import datasets as _datasets  # noqa: F401 - registers the dataset-named codecs
from ....extras import MEASUREMENTS, Extra
from ....modalities import codec_kind
from ....schema import SampleSpec
from ...routes import Reader
from ....modalities.tracks import TRACKS
from ..poses import pose_extras
from .tracks import TRACKS_MEMBER
from .layout_parts import Sensor
from .layouts import Layout
from .measure import record_fields


def _sensor_extras(s: Sensor, frames: dict[str, str]) -> list[Extra]:
    # modality, decoded dtype, decoded shape (None: varies per sample; (): as the image
    # header says) and units: the codec's row of the modality table
    modality, dtype, shape, units = codec_kind(s.codec)
    if s.read == "laz_points":   # LAZ holds xyz only
        shape = (None, 3)
    frame = frames.get(s.name, frames.get(modality, ""))
    member = f"{s.name}.{s.member_ext}"
    codec = "npy" if s.codec == "boxes" else s.codec
    out = [Extra(s.name, member, codec, modality, dtype, shape, units, frame,
                 classes=s.classes)]
    if s.codec == "boxes":
        out.append(Extra(f"{s.name}_raw", f"{s.name}_raw.json", "json", "json", "json", (),
                         "", frame))
    if s.twin:
        out.append(Extra(f"{s.name}_augmented", f"{s.name}_augmented.{s.member_ext}", codec,
                         modality, dtype, shape, units, frame, twin_of=s.name,
                         classes=s.classes))
    return out


def layout_spec(layout: Layout, pred_len: int, image_format: str) -> SampleSpec:
    """The spec of what packing `layout` stores; camera twins keep the stored image format."""
    frames = dict(layout.frames)
    extras: list[Extra] = []
    for cam, _ in layout.twins:
        extras.append(Extra(f"{cam}_augmented", f"{cam}_augmented.{image_format}", image_format,
                            "rgb", "uint8", (), "", frames.get("camera", ""), twin_of=cam))
    for s in layout.sensors:
        extras += _sensor_extras(s, frames)
    if layout.pose:
        extras += pose_extras(layout.pose)
    if layout.tracks:
        r = layout.tracks
        extras.append(Extra(TRACKS, TRACKS_MEMBER, "npy", TRACKS, "float32",
                            (None, r.past + r.future, 4),
                            f"x m, y m, yaw rad, valid; steps {-r.past}..-1, 1..{r.future} x "
                            f"{r.step} frames; rows of {r.sensor}", frames.get(r.sensor, "")))
    if layout.measurement_fields:
        extras.append(Extra(MEASUREMENTS, f"{MEASUREMENTS}.npy", "record", "measurements",
                            "record", (), fields=record_fields(layout, pred_len)))
    return SampleSpec(layout.camera_names, pred_len, image_format, extras=tuple(extras),
                      frames=tuple(sorted(frames.items())), transforms=layout.transforms)


def readers(layout: Layout, spec: SampleSpec) -> tuple[Reader, ...]:
    """Per raw file of a frame, what the encoder does with it (the measurements record is
    built from the plan, not read here)."""
    out = [Reader(f"{cam}_augmented", spec.extra(f"{cam}_augmented").member, "camera",
                  spec.image_format) for cam, _ in layout.twins]
    for s in layout.sensors:
        names = [s.name] + ([f"{s.name}_augmented"] if s.twin else [])
        for name in names:
            extra = spec.extra(name)
            raw = f"{s.name}_raw.json" if s.codec == "boxes" and name == s.name else None
            out.append(Reader(name, extra.member, s.read, extra.codec, s.ext.endswith(".gz"),
                              raw))
    return tuple(out)
