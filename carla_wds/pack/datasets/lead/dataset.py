"""The LEAD / TransFuser v6 dataset of the pack registry (`--layout lead`, the page
docs/datasets/lead.md): finds the routes (folders, or one `.zip` per route read in place),
settles the cameras and folders the pack holds, and plans each route (plan.py) for the
encoder (encoder.py). The metas and boxes are pickles: read only with --allow-pickle-input,
through a pickle opcode walker (pickle_walk.py), and stored as JSON and typed members, never
as pickles."""
from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping

from ...archives import ArchiveError
from ...errors import PackError
from ...routes import RoutePlan, check_key_collisions, raise_first_skip, select_part
from ...sources import PICKLE_FLAG
from ..base import Dataset, PackInput
from .encoder import LeadEncoder
from .archive import route_files
from .labels import PRED_LEN
from .plan import inspect_routes, lead_spec, plan_lead_route
from .routes import LeadRoute, find_routes, frame_count

log = logging.getLogger(__name__)


class Lead(Dataset):
    """--layout lead: LEAD / TransFuser v6 route folders (docs/datasets/lead.md)."""

    def summary(self, manifest: Mapping[str, Any]) -> str | None:
        c = manifest["counts"]
        return (f"{c['filtered_routes']} routes left out by LEAD's route filter; metas and "
                f"boxes read from pickles ({PICKLE_FLAG}), stored as JSON")

    def recognises(self, input_dir: str | Path) -> bool:
        """Route folders holding metas/ and bboxes/ (rgb/ alone is any dataset's camera)."""
        try:
            routes = find_routes(input_dir)
        except (PackError, OSError):
            return False
        return any((r.path / "metas").is_dir() and (r.path / "bboxes").is_dir()
                   for r in routes[:3] if r.archive is None)

    def open(self, input_dir: str | Path, opts: Any) -> tuple[PackInput, Any]:
        if opts.pred_len not in (None, PRED_LEN):
            raise PackError(f"--pred-len {opts.pred_len}: LEAD's loader serves {PRED_LEN} "
                            f"waypoints (2 s at 4 Hz). Fix: leave --pred-len out")
        opts = replace(opts, pred_len=PRED_LEN)
        routes = find_routes(input_dir)
        check_key_collisions([r.name for r in routes], opts.dot_replacement)
        routes = select_part(routes, opts.part, opts.select)
        layout = inspect_routes(routes, opts.allow_pickle_input)
        spec = lead_spec(layout, opts.image_format or "jpg")
        encoder = LeadEncoder(spec, "jpg", opts.quality, opts.resize, opts.check_images,
                              allow_pickle=opts.allow_pickle_input, twin=layout.twin,
                              optional=layout.optional, sensor_twins=layout.sensor_twins)
        total = sum(_frames(r) for r in routes)
        return PackInput(layout, spec, routes, lambda r: _checked(r, opts), encoder,
                         total), opts


def _frames(route: LeadRoute) -> int:
    try:
        with route_files(route):
            return frame_count(route.folder)
    except ValueError:   # a bad zip: its plan says so
        return 0


def _checked(route: LeadRoute, opts: Any) -> RoutePlan:
    try:
        plan = plan_lead_route(route, opts)
    except ArchiveError as exc:   # a zip that cannot be read: the whole route
        if opts.on_error == "fail":
            raise PackError(f"{exc}. Fix: download the route again, or pack with "
                            "--on-error skip to list it in the manifest and go on") from None
        plan = RoutePlan(route.name, filtered=f"unreadable archive: {exc}")
    if plan.filtered:
        log.info("route %s left out by LEAD's route filter: %s", route.name, plan.filtered)
    raise_first_skip(plan, opts.on_error)
    return plan


__all__ = ["Lead"]
