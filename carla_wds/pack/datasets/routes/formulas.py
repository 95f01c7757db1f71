"""Named label formulas a layout's measurement field may compute at pack time.

A field with `formula: <name>` stores what the formula makes of the raw value at its key (and
the rest of the frame's measurements) instead of the value as saved: a dataset's own label
rule, written in that dataset's module and named here, so the layout YAML declares it and the
shared packing code knows nothing of any dataset. A formula raises ValueError with the reason
(which the pack reports for that frame, like any unreadable field).
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from . import garage_route, simlingo_rules

Formula = Callable[[Any, dict], np.ndarray]

FORMULAS: dict[str, Formula] = {
    "garage_smooth_route": garage_route.smooth_route,
    "garage_smooth_route_augmented": garage_route.smooth_route_augmented,
    "simlingo_route": simlingo_rules.route,
    "simlingo_route_augmented": simlingo_rules.route_augmented,
    "simlingo_route_adjusted": simlingo_rules.route_adjusted,
    "simlingo_route_adjusted_augmented": simlingo_rules.route_adjusted_augmented,
    "simlingo_point_augmented": simlingo_rules.point_augmented,
    "simlingo_points_augmented": simlingo_rules.points_augmented,
}

# Route rules a layout's route_filter may name as keep_also: a project's own exception to the
# score threshold, given the route's parsed results file (True: keep the route; ValueError
# naming what the file lacks).
RouteRule = Callable[[Any], bool]
ROUTE_RULES: dict[str, RouteRule] = {
    "simlingo_minor_infractions": simlingo_rules.keeps_minor_infractions,
}


def formula_value(name: str, shape: tuple[int, ...], dtype: str, raw: Any, frame: dict,
                  pad: bool = False) -> tuple[np.ndarray | None, str]:
    """(value, "") from formula `name`, held to the field's shape and dtype, or (None, why).
    With `pad`, the value is rows to be padded (at most shape[0] of shape[1:])."""
    try:
        value = np.asarray(FORMULAS[name](raw, frame), dtype=dtype)
    except (ValueError, TypeError) as exc:
        return None, f"{exc} (formula {name})"
    fits = value.shape[1:] == shape[1:] and len(value) <= shape[0] if pad and value.ndim \
        else value.shape == shape
    if not fits or (value.dtype.kind == "f" and not np.isfinite(value).all()):
        return None, (f"formula {name} gives {list(value.shape)}, not finite {list(shape)}; "
                      "expected the shape the layout declares")
    return value, ""
