"""The YAML adapter for layouts whose route filter names a route rule (`keep_also`).

folders.route_filter_reason applies a filter's score threshold alone; a layout with a
`keep_also` rule (formulas.ROUTE_RULES) is decided here by RouteFilter.reason, which applies
both, and the route is then planned without the filter. The rest is RoutesDataset's: a layout
without a rule is planned exactly as before. (Once route_filter_reason delegates to
RouteFilter.reason this class is RoutesDataset again, and archived routes are filtered by
the rule too; until then they are refused for such a layout.)
"""
from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

from ...errors import PackError
from ...routes import RoutePlan, raise_first_skip
from ...sources import read_json
from ..base import PackInput
from . import RoutesDataset
from .folders import _unreadable_filter, plan_route
from .layouts import Layout

log = logging.getLogger(__name__)


class RuleRoutesDataset(RoutesDataset):
    """RoutesDataset that also honours a route filter's `keep_also` rule."""

    def open(self, input_dir: str | Path, opts: Any) -> tuple[PackInput, Any]:
        pack_input, opts = super().open(input_dir, opts)
        layout: Layout = pack_input.layout
        if layout.route_filter is None or not layout.route_filter.keep_also:
            return pack_input, opts
        folders = [r for r in pack_input.episodes if (Path(input_dir) / r).is_dir()]
        if len(folders) < len(pack_input.episodes):
            raise PackError(f"INPUT_DIR {input_dir}: --layout {self.layout} applies its route "
                            f"filter's rule {layout.route_filter.keep_also} to route folders "
                            "only, and these routes are in archives. Fix: extract the archives "
                            "and pack the folders")
        pack_input.plan = lambda route: _plan(input_dir, route, layout, opts)
        return pack_input, opts


def _plan(input_dir: str | Path, route: str, layout: Layout, opts: Any) -> RoutePlan:
    flt = layout.route_filter
    path = Path(input_dir) / route / flt.file
    if not path.is_file():
        reason = (f"no {flt.file}; the layout keeps only routes its route filter keeps (restore "
                  "the file to pack the route)")
    else:
        try:
            reason = flt.reason(read_json(path))
        except (ValueError, OSError) as exc:   # bad input: each frame skipped, naming it
            plan = _unreadable_filter(Path(input_dir) / route, route, layout,
                                      f"unreadable ({exc})")
            raise_first_skip(plan, opts.on_error)
            return plan
    if reason:
        log.info("route %s left out by the layout's route filter: %s", route, reason)
        return RoutePlan(route, filtered=reason)
    plan = plan_route(input_dir, route, replace(layout, route_filter=None), opts.pred_len,
                      opts.dot_replacement, opts.allow_pickle_input, opts.all_frames)
    raise_first_skip(plan, opts.on_error)
    return plan
