"""Route folders that are not the layout's: what they hold, and whether a layout's files match
them (the registry asks each layout, pack.datasets.matching_layouts, to suggest --layout)."""
from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

from .layouts import Layout

PROBE_DEPTH = 4    # folders below INPUT_DIR searched for a route (datasets nest 1-3 deep)
PROBE_ROUTES = 3   # routes looked into per layout: enough to see the files, cheap on a big tree


def holds(route: Path, limit: int = 12) -> str:
    """A route folder's subfolders and what kind of files each holds, e.g.
    "measurements/ (12 .json.gz), rgb/ (12 .jpg)"."""
    parts = []
    for d in sorted(p for p in route.iterdir() if p.is_dir())[:limit]:
        kinds = Counter("." + f.partition(".")[2] for f in os.listdir(d) if "." in f)
        what = ", ".join(f"{n} {ext}" for ext, n in kinds.most_common(2))
        parts.append(f"{d.name}/ ({what or 'no files'})")
    return ", ".join(parts) or "no folders"


def no_frames(input_dir: str | Path, routes: list[str], layout: Layout) -> str:
    """The message of route folders none of which holds a measurement file of the layout."""
    meas = f"{layout.measurements}/NNNN.{layout.measurements_ext}"
    return (f"INPUT_DIR {input_dir}: none of its {len(routes)} route folder"
            f"{'' if len(routes) == 1 else 's'} holds a {meas} file, which layout "
            f"{layout.name} reads; e.g. {routes[0]} holds {holds(Path(input_dir) / routes[0])}")


def _frame_files(folder: Path, ext: str) -> bool:
    try:
        return any(n.partition(".")[2] == ext and n.partition(".")[0].isdigit()
                   for n in os.listdir(folder))
    except OSError:
        return False


def layout_matches(input_dir: str | Path, layout: Layout) -> bool:
    """Whether route folders under input_dir (up to PROBE_DEPTH down) hold the layout's
    measurement files and the folders of its cameras, sensors and sources."""
    root = Path(input_dir)
    if not root.is_dir():
        return False
    looked = 0
    for dirpath, dirnames, _ in os.walk(root):
        if len(Path(dirpath).relative_to(root).parts) >= PROBE_DEPTH:
            dirnames.clear()
        if layout.measurements not in dirnames:
            continue
        route = Path(dirpath)
        folders = [*layout.cameras.values(), *(s.folder for s in layout.sensors),
                   *(s.folder for s in layout.sources)]
        if _frame_files(route / layout.measurements, layout.measurements_ext) and all(
                (route / folder).is_dir() for folder in folders):
            return True
        looked += 1
        if looked >= PROBE_ROUTES:
            return False
        dirnames.clear()
    return False
