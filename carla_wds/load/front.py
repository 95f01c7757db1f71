"""CARLAWebData's front door: the request as given (options.py's groups, the old flat
keywords folded in), the arguments checked once, and the settings a model adapter or the
manifest decides (cameras, image size, fields, load adapters) resolved before any worker
starts (issue 40). dataset.py builds the loader from what this returns.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..datasets import lidar_presets
from ..limits import Limits
from ..limits import active as active_limits
from ..manifest import Manifest
from ..schema import SampleSpec
from . import settings
from .adapters import (ModelAdapter, adapter_options, adapters_for, model_adapter, resolve,
                       resolve_load_adapters)
from .classes import class_options
from .fields import FieldOptions, row_fields, stacked_kinds
from .options import Augment, Decode, History, Overlays, Storage, Transport, fold
from .transform import SampleTransform

DEFAULT_IMAGE_SIZE = (256, 512)


@dataclass(frozen=True)
class Request:
    """Every keyword of one CARLAWebData, each group a record; `adapter` is a model-ready
    adapter's name, `transform` the caller's own per-sample function (`adapter=` takes
    either: both are a per-sample transform with settings)."""
    source: str | None
    batch_size: int
    mode: str
    num_workers: int
    seed: int
    image_size: tuple[int, int] | None
    cameras: list[str] | None
    fields: list[str] | None
    augment: Augment
    shuffle_buffer: int
    on_error: str
    rank: int | None
    world_size: int | None
    batches_per_epoch: int | None
    transport: Transport
    storage: Storage
    decode: Decode
    overlays: Overlays
    label_options: dict[str, Any]
    adapter: str | None
    transform: SampleTransform | None
    history: History
    mix: Any

    def limits(self) -> Limits:
        """Bounds on what one member may make a decoder allocate (limits.py); a dict raises
        some of this process's active ones."""
        given = self.decode.limits
        return given if isinstance(given, Limits) else \
            active_limits().with_overrides(dict(given or {}))


def request(given: dict[str, Any], older: dict[str, Any]) -> Request:
    """CARLAWebData's keywords (`older`: those not in its signature) as one checked Request."""
    kw, older = fold(given, dict(older))
    settings.check_args(kw["mode"], kw["on_error"], kw["batch_size"], kw["num_workers"],
                        kw["batches_per_epoch"])
    labels = adapter_options(kw.pop("label_options"), older)   # and the adapters' aliases
    adapter = kw.pop("adapter")
    name, transform = (adapter, None) if adapter is None or isinstance(adapter, str) else \
        (None, adapter)
    if transform is not None and not callable(transform):
        raise TypeError(f"adapter={adapter!r}: expected a model-ready adapter's name or your "
                        "function fn(sample, rng) -> sample. Fix: adapter='NAME' or adapter=fn")
    return Request(**kw, label_options=labels, adapter=name, transform=transform)


def select_cameras(spec: SampleSpec, cameras: list[str] | None) -> SampleSpec:
    if cameras is None:
        return spec
    missing = [c for c in cameras if c not in spec.cameras]
    if missing:
        raise ValueError(f"cameras {missing} are not in the shards; they hold "
                         f"{list(spec.cameras)}")
    return replace(spec, cameras=tuple(cameras))   # keeps the recorded codecs


def field_options(spec: SampleSpec, adapters: dict[str, Any], lidar_histogram: str | None,
                  fields: tuple[str, ...]) -> FieldOptions:
    """The load adapters that apply (each asks the manifest's spec, e.g. its transforms or
    twins, with the caller's option; load/adapters/); a histogram needs the lidar field and
    a known preset."""
    if lidar_histogram is not None:
        presets = lidar_presets()   # the dataset registry's (carla_wds.datasets)
        if lidar_histogram not in presets or "lidar" not in fields:
            raise ValueError(f"lidar_histogram {lidar_histogram!r}: expected one of "
                             f"{sorted(presets)}, with 'lidar' in fields (got {list(fields)})")
    return FieldOptions(lidar_histogram, adapters_for(spec, adapters))


def model(r: Request, manifest: Manifest
          ) -> tuple[ModelAdapter | None, SampleTransform | None, dict, dict[str, Any]]:
    """adapter=NAME: the model-ready adapter (its checks on the shards, the settings its name
    sets, the load adapters it needs) as the sample transform; else the caller's settings."""
    given = {"cameras": r.cameras, "image_size": r.image_size, "fields": r.fields,
             "lidar_histogram": r.decode.lidar_histogram}
    if r.adapter is None:
        return None, r.transform, {**given, "image_size": given["image_size"] or
                                   DEFAULT_IMAGE_SIZE}, r.label_options
    adapter = model_adapter(r.adapter)
    chosen = resolve(adapter, given)
    adapter.check(manifest)
    return adapter, adapter, chosen, resolve_load_adapters(adapter, r.label_options,
                                                           r.augment.enabled)


def decode_options(spec: SampleSpec, packed: SampleSpec, fields: list[str] | None
                   ) -> dict[str, object]:
    """FieldOptions keywords for the names that select parts of other members: calibration
    (from the record; `rig` is the pack's camera order), and per-camera kinds to stack."""
    asked = list(fields or ())
    return {"calibration": "calibration" in asked, "rig": tuple(packed.cameras),
            "stacked": tuple(stacked_kinds(spec, asked)), **class_options(spec, asked),
            "row_fields": row_fields(spec)}

