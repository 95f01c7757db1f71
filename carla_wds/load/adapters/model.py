"""Model-ready adapters: `CARLAWebData(source, adapter=NAME)` serves what a codebase's own
`DataLoader(CARLA_Data)` gives after torch's default collate, so its training code runs
unchanged on carla-wds shards.

A ModelAdapter is a sample_transform (load/decode/transform.py) plus what it implies: the layout and
record fields it needs from the shards (checked against the manifest: a missing one is one line
naming it and the pack command that makes fitting shards), and the loader settings its codebase
uses (cameras, image size, fields, LiDAR histogram, load adapters), which the name alone sets;
a caller's conflicting setting is refused. Its `transform(adapter, sample, rng)` runs in the
workers, once per sample; `extra_keys` are the keys the batch has beyond theirs, and
`float32_keys` those given as float32 where theirs are float64.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ...manifest import Manifest

# the keys load/decode/transform.py adds to every transformed batch (its ADDED_KEYS; not imported:
# transform -> batch -> fields -> adapters would be a circle)
ADDED_KEYS = ("valid", "key")


@dataclass(frozen=True)
class ModelAdapter:
    name: str
    source: str                        # their loader, at the pinned commit
    layouts: tuple[str, ...]           # the manifest's layout names it accepts
    image_size: tuple[int, int]        # (H, W) their loader serves
    transform: Callable[["ModelAdapter", dict, np.random.Generator], dict]   # module level
    pack: str                          # the command that packs fitting shards
    cameras: tuple[str, ...] | None = None
    fields: tuple[str, ...] = ()
    lidar_histogram: str | None = None
    needs: tuple[str, ...] = ()        # the measurements record's fields it reads
    pred_len: int | None = None
    strides: tuple[Any, ...] = (None, 1)   # the pack's --stride values it accepts
    load_adapters: tuple[tuple[str, Any], ...] = ()
    extra_keys: tuple[str, ...] = ADDED_KEYS
    float32_keys: tuple[str, ...] = ()
    # augment=True: the codebase's own augmentation is in `transform` (sample["augment"]), so
    # the loader's colour augmenter stays off; and these load adapters' options are set
    own_augment: bool = False
    augment_load_adapters: tuple[tuple[str, Any], ...] = ()
    options: Any = None                # the codebase's config fields `transform` reads

    def __call__(self, sample: dict, rng: np.random.Generator) -> dict:
        return self.transform(self, sample, rng)

    def settings(self) -> dict[str, Any]:
        """The loader settings the name sets (CARLAWebData's keywords)."""
        return {"cameras": list(self.cameras) if self.cameras else None,
                "image_size": tuple(self.image_size), "fields": list(self.fields),
                "lidar_histogram": self.lidar_histogram}

    def check(self, manifest: Manifest) -> None:
        """Refuse shards that lack what this adapter needs, in one line with the fix."""
        where, spec = manifest.where, manifest.spec
        layout = manifest.doc.get("layout")
        if layout not in self.layouts:
            self._refuse(where, f"are layout {layout!r}; it needs {' or '.join(self.layouts)}")
        record = {f.name for e in spec.extras if e.codec == "record" for f in e.fields or ()}
        missing = [n for n in self.needs if n not in record]
        if missing:
            self._refuse(where, f"lack the record fields {missing}")
        missing = [c for c in self.cameras or () if c not in spec.cameras]
        if missing:
            self._refuse(where, f"lack the cameras {missing} (they hold {list(spec.cameras)})")
        if self.pred_len is not None and spec.pred_len != self.pred_len:
            self._refuse(where, f"hold {spec.pred_len} future waypoints; it needs "
                         f"{self.pred_len} (pack with --pred-len {self.pred_len})")
        stride = _pack_arg(manifest, "stride")
        if stride not in self.strides:
            self._refuse(where, f"were packed with --stride {stride}; it needs every frame "
                         "(leave --stride out)")

    def _refuse(self, where: str, what: str) -> None:
        raise ValueError(f"adapter {self.name!r} ({self.source}): the shards at {where} {what}. "
                         f"Fix: {self.pack}")


def _pack_arg(manifest: Manifest, name: str) -> Any:
    args = manifest.doc.get("pack_args") or {}
    if isinstance(args, str):   # recorded as the options' repr
        try:
            args = ast.literal_eval(args)
        except (ValueError, SyntaxError):
            return None
    return args.get(name) if isinstance(args, dict) else None


def resolve(adapter: ModelAdapter, given: dict[str, Any]) -> dict[str, Any]:
    """The adapter's settings; a setting the caller gave (not None) must equal it."""
    out = adapter.settings()
    for name, value in given.items():
        if value is None or name not in out:
            continue
        mine = out[name]
        same = (tuple(value) == tuple(mine)) if isinstance(mine, (list, tuple)) and \
            isinstance(value, (list, tuple)) else value == mine
        if not same:
            raise ValueError(f"adapter {adapter.name!r} sets {name}={mine!r} (what "
                             f"{adapter.source} uses); you passed {name}={value!r}. Fix: "
                             f"leave {name} out")
    return out


def resolve_load_adapters(adapter: ModelAdapter, options: dict[str, Any], augment: bool = False
                          ) -> dict[str, Any]:
    """The load adapters (by name) the model adapter needs on, merged with the caller's; with
    augment, also those its augmentation sets (their probabilities)."""
    out = dict(options)
    for name, value in (*adapter.load_adapters, *(adapter.augment_load_adapters if augment
                                                  else ())):
        if name in out and out[name] is not None and out[name] != value:
            raise ValueError(f"adapter {adapter.name!r} needs the load adapter {name!r} set "
                             f"to {value!r} ({adapter.source}); you set {out[name]!r}. Fix: "
                             "leave it out")
        out[name] = value
    return out
