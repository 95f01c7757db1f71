"""Procedural CARLA-like routes in each dataset's raw on-disk layout (no simulator needed).

One writer per dataset (tcp.py: tcp and transfuser4, garage.py, transfuser2022.py, roach.py:
tcp_roach, bench2drive.py) over the shared world (world.py: road and ego drive, renderer;
road.py; sensors.py: LiDAR, depth, semantics). The registry maps a layout name to its writer:
`carla-wds synth --layout NAME` and `synth_dataset(out, NAME)` take the names from it, and
`register_writer` adds a dataset's writer from outside the package (pack.datasets.register does).
"""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import Callable, Union

from ...suggest import did_you_mean
from .tcp import DEFAULT_IMAGE_SIZE, LAYOUT_CAMERAS

# A writer: (out_dir, layout=, episodes=, frames=, seed=, image_size=, progress=) -> the route
# (or clip) folders it wrote, sorted; image_size is (height, width) or None (its default).
Writer = Callable[..., list[Path]]

# layout -> the module of this package whose `synth_dataset` writes it (imported on first use:
# the writers pull in cv2 and h5py), or a registered writer.
_WRITERS: dict[str, Union[str, Writer]] = {
    **{name: "tcp" for name in LAYOUT_CAMERAS}, "garage": "garage",
    "transfuser2022": "transfuser2022", "bench2drive": "bench2drive", "tcp_roach": "roach",
    "garage_lb2": "garage_lb2", "garage_lb2_simlingo": "garage_lb2", "lead": "lead"}


def register_writer(layout: str, writer: Writer) -> None:
    """Make `synth_dataset(out, layout)` (and `carla-wds synth --layout layout`) use `writer`."""
    _WRITERS[layout] = writer


def synth_layouts() -> list[str]:
    """Every layout a writer is registered for, sorted."""
    return sorted(_WRITERS)


def writer(layout: str) -> Writer:
    """The writer of `layout`; ValueError naming the valid layouts for an unknown one."""
    if layout not in _WRITERS:   # the same "did you mean" as pack --layout
        raise ValueError(f"--layout {layout}: unknown layout {layout!r}"
                         f"{did_you_mean(layout, _WRITERS)}; synth writes {synth_layouts()}")
    found = _WRITERS[layout]
    if isinstance(found, str):
        return importlib.import_module(f"{__name__}.{found}").synth_dataset
    return found


def synth_dataset(out_dir: str | Path, layout: str = "tcp", episodes: int = 4, frames: int = 40,
                  seed: int = 0, image_size: tuple[int, int] | None = None,
                  progress: bool = True) -> list[Path]:
    """Write `episodes` routes (clips) of `layout` under out_dir and return them sorted.

    image_size is the cameras' (height, width), as everywhere in carla-wds (CARLAWebData's
    image_size, `carla-wds synth --image-size HxW`); None: the layout's real sensor size. Each
    writer's docstring gives its folders, rate and default image size.
    Output is byte-identical for the same arguments. Raises ValueError for bad arguments and
    FileExistsError if a folder to be written already holds files (nothing is overwritten)."""
    return writer(layout)(out_dir, layout=layout, episodes=episodes, frames=frames, seed=seed,
                          image_size=image_size, progress=progress)


__all__ = ["DEFAULT_IMAGE_SIZE", "LAYOUT_CAMERAS", "Writer", "register_writer", "synth_dataset",
           "synth_layouts", "writer"]


def _module(layout: str):
    found = writer_module(layout)
    return None if found is None else importlib.import_module(f"{__name__}.{found}")


def writer_module(layout: str) -> str | None:
    """The module (of this package) that writes `layout`, or None for a registered writer."""
    writer(layout)   # ValueError naming the valid layouts for an unknown one
    found = _WRITERS[layout]
    return found if isinstance(found, str) else None


def archive_forms(layout: str) -> list[str]:
    """The forms in which `layout`'s dataset distributes its routes as archives (its writer
    module's ARCHIVE_FORMS), which `synth_archives` writes; [] where it has none."""
    module = _module(layout)
    return sorted(getattr(module, "ARCHIVE_FORMS", ()))


def synth_archives(out_dir: str | Path, layout: str, form: str, episodes: int = 4,
                   frames: int = 40, seed: int = 0, image_size: tuple[int, int] | None = None
                   ) -> list[Path]:
    """Write `episodes` routes of `layout` as its dataset distributes them (`form`, one of
    archive_forms(layout)): the archives only, sorted. The same routes as synth_dataset's;
    ValueError naming the layout's forms for another one."""
    forms = archive_forms(layout)
    if form not in forms:
        raise ValueError(f"archives {form!r}: layout {layout!r} is distributed as "
                         + (f"one of {forms}" if forms else "route folders only (no archive "
                            "form); write it without archives")
                         )
    return _module(layout).synth_archives(out_dir, form=form, episodes=episodes, frames=frames,
                                          seed=seed, image_size=image_size)

