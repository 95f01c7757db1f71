"""The declarative YAML adapter: route folders described by a layout YAML (layouts/*.yaml ship
the built-in ones; any other .yaml path works the same), planned frame by frame from their
measurements (folders.py, measure.py) into the shared RoutePlan/FrameTask stream; or the same
route folders inside `.tar.gz` / `.zip` archives, read in place (archived.py).

Adding a YAML dataset is a layouts/<name>.yaml file (it registers under its stem) plus a
synthetic writer in pack/synth/.
"""
from __future__ import annotations

import logging
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from ...errors import PackError, WrongLayout
from ...routes import RoutePlan, check_key_collisions, raise_first_skip, select_part
from ..base import Dataset, PackInput
from ..poses import ArrayEncoder
from ....objstore import is_objstore
from .archived import ArchivedEncoder, RouteArchives
from .folders import find_routes, plan_route, route_folders
from .layout_spec import layout_spec, readers
from .layouts import LAYOUT_DIR, Layout, load_layout
from .mismatch import layout_matches, no_frames

log = logging.getLogger(__name__)


class RoutesDataset(Dataset):
    """Route folders of one layout YAML: a built-in name (its file in layouts/) or a path."""

    def __init__(self, layout: str) -> None:
        self.layout = layout

    def recognises(self, input_dir: str | Path) -> bool:
        try:
            return layout_matches(input_dir, load_layout(self.layout))
        except (ValueError, OSError):
            return False

    def open(self, input_dir: str | Path, opts: Any) -> tuple[PackInput, Any]:
        try:
            layout = load_layout(self.layout)
        except (ValueError, OSError) as exc:   # unknown name, missing file, invalid YAML
            raise PackError(f"--layout {self.layout}: {exc}") from None
        pred_len = opts.pred_len if opts.pred_len is not None else layout.pred_len
        spec = layout_spec(layout, pred_len, opts.image_format or layout.image_ext)
        archives = _archives(input_dir, layout, opts)
        all_routes = archives.routes() if archives else find_routes(input_dir, layout)
        check_key_collisions(all_routes, opts.dot_replacement)
        routes = select_part(all_routes, opts.part, opts.select)
        opts = replace(opts, pred_len=pred_len)
        encoder = (ArchivedEncoder if archives else ArrayEncoder)(
            spec, layout.image_ext, opts.quality, opts.resize, opts.check_images,
            readers(layout, spec), opts.allow_pickle_input)
        if archives:
            archives.start(routes)
            return PackInput(layout, spec, routes, lambda r: archives.plan(
                r, lambda: _checked_plan(input_dir, r, layout, opts), opts.on_error == "fail"),
                encoder, sum(archives.frames[r] for r in routes)), opts
        ext = "." + layout.measurements_ext
        total = sum(n.endswith(ext) for r in routes
                    for n in os.listdir(Path(input_dir) / r / layout.measurements))
        if routes and not total:
            raise WrongLayout(no_frames(input_dir, routes, layout))
        return PackInput(layout, spec, routes, lambda r: _checked_plan(input_dir, r, layout, opts),
                         encoder, total), opts


def _archives(input_dir: str | Path, layout: Layout, opts: Any) -> RouteArchives | None:
    """INPUT_DIR's archives of routes, when it holds no route folders (archived.py); None to
    pack the folders (archives beside them are left alone, and said so)."""
    stored = isinstance(input_dir, str) and is_objstore(input_dir)
    folders = [] if stored else route_folders(input_dir, layout)
    if folders:
        return None
    archives = RouteArchives(input_dir, layout.measurements, opts.remote(), opts.spool_bytes)
    if not archives.archives:
        if not stored:
            find_routes(input_dir, layout)   # raises its "no route folders found"
        raise PackError(f"INPUT_DIR {input_dir}: no .tar.gz or .zip archives found under this "
                        "prefix; expected archives of route folders. Fix: check the bucket and "
                        "prefix (the URL), and that the archives were uploaded there")
    if archives.without_routes:
        log.warning("%d of %d archives hold no route folder of layout %s (label trees such as "
                    "language annotations are not read): skipped, e.g. %s",
                    len(archives.without_routes), len(archives.archives), layout.name,
                    archives.without_routes[0])
    if not archives.where:
        raise WrongLayout(f"INPUT_DIR {input_dir}: none of its {len(archives.archives)} "
                          f"archives holds a route folder (a folder holding "
                          f"'{layout.measurements}/', layout {layout.name})", "add the archives "
                          "of the driving data, or choose the right --layout")
    return archives


def _checked_plan(input_dir: str | Path, route: str, layout: Layout, opts: Any) -> RoutePlan:
    plan = plan_route(input_dir, route, layout, opts.pred_len, opts.dot_replacement,
                      opts.allow_pickle_input, opts.all_frames)
    if plan.filtered:
        log.info("route %s left out by the layout's route filter: %s", route, plan.filtered)
    raise_first_skip(plan, opts.on_error)
    return plan


def yaml_datasets() -> dict[str, Dataset]:
    """One dataset per shipped layout YAML, under its file's stem."""
    return {p.stem: RoutesDataset(p.stem) for p in sorted(LAYOUT_DIR.glob("*.yaml"))}


__all__ = ["LAYOUT_DIR", "Layout", "RoutesDataset", "load_layout", "yaml_datasets"]
