"""The pack registry: layout name -> the Dataset that packs it (base.py: the one interface).

Built in: the declarative YAML layouts (routes/: one Dataset per shipped .yaml file) and the
code datasets (bench2drive/). A layout that is a path to a .yaml file is packed by the YAML
adapter. `register` adds a dataset (and its synthetic writer) from outside the package; the
CLI's --layout help, its dataset options and tools/check_wheel.sh read their lists from here.

Adding a YAML dataset: routes/layouts/<name>.yaml (registered under its stem) plus a writer in
pack/synth/ (a line in its _WRITERS). Adding a code dataset: a folder here with a Dataset
subclass (its options as DatasetOption, `open` -> PackInput of episodes, a planner yielding
RoutePlans of FrameTasks, a frames.FrameEncoder), a writer in pack/synth/, and a registry line
below (or `register(name, dataset, synth=writer)` from outside the package).
"""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Mapping

from ...suggest import did_you_mean
from ..errors import PackError, WrongLayout, bad_option
from ..synth import Writer, register_writer
from .base import Dataset, DatasetOption, PackInput
from .bench2drive import DATASETS as _CODE_DATASETS
from .lead import DATASETS as _LEAD
from .routes import RoutesDataset, yaml_datasets
# a code dataset says which frames its loader serves with the YAML adapter's rule
from .routes.layout_parts import SampleRule

_REGISTRY: dict[str, Dataset] = {**yaml_datasets(), **_CODE_DATASETS, **_LEAD}
_BUILT_IN = tuple(_REGISTRY)   # the layouts shipped with the package
DEFAULT_LAYOUT = "tcp"   # `carla-wds pack` and PackOptions without a --layout


def register(name: str, dataset: Dataset, synth: Writer | None = None) -> None:
    """Pack `--layout name` with `dataset` (and write it with `synth`, for `carla-wds synth`)."""
    if not isinstance(dataset, Dataset):
        raise TypeError(f"register({name!r}, ...): expected a pack.datasets.Dataset, got "
                        f"{type(dataset).__name__}")
    _REGISTRY[name] = dataset
    if synth is not None:
        register_writer(name, synth)


def builtin_layouts() -> list[str]:
    """Every registered layout name, sorted."""
    return sorted(_REGISTRY)


def dataset_for(layout: str) -> Dataset:
    """The dataset of a layout name, or the YAML adapter for a path to a layout file; a name
    nothing registered is a PackError naming the registered layouts."""
    name = str(layout)
    if name in _REGISTRY:
        return _REGISTRY[name]
    if not Path(name).suffix:
        raise PackError(f"--layout {name}: unknown layout {name!r}"
                        f"{did_you_mean(name, _REGISTRY)}; built-in layouts are "
                        f"{builtin_layouts()}, or pass a path to a layout .yaml file")
    return RoutesDataset(name)


def matching_layouts(input_dir: str | Path, but: str = "") -> list[str]:
    """The registered layouts (but `but`) whose dataset recognises input_dir's files."""
    return [name for name, ds in _REGISTRY.items() if name != but and ds.recognises(input_dir)]


def open_input(input_dir: str | Path, opts: Any) -> tuple[PackInput, Any]:
    """opts.layout's dataset's `open`; INPUT_DIR of another layout names the layouts whose
    files it holds."""
    try:
        return dataset_for(opts.layout).open(input_dir, opts)
    except WrongLayout as exc:
        found = matching_layouts(input_dir, but=str(opts.layout))
        fix = (f"pack with --layout {found[0]}" + (f" (layouts whose files match: "
               f"{', '.join(found)})" if len(found) > 1 else "")) if found else exc.fix
        raise PackError(f"{exc}. Fix: {fix}") from None


def all_options() -> list[DatasetOption]:
    """The options every registered dataset owns, each name once, in registry order."""
    seen: dict[str, DatasetOption] = {}
    for name in _REGISTRY:
        for option in _REGISTRY[name].options:
            seen.setdefault(option.name, option)
    return list(seen.values())


def identity_options(layout: str) -> list[DatasetOption]:
    """The dataset options a pack's identity (manifest pack_args, the resume check) lists:
    the built-in datasets' (every manifest has listed them since they were PackOptions
    fields, so its bytes stay) and the layout's own, but no other registered dataset's, so
    what a process has registered never changes another layout's manifest."""
    seen: dict[str, DatasetOption] = {}
    for name in (*_BUILT_IN, str(layout)):
        for option in _REGISTRY[name].options if name in _REGISTRY else ():
            seen.setdefault(option.name, option)
    return list(seen.values())


def option_owners(name: str) -> list[str]:
    """The layouts whose dataset owns the option `name`."""
    return [layout for layout, ds in _REGISTRY.items() if any(o.name == name
                                                              for o in ds.options)]


def check_options(layout: str, given: Mapping[str, Any]) -> None:
    """PackError for an option `layout`'s dataset does not own (naming the layouts that do, or
    the known options), then the dataset's own check of the values."""
    dataset = dataset_for(layout)
    own = {o.name for o in dataset.options}
    flags = {o.name: o.flag for o in all_options()}
    defaults = {o.name: o.default for o in all_options()}
    for name, value in given.items():
        if name in own:
            continue
        if name not in flags:
            raise bad_option(f"dataset option {name!r}", value, f"one of {sorted(flags)}",
                             "pass an option of the layout's dataset, or leave it out")
        if value == defaults[name]:
            continue   # an option at its default says nothing, whatever the layout
        owners = " or ".join(f"--layout {o}" for o in option_owners(name))
        raise bad_option(flags[name], value, owners, f"leave {flags[name]} out for --layout "
                         f"{layout}")
    dataset.check_options(given)


# layout -> the module of this package whose `pack_maps` packs its dataset's maps into a typed
# map pack (`carla-wds pack-map`, issue 42); imported on first use
_MAP_PACKERS = {"bench2drive": "bench2drive.hdmap_pack"}


def map_layouts() -> list[str]:
    """The layouts whose dataset ships maps that `carla-wds pack-map` packs."""
    return sorted(_MAP_PACKERS)


def map_packer(layout: str) -> Any:
    """`pack_maps(maps_dir, out, allow_pickle=, clips=, progress=)` of `layout`'s dataset."""
    if layout not in _MAP_PACKERS:
        raise bad_option("--layout", layout, f"one of {map_layouts()}",
                         "pass a layout whose dataset ships maps")
    return importlib.import_module(f"{__name__}.{_MAP_PACKERS[layout]}").pack_maps


__all__ = ["DEFAULT_LAYOUT", "Dataset", "DatasetOption", "PackError", "PackInput", "RoutesDataset",
           "SampleRule", "all_options", "builtin_layouts", "check_options", "dataset_for",
           "identity_options", "map_layouts", "map_packer", "matching_layouts", "open_input",
           "register"]
