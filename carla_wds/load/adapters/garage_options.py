"""adapter="garage" under another carla_garage config: `garage_adapter(config)` reads their
`GlobalConfig` (autonomousvision/carla_garage@1448bed team_code/config.py), or a dict of its
fields, and returns the name of an adapter that serves what their loader (team_code/data.py
CARLA_Data) gives under that config. A dict holds overrides of GlobalConfig's defaults, as
`GlobalConfig().initialize(**fields)` sets them.

Only the fields their loader reads count (every `config.<name>` in data.py); the rest
(learning rate, model sizes, loss weights, ...) never change a batch and are ignored. Of those:
- implemented, any valid value: `max_num_bbs` (bounding_boxes' rows), `target_speed_bins` (the
  target_speed class: 0 braking, else 1 + digitize by the bins), `angle_bins` (angle_index:
  digitize by the bins), `use_wp_gru` (ego_waypoints served only when on), `augment` and
  `augment_percentage` (the camera twin's p under the loader's augment=True), `use_color_aug`
  and `color_aug_prob` (their colour augmentation under augment=True); `target_speeds` and
  `angles` must have one class more than their bins (their heads' class counts);
- fixed at their default (the pack or the histogram preset decides them): every other field
  in FIXED. Another value is refused in one line naming it, before any worker starts.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields, replace
from typing import Any

import numpy as np

from .garage import NAME as TWIN
from .garage_model import GARAGE, GarageOptions
from .model import ModelAdapter

_MISSING = object()
SOURCE = "carla_garage@1448bed team_code/config.py"
CONVERTER = (0, 0, 0, 0, 4, 0, 5, 2, 6, 0, 1, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0)
# data.py's config fields that the adapter serves at their GlobalConfig default only
FIXED: dict[str, Any] = {
    "seq_len": 1, "img_seq_len": 1, "lidar_seq_len": 1, "use_plant": False,
    "use_plant_labels": False, "detect_boxes": True, "use_semantic": True,
    "use_bev_semantic": True, "use_depth": True, "smooth_route": True, "num_route_points": 20,
    "pred_len": 8, "wp_dilation": 1, "skip_first": 10, "train_sampling_rate": 1,
    "min_x": -32, "max_x": 32, "min_y": -32, "max_y": 32, "min_z": -4, "max_z": 4,
    "pixels_per_meter": 4.0, "lidar_resolution_width": 256, "lidar_resolution_height": 256,
    "bev_down_sample_factor": 4, "perspective_downsample_factor": 1,
    "num_lidar_hits_for_detection": 7, "num_dir_bins": 12, "num_bb_classes": 4,
    "hist_max_per_pixel": 5, "lidar_split_height": 0.2, "use_ground_plane": False,
    "max_height_lidar": 100.0, "use_cutout": False,   # lidar_aug_prob: only with use_cutout
    "dense_route_planner_min_distance": 3.5, "converter": CONVERTER,
    "bev_converter": tuple(range(11))}
# config.py computes target_speed_bins from these in __init__ only: a dict that sets them
# without the bins changes nothing in their loader
SPEEDS = ("target_speed_walker", "target_speed_slow", "target_speed_fast")

DEFAULT = GarageOptions()          # adapter="garage": their defaults with use_wp_gru on
THEIRS = replace(DEFAULT, use_wp_gru=False)   # GlobalConfig()'s own values
IMPLEMENTED = tuple(f.name for f in fields(GarageOptions))
KNOWN = (*IMPLEMENTED, "target_speeds", "angles", *SPEEDS, *FIXED)


def _refuse(name: str, value: Any, why: str) -> None:
    raise ValueError(f"adapter 'garage' option {name}={value!r}: {why} ({SOURCE}; implemented: "
                     f"{', '.join(IMPLEMENTED)}; the other fields their loader reads are "
                     "served at their defaults)")


def _get(config: Any, name: str) -> Any:
    if isinstance(config, Mapping):
        return config.get(name, _MISSING)
    return getattr(config, name, _MISSING)


def _same(value: Any, default: Any) -> bool:
    """value is the default: element by element for lists, == for one number or flag."""
    if isinstance(default, tuple):
        try:
            return np.array_equal(np.asarray(value, np.float64), np.asarray(default, np.float64))
        except (TypeError, ValueError):
            return False
    return not isinstance(value, (str, bytes)) and np.ndim(value) == 0 and bool(value == default)


def _bins(name: str, value: Any) -> tuple[float, ...]:
    try:
        bins = np.asarray(value, np.float64)
    except (TypeError, ValueError):
        bins = np.zeros(0)
    if bins.ndim != 1 or not len(bins) or not np.all(np.isfinite(bins)) or \
            np.any(np.diff(bins) <= 0):
        _refuse(name, value, "expected a non-empty, strictly increasing list of numbers")
    return tuple(bins.tolist())


def _flag(name: str, value: Any) -> bool:
    if isinstance(value, (bool, np.bool_)) or (isinstance(value, (int, np.integer))
                                                and value in (0, 1)):
        return bool(value)
    _refuse(name, value, "expected a bool (or 0 / 1)")
    return False


def _probability(name: str, value: Any) -> float:
    if isinstance(value, (bool, str)) or not isinstance(value, (int, float, np.number)) or \
            not 0.0 <= float(value) <= 1.0:
        _refuse(name, value, "expected a probability in [0, 1]")
    return float(value)


def _count(name: str, value: Any) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or \
            value < 0:
        _refuse(name, value, "expected a whole number >= 0")
    return int(value)


PARSE = {"max_num_bbs": _count, "target_speed_bins": _bins, "angle_bins": _bins,
         "use_wp_gru": _flag, "augment": _flag, "augment_percentage": _probability,
         "use_color_aug": _flag, "color_aug_prob": _probability}


def _one_edit(a: str, b: str) -> bool:
    """a and b differ by one inserted, deleted or changed letter, or two swapped ones."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        d = [i for i in range(len(a)) if a[i] != b[i]]
        return len(d) == 1 or (len(d) == 2 and d[1] == d[0] + 1 and a[d[0]] == b[d[1]]
                               and a[d[1]] == b[d[0]])
    short, long_ = sorted((a, b), key=len)
    return any(long_[:i] + long_[i + 1:] == short for i in range(len(long_)))


