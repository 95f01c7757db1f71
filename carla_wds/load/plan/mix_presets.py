"""Named mix presets (issue 41): a codebase's bucket sampling by name, as a mix spec.

    from carla_wds.load.plan.mix_presets import mix_preset
    spec = mix_preset(NAME, "shards/train")            # a plain mix mapping (load/plan/mix.py)
    data = CARLAWebData(mix=spec, batch_size=32)

The presets are defined in their datasets' rooms (carla_wds/datasets/*_mix.py, collected by
datasets/mix_base.presets()); this module reads each source's manifest (its pack-time bucket
runs, pack/buckets.py), hands them to the preset's build and checks the result with mix_spec.
An unknown name, a wrong number of sources, an unknown option or a pack without buckets is a
one-line MixError naming the fix. docs/mixing_presets.md lists every preset, its buckets
next to theirs, and where they differ.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ...datasets.mix_base import MixPreset, Where, options_of, presets
from ...manifest import read_manifest
from ...suggest import did_you_mean
from .mix import MixError, mix_spec


class PackBuckets:
    """One source's pack-time buckets, from its manifest's shard records (pack order)."""

    def __init__(self, source: str, shards: list[Mapping[str, Any]]) -> None:
        self.source, self.shards = source, shards
        self.samples = sum(int(s["samples"]) for s in shards)

    def _runs(self, name: str) -> list[list]:
        runs = [r for s in self.shards for r in (s.get("buckets") or {}).get(name, [])]
        if not runs and self.samples:
            raise MixError(f"{self.source}: its manifest records no bucket {name!r}. Fix: "
                           "re-pack it with this version (`carla-wds pack` records buckets)")
        return runs

    def values(self, bucket: str) -> list[str]:
        """The values the pack records for `bucket`, sorted."""
        return sorted({str(v) for v, _ in self._runs(bucket)})

    def count(self, where: Where) -> int:
        """Samples matching every (bucket, values) of `where` (as a mix entry's where)."""
        keep = np.ones(self.samples, bool)
        for name, wanted in where:
            runs = self._runs(name)
            flags = np.asarray([str(v) in wanted for v, _ in runs], bool)
            keep &= np.repeat(flags, np.asarray([int(n) for _, n in runs], np.int64))
        return int(keep.sum())


def preset_names() -> list[str]:
    return list(presets())


def get_preset(name: str) -> MixPreset:
    """The preset called `name`; an unknown name lists the valid ones."""
    found = presets()
    if name not in found:
        raise MixError(f"mix preset {name!r} is unknown{did_you_mean(name, list(found))}; "
                       f"valid presets are {list(found)}")
    return found[name]


def mix_preset(name: str, *sources: str | Path, storage_options: dict[str, Any] | None = None,
               **options: Any) -> dict[str, Any]:
    """The mix spec (a plain mapping for CARLAWebData(mix=...)) of preset `name` over
    `sources` (pack folders or manifests, as many as the preset takes); `options` are the
    preset's own (e.g. epoch_size)."""
    preset = get_preset(name)
    if len(sources) != len(preset.sources):
        raise MixError(f"mix preset {name!r} takes {len(preset.sources)} source(s) "
                       f"({', '.join(preset.sources)}), got {len(sources)}; e.g. "
                       f"mix_preset({name!r}, {', '.join(repr(s.upper()) for s in preset.sources)})")
    try:
        given = options_of(options, preset)
        packs = [PackBuckets(str(s), read_manifest(s, storage_options=storage_options
                                                   ).doc["shards"]) for s in sources]
        spec = preset.build(packs, **given)
    except MixError:
        raise
    except ValueError as exc:   # the preset's own refusals, and a manifest's
        raise MixError(f"mix preset {name!r}: {exc}") from None
    mix_spec(spec)   # the spec's own checks, now rather than at CARLAWebData
    return spec
