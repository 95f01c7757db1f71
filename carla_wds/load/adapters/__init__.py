"""The load adapters' room: dataset- and codebase-specific load transforms, by name.

The loader names none of them: it builds every registered kind against the manifest's spec
and the caller's options (`CARLAWebData(label_options={name: option})`), and each kind decides
whether it applies (base.AdapterKind). A new adapter is one module here plus one `register`
call below (or from the caller's own code, before the loader is built).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...schema import SampleSpec
from .base import AdapterKind, Draw, LoadAdapter, SampleState
from .garage import CameraTwinKind
from .model import ModelAdapter, resolve, resolve_load_adapters
from .tcp import TCP, BrakeOverrideKind

ADAPTERS: dict[str, AdapterKind] = {}


def _add(table: dict, item: Any, what: str) -> Any:
    """Add item under its name (a name already taken is refused)."""
    if item.name in table:
        raise ValueError(f"{what} {item.name!r} is registered already")
    table[item.name] = item
    return item


def register(kind: AdapterKind) -> AdapterKind:
    """Add a load adapter kind under its name."""
    return _add(ADAPTERS, kind, "load adapter")


for _kind in (BrakeOverrideKind(), CameraTwinKind()):
    register(_kind)


# model-ready adapters (model.py), by name: CARLAWebData(adapter=NAME)
MODEL_ADAPTERS: dict[str, ModelAdapter] = {}


def register_model(adapter: ModelAdapter) -> ModelAdapter:
    """Add a model-ready adapter under its name."""
    return _add(MODEL_ADAPTERS, adapter, "model adapter")


register_model(TCP)
from .garage_model import GARAGE  # noqa: E402 - beside its registration
register_model(GARAGE)
from .b2d_tcp import B2D_TCP  # noqa: E402 - beside its registration
register_model(B2D_TCP)
from .transfuser2022 import TRANSFUSER2022  # noqa: E402 - beside its registration
register_model(TRANSFUSER2022)
from .simlingo import SIMLINGO  # noqa: E402 - beside its registration
register_model(SIMLINGO)
from .lead import LEAD  # noqa: E402 - beside its registration
register_model(LEAD)
from .garage_options import configured as _garage_configured  # noqa: E402 - beside its use


def garage_adapter(config: Any) -> str:
    """adapter="garage" under carla_garage's GlobalConfig, or a dict of its fields
    (garage_options.py): the name to pass as CARLAWebData(adapter=...), registered on first
    use. A value it does not implement is refused here, in one line naming it."""
    adapter = _garage_configured(config)
    if MODEL_ADAPTERS.get(adapter.name) != adapter:
        register_model(adapter)
    return adapter.name


def model_adapter(name: str) -> ModelAdapter:
    """The model-ready adapter called `name`; an unknown name lists the valid ones."""
    if name not in MODEL_ADAPTERS:
        raise ValueError(f"adapter {name!r}: unknown; the model-ready adapters are "
                         f"{sorted(MODEL_ADAPTERS)} (load adapters go in label_options=)")
    return MODEL_ADAPTERS[name]


def simlingo_adapter(templates: str, lmdrive: bool = True, commentary: bool = True) -> str:
    """adapter="simlingo" with SimLingo's template files (their data/augmented_templates
    folder): LMDrive command options and commentary rephrasing on, as their experiment config
    has them (simlingo_prompts.py). Returns the name to pass as CARLAWebData(adapter=...),
    registered on first use."""
    from .simlingo import with_templates
    adapter = with_templates(templates, lmdrive, commentary)
    if adapter.name not in MODEL_ADAPTERS:
        register_model(adapter)
    return adapter.name


def keywords() -> dict[str, str]:
    """CARLAWebData's older keyword for each adapter's option -> the adapter's name."""
    return {k.keyword: k.name for k in ADAPTERS.values() if k.keyword}


def adapter_options(adapters: Mapping[str, Any] | None, aliases: Mapping[str, Any]
                    ) -> dict[str, Any]:
    """One {adapter name: option} from `label_options=` and the older keywords (each an alias of
    one adapter's option); a name given both ways, or an unknown name, is refused."""
    given = dict(adapters or {})
    unknown = sorted(set(given) - set(ADAPTERS))
    if unknown:
        raise ValueError(f"label_options {unknown}: unknown; the registered load adapters are "
                         f"{sorted(ADAPTERS)}")
    names = keywords()
    for keyword, value in aliases.items():
        if keyword not in names:
            raise TypeError(f"CARLAWebData() got an unexpected keyword argument {keyword!r}")
        if names[keyword] in given:
            raise ValueError(f"{keyword}= and label_options[{names[keyword]!r}] both set the same "
                             "option; give one")
        given[names[keyword]] = value
    return given


def adapters_for(spec: SampleSpec, options: Mapping[str, Any]) -> tuple[LoadAdapter, ...]:
    """The configured adapters that apply to these shards, in registration order."""
    built = (kind.build(spec, options.get(name)) for name, kind in ADAPTERS.items())
    return tuple(a for a in built if a is not None)


__all__ = ["ADAPTERS", "MODEL_ADAPTERS", "AdapterKind", "Draw", "LoadAdapter", "ModelAdapter",
           "SampleState", "adapter_options", "adapters_for", "garage_adapter", "keywords",
           "model_adapter",
           "register", "register_model", "resolve", "resolve_load_adapters"]