def _check_keys(config: Mapping) -> None:
    """A dict key one typo away from a field the loader reads is refused (no GlobalConfig
    field at 1448bed is); any other unknown key is a field that changes no batch."""
    for key in config:
        near = [k for k in KNOWN if _one_edit(str(key), k)]
        if key not in KNOWN and near:
            raise ValueError(f"adapter 'garage' option {key!r}: not a field carla_garage's "
                             f"loader reads; did you mean {near[0]!r}? ({SOURCE})")
    given = [k for k in SPEEDS if k in config]
    if given and "target_speed_bins" not in config:
        _refuse(given[0], config[given[0]], "their loader reads target_speed_bins, which "
                "config.py computes from target_speed_walker/slow/fast + 0.1 only in "
                "__init__. Fix: give target_speed_bins too")


def _classes(config: Any, opts: GarageOptions) -> None:
    """target_speeds and angles: one class per bin gap and the brake (their heads' sizes)."""
    for name, bins in (("target_speeds", opts.target_speed_bins), ("angles", opts.angle_bins)):
        value = _get(config, name)
        if value is not _MISSING and len(np.atleast_1d(np.asarray(value))) != len(bins) + 1:
            _refuse(name, value, f"expected {len(bins) + 1} entries, one more than its bins "
                    f"{list(bins)}")


def garage_options(config: Any) -> GarageOptions:
    """Their config object or a dict of its fields as GarageOptions; None: adapter="garage"'s
    own (use_wp_gru on). A value the adapter does not implement is refused in one line."""
    if config is None:
        return DEFAULT
    if isinstance(config, (str, bytes, int, float)):
        raise TypeError(f"adapter 'garage' config {config!r}: expected carla_garage's "
                        "GlobalConfig or a dict of its fields")
    if isinstance(config, Mapping):
        _check_keys(config)
    for name, default in FIXED.items():
        value = _get(config, name)
        if value is not _MISSING and not _same(value, default):
            _refuse(name, value, f"not implemented; it serves {name}={default!r} only. Fix: "
                    f"{name}={default!r} or leave it out")
    given = {n: PARSE[n](n, v) for n in IMPLEMENTED
             if (v := _get(config, n)) is not _MISSING}
    opts = replace(THEIRS, **given)
    _classes(config, opts)
    return opts


def configured(config: Any) -> ModelAdapter:
    """adapter="garage" under `config`, named by what differs from adapter="garage"'s own."""
    opts = garage_options(config)
    changed = [f"{n}={getattr(opts, n)!r}" for n in IMPLEMENTED
               if getattr(opts, n) != getattr(DEFAULT, n)]
    name = f"garage({', '.join(changed)})" if changed else GARAGE.name
    p = opts.augment_percentage if opts.augment else 0.0
    return replace(GARAGE, name=name, options=opts, augment_load_adapters=((TWIN, p),))
