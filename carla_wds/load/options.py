"""CARLAWebData's grouped options: small frozen records, one per concern, so that the loader
takes a few keywords instead of dozens (issue 40).

    CARLAWebData("shards/train", batch_size=8, num_workers=4,
                 transport=Transport(persistent=True, pin_memory=True),
                 storage=Storage(cache_dir="/tmp/shards", verify=True),
                 history=History(2, stride="0.5s"), augment=Augment(per_camera=False),
                 overlays=Overlays(["ovl/commentary"], required=True))

The flat keywords these replace (`persistent_workers=`, `cache_dir=`, `history_stride=`, ...)
still work for one release: `fold` moves each into its group with a DeprecationWarning naming
the new spelling. Every value is checked again where it is used (settings.py, history.py, ...);
here only the groups' own types are.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, fields, replace
from typing import Any, Mapping, Sequence

from ..limits import Limits
from ..remote import RemoteOptions


@dataclass(frozen=True)
class Transport:
    """How batches travel from the worker processes to the caller.

    Attributes:
        prefetch_factor: batches each worker prepares ahead.
        persistent: keep the workers (and their image ring) from one pass to the next.
        pin_memory: put batches in pinned host memory, for faster copies to the GPU.
    """
    prefetch_factor: int = 2
    persistent: bool = False
    pin_memory: bool = False


@dataclass(frozen=True)
class Storage:
    """Where the shards are read from and kept.

    Attributes:
        remote: `RemoteOptions(connect_timeout, read_timeout, retries, backoff)` for HTTP, S3.
        options: fsspec's options for `s3://` (key, secret, endpoint_url, ...).
        cache_dir: keep downloaded shards here, checked against the manifest's sha256.
        cache_limit_bytes: evict the least recently used cached shards to stay under this.
        shard_urls: your own location for each shard (any scheme), one per shard in order.
        verify: check each shard's sha256 while reading it.
    """
    remote: RemoteOptions | None = None
    options: Mapping[str, Any] | None = None
    cache_dir: str | None = None
    cache_limit_bytes: int | None = None
    shard_urls: Sequence[str] | None = None
    verify: bool = False


@dataclass(frozen=True)
class Decode:
    """How members are decoded.

    Attributes:
        exact_resize: decode JPEGs fully instead of at a reduced DCT scale before resizing.
        lidar_histogram: "garage" or "transfuser2022": serve LiDAR as that project's BEV
            histogram (needs "lidar" in fields).
        limits: raise some decode limits for this loader (a `Limits`, or a dict of its fields).
    """
    exact_resize: bool = False
    lidar_histogram: str | None = None
    limits: Limits | Mapping[str, int] | None = None


@dataclass(frozen=True)
class Augment:
    """The dataset's image augmentation in train mode (`augment=True` is `Augment()`).

    Attributes:
        enabled: augment at all.
        per_camera: an independent draw per camera, or one shared by all cameras.
    """
    enabled: bool = True
    per_camera: bool = True


@dataclass(frozen=True)
class History:
    """The K earlier frames of the same route per sample (`history=K` is `History(K)`).

    Attributes:
        frames: K, the earlier frames; 0: none.
        stride: samples between those frames, or seconds such as "1s".
    """
    frames: int = 0
    stride: int | str = 1


@dataclass(frozen=True)
class Overlays:
    """Overlay packs of this pack (`carla-wds pack-overlay`), read in step with it
    (`overlays=[...]` is `Overlays([...])`).

    Attributes:
        packs: the overlay packs' folders, manifests or URLs.
        required: serve only the samples with an entry in every overlay; `len()` stays exact.
        map: a map pack's folder (`carla-wds pack-map`): each frame gets its dataset's map
            ground truth in `batch.fields` (load/stream/mappack.py, docs/packing.md).
        map_gt: whose map ground truth to compute, e.g. ("vad",) or ("uniad",) on
            Bench2Drive; None: every model's the dataset's recipe has.
    """
    packs: Sequence[str] = ()
    required: bool = False
    map: str | None = None
    map_gt: Sequence[str] | None = None


# old flat keyword -> (the keyword of its group now, the group's field)
FOLDED = {"prefetch_factor": ("transport", "prefetch_factor"),
          "persistent_workers": ("transport", "persistent"),
          "pin_memory": ("transport", "pin_memory"),
          "remote": ("storage", "remote"), "storage_options": ("storage", "options"),
          "cache_dir": ("storage", "cache_dir"),
          "cache_limit_bytes": ("storage", "cache_limit_bytes"),
          "shard_urls": ("storage", "shard_urls"), "verify": ("storage", "verify"),
          "exact_resize": ("decode", "exact_resize"),
          "lidar_histogram": ("decode", "lidar_histogram"), "limits": ("decode", "limits"),
          "per_camera_augment": ("augment", "per_camera"),
          "history_stride": ("history", "stride"),
          "overlay_required": ("overlays", "required")}
GROUPS = {"transport": Transport, "storage": Storage, "decode": Decode, "augment": Augment,
          "history": History, "overlays": Overlays}
# a plain value for a group: its shorthand (augment=True, history=2, overlays=[...]); any
# value stands for history's frames, which history.py checks (a bool is refused there)
SHORT = {"augment": ("enabled", bool), "history": ("frames", object),
         "overlays": ("packs", (list, tuple))}
# old keyword -> its new name, the same value
RENAMED = {"adapters": "label_options", "sample_transform": "adapter"}


def group(name: str, value: Any) -> Any:
    """The group `name` as given: None (defaults), the record, or its shorthand."""
    kind = GROUPS[name]
    if value is None:
        return kind()
    if isinstance(value, kind):
        return value
    short = SHORT.get(name)
    if short and isinstance(value, short[1]):
        return kind(**{short[0]: value})
    plain = f", or {short[1].__name__ if isinstance(short[1], type) else 'a list'}" \
        if short else ""
    raise TypeError(f"{name}={value!r}: expected a {kind.__name__}(...){plain}. Fix: "
                    f"{name}={kind.__name__}({', '.join(f.name + '=...' for f in fields(kind))})")


def fold(given: dict[str, Any], older: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The keywords with every group a record and each old flat keyword folded into its group
    (a DeprecationWarning naming the new spelling); the keywords left (the load adapters'
    own aliases, or unknown ones) come back apart."""
    out = {**given, **{n: group(n, given.get(n)) for n in GROUPS}}
    for old, new in RENAMED.items():
        if old in older:
            _warn(old, f"{new}=")
            if given.get(new) is not None:
                raise ValueError(f"{old}= and {new}= both given; give {new}= only, not both")
            out[new] = older.pop(old)
    for old in [k for k in older if k in FOLDED]:
        name, field = FOLDED[old]
        kind = GROUPS[name]
        _warn(old, f"{name}={kind.__name__}({field}=...)")
        if getattr(out[name], field) != getattr(kind(), field) and given.get(name) is not None:
            raise ValueError(f"{old}= and {name}={kind.__name__}({field}=...) both given; "
                             f"give {name}= only")
        out[name] = replace(out[name], **{field: older.pop(old)})
    return out, older


def _warn(old: str, new: str) -> None:
    # stacklevel 5: _warn <- fold <- front.request <- CARLAWebData.__init__ <- the caller
    warnings.warn(f"CARLAWebData({old}=...) is deprecated and goes in the next release; use "
                  f"{new}", DeprecationWarning, stacklevel=5)
