"""CARLAWebData's front door: the request as given (options.py's groups, the old flat
keywords folded in), the arguments checked once, and the settings a model adapter or the
manifest decides (cameras, image size, fields, load adapters) resolved before any worker
starts (issue 40). dataset.py builds the loader from what this returns.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..datasets import lidar_presets
from ..limits import Limits
from ..limits import active as active_limits
from ..manifest import Manifest
from ..schema import SampleSpec
from .stream import history as windows
from .stream import overlay
from . import settings
from .stream.pipeline import Cut, DecodeBatches, Deliver, Release
from .stream.served import ReadPlan, ReadShards, Resampled, Shuffle
from .plan.strata import Stratified
from .stream.common_view import IntoView
from .adapters import (ModelAdapter, adapter_options, adapters_for, model_adapter, resolve,
                       resolve_load_adapters)
from .decode.classes import class_options
from .decode.fields import FieldOptions, row_fields, stacked_kinds
from .options import Augment, Decode, History, Overlays, Storage, Transport, fold
from .decode.transform import SampleTransform, Transform

DEFAULT_IMAGE_SIZE = (256, 512)   # for packs whose manifest records no camera size
SIZE_FIX = "Fix: image_size=(H, W) or image_size='HxW', e.g. (256, 512) or '256x512'"


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
    kw["image_size"] = image_size(kw["image_size"])
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
    if r.adapter is None:   # the caller's size, or the pack's own
        if r.image_size is not None:
            warn_flipped(r.image_size, manifest, r.cameras)
        return None, r.transform, {**given, "image_size": r.image_size or
                                   pack_size(manifest, r.cameras)}, r.label_options
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


def image_size(value: Any) -> tuple[int, int] | None:
    """image_size as given: None (the pack's size), (H, W) of positive whole numbers, or an
    "HxW" string such as "256x512"; anything else is one line naming the fix."""
    if value is None:
        return None
    if isinstance(value, str):
        parts = value.lower().replace(" ", "").split("x")
        if len(parts) != 2 or not all(p.isdigit() for p in parts):
            raise ValueError(f"image_size={value!r}: a string must be 'HxW'. {SIZE_FIX}")
        value = (int(parts[0]), int(parts[1]))
    if not isinstance(value, (tuple, list)) or len(value) != 2 or not all(
            isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in value):
        raise TypeError(f"image_size={value!r}: expected (H, W), two whole numbers, or an "
                        f"'HxW' string. {SIZE_FIX}")
    if min(value) < 1:
        raise ValueError(f"image_size={tuple(value)}: both sides must be >= 1. {SIZE_FIX}")
    return int(value[0]), int(value[1])


def pack_size(manifest: Manifest, cameras: list[str] | None) -> tuple[int, int]:
    """The first served camera's (H, W) as the pack recorded it; DEFAULT_IMAGE_SIZE for packs
    made before the manifest recorded sizes."""
    recorded = [s for s in manifest.sizes_of(tuple(cameras or manifest.spec.cameras)) if s]
    return (int(recorded[0][0]), int(recorded[0][1])) if recorded else DEFAULT_IMAGE_SIZE


def warn_flipped(size: tuple[int, int], manifest: Manifest, cameras: list[str] | None) -> None:
    """One warning when the requested size is landscape and a served camera portrait (or the
    other way round): every image would be stretched across its aspect."""
    names = tuple(cameras or manifest.spec.cameras)
    for name, stored in zip(names, manifest.sizes_of(names)):
        if stored and (stored[1] - stored[0]) * (size[1] - size[0]) < 0:
            h, w = stored
            warnings.warn(f"image_size {size[0]}x{size[1]} is {_shape(size)}, but camera "
                          f"{name!r} is {h}x{w} ({_shape(stored)}) in {manifest.where}: its "
                          f"images are stretched across their aspect. Fix: an image_size of "
                          f"the pack's aspect, e.g. {h}x{w}", UserWarning, stacklevel=5)
            return


def _shape(size: tuple[int, int]) -> str:
    return "portrait" if size[0] > size[1] else "landscape"


def stream_stages(*, mode: str, batches_per_epoch: int | None, stratified: bool, history: int,
                  sequence: dict[str, Any], join: overlay.OverlayJoin | None,
                  transform: SampleTransform | None, view: Any = None,
                  maps: Any = None) -> tuple[tuple, tuple]:
    """The workers' stages (pipeline.py), built once: (Epoch.encoded: on one stream of
    encoded samples, Epoch.stages: a worker's whole stream). `stratified`: a stratified mix
    plans the train epochs (strata.py); `sequence`: history_settings' record of the packs
    (each pack's frame numbers between a window's steps and its frame step); `join`:
    overlays read in step; `view`: a mix of layouts' common view, each sample put into it before decoding; `maps`:
    the map stage (mappack.MapVectors), after decoding."""
    encoded = (ReadShards() if join is None else overlay.ReadJoined(join),
               *([windows.Windows.of(history, sequence)] if history else []),
               *([Shuffle()] if mode == "train" else []))
    source = Stratified() if stratified else \
        Resampled() if batches_per_epoch is not None else ReadPlan()
    steps = history + 1   # frames per sample: a window's, decoded as one flat batch
    stages = (source, Cut(), *([windows.Flatten(steps)] if history else []), Release(),
              *([IntoView(view)] if view is not None else []),
              *([overlay.Tap(join)] if join is not None else []),
              DecodeBatches(steps, reuse=transform is not None),
              *([overlay.Attach()] if join is not None else []),
              *([maps] if maps is not None else []),
              *([Transform(transform, overlay.kinds(join), steps)] if transform is not None else []),
              Deliver())
    return encoded, stages
