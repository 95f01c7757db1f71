"""Named mix presets (issue 41): a codebase's own bucket sampling as a mix spec over
carla-wds's pack-time buckets (pack/buckets.py), defined in that dataset's room.

A room module offers presets with a `MIX_PRESETS` tuple of `MixPreset`s; `presets()` collects
them from every module of this package, so the loader (load/plan/mix_presets.py, which reads the
packs' manifests and turns a preset into the spec `CARLAWebData(mix=...)` takes) names no
dataset. A preset's `build` gets one `PackBuckets` per source (duck-typed here: `source`,
`samples`, `count(where)`, `values(bucket)`) and its options, and returns the mix spec as a
plain mapping; a ValueError from it is the user's one-line error.

Each `Bucket` records their definition next to ours: their name and number as their config
gives them (`cite`: file:line at the pinned commit), the `where` over pack-time buckets that
stands for it (None where carla-wds records nothing like it: the preset leaves it out), and
how the two differ (`differs`). docs/mixing_presets.md lists them.
"""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol

Where = tuple[tuple[str, tuple[str, ...]], ...]


class PackBuckets(Protocol):
    """What a preset's build reads of one source: its pack-time bucket runs."""
    source: str
    samples: int

    def count(self, where: Where) -> int: ...

    def values(self, bucket: str) -> list[str]: ...


@dataclass(frozen=True)
class Bucket:
    """One of their buckets: their name and number, ours for it, and where they differ."""
    theirs: str
    weight: float
    where: Where | None          # () for every sample; None: no pack-time counterpart
    cite: str                    # their file:line at the pinned commit
    differs: str = ""            # how ours differs ("" where it is the same)

    def where_doc(self) -> dict[str, list[str]]:
        return {k: list(v) for k, v in (self.where or ())}


@dataclass(frozen=True)
class MixPreset:
    """A named preset: `build(packs, **options)` -> a mix spec mapping."""
    name: str
    summary: str                 # one line: what of theirs it reproduces
    sources: tuple[str, ...]     # the sources it takes, in order, e.g. ("sim", "real")
    build: Callable[..., dict[str, Any]]
    cite: str                    # where their definition lives
    options: tuple[str, ...] = ()
    buckets: tuple[Bucket, ...] = field(default=(), repr=False)


def where(**values: str | tuple[str, ...]) -> Where:
    """A Bucket's where from keyword arguments: bucket name -> value or values."""
    return tuple(sorted((k, (v,) if isinstance(v, str) else tuple(v)) for k, v in values.items()))


def presets() -> dict[str, MixPreset]:
    """Every room's presets by name, from the modules of this package with MIX_PRESETS."""
    out: dict[str, MixPreset] = {}
    for info in pkgutil.iter_modules([str(Path(__file__).parent)]):
        module = importlib.import_module(f"{__package__}.{info.name}")
        for preset in getattr(module, "MIX_PRESETS", ()):
            if preset.name in out:
                raise RuntimeError(f"mix preset {preset.name!r} is defined twice")
            out[preset.name] = preset
    return dict(sorted(out.items()))


def spec_entry(source: str, bucket_where: Where, **way: Any) -> dict[str, Any]:
    """One mix entry over `source`, with its where when it has one."""
    entry: dict[str, Any] = {"source": source, **way}
    if bucket_where:
        entry["where"] = {k: list(v) for k, v in bucket_where}
    return entry


def options_of(given: Mapping[str, Any], preset: MixPreset) -> dict[str, Any]:
    """The options given, refused in one line when the preset takes no such option."""
    bad = sorted(set(given) - set(preset.options))
    if bad:
        raise ValueError(f"unknown options {bad}; it takes {list(preset.options) or 'none'}")
    return dict(given)
