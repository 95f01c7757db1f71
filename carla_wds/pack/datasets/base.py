"""The one interface every dataset plans into, and the options a dataset declares for itself.

A dataset turns INPUT_DIR into a `PackInput`: its sample spec, its episodes (route folders,
clips, ...) in pack order, and how each episode is planned into a RoutePlan of FrameTasks that
the shared encoder (pack/frames.py) turns into samples. The packer, the options and the CLI
know datasets only through this interface and the registry (pack/datasets/__init__.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from ..routes import RoutePlan


@dataclass(frozen=True)
class DatasetOption:
    """One option a dataset owns: `carla-wds pack FLAG` and PackOptions.dataset_options[name].

    Plain data (no click), so pack/ stays free of the CLI; cli.py turns it into a click option.
    `type` is int, float or str; `choices` limits a str; `default` is what an absent option
    means (the CLI's default too), and a pack's manifest records every option's value."""
    name: str
    flag: str
    help: str
    default: Any = None
    type: type = str
    choices: tuple[str, ...] | None = None
    show_default: bool = False
    parse: Callable[[str], Any] | None = None   # CLI text -> value (e.g. a comma list)
    # False: left out of a manifest's pack_args while at its default (an option added after
    # manifests listed every option, so a pack made without it keeps its bytes)
    recorded_at_default: bool = True


@dataclass
class PackInput:
    """What one pack reads, whatever the dataset's structure: the episodes, how each is
    planned, the encoder of its tasks, and what the manifest says of it."""
    layout: Any             # .name, .rate_hz, .samples (and .spec_doc): what the manifest says
    spec: Any                             # schema.SampleSpec
    episodes: list[Any]
    plan: Callable[[Any], RoutePlan]
    encoder: Any                          # frames.FrameEncoder (or a subclass)
    total: int | None                     # frames, for the progress bar (None: unknown)
    split_missing: list[str] = field(default_factory=list)


class Dataset:
    """A dataset the packer can read. Subclass it, set `options`, implement `open`, and
    register it (pack.datasets.register) under each of its layout names."""

    #: the options it owns (beyond PackOptions' own), declared for the CLI and validation
    options: tuple[DatasetOption, ...] = ()

    def check_options(self, given: Mapping[str, Any]) -> None:
        """Raise PackError naming the first bad value of `given` (names of self.options)."""

    def summary(self, manifest: Mapping[str, Any]) -> str | None:
        """A line `carla-wds pack` prints after the common counts: the dataset's own ones."""
        return None

    def recognises(self, input_dir: str | Path) -> bool:
        """Whether input_dir (a local folder) holds this dataset's files, cheaply probed: the
        registry suggests the layouts that do when INPUT_DIR is not --layout's. Default: no."""
        return False

    def open(self, input_dir: str | Path, opts: Any) -> tuple[PackInput, Any]:
        """Find the episodes of input_dir and say how each is planned; returns the input and
        opts with what the dataset settles (pred_len) filled in. Raises PackError."""
        raise NotImplementedError
