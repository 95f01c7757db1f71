"""The load adapters' room: dataset- and codebase-specific load transforms, by name.

The loader names none of them: it builds every registered kind against the manifest's spec
and the caller's options (`CARLAWebData(adapters={name: option})`), and each kind decides
whether it applies (base.AdapterKind). A new adapter is one module here plus one `register`
call below (or from the caller's own code, before the loader is built).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...schema import SampleSpec
from .base import AdapterKind, Draw, LoadAdapter, SampleState
from .garage import CameraTwinKind
from .tcp import BrakeOverrideKind

ADAPTERS: dict[str, AdapterKind] = {}


def register(kind: AdapterKind) -> AdapterKind:
    """Add an adapter kind under its name (a name already taken is refused)."""
    if kind.name in ADAPTERS:
        raise ValueError(f"load adapter {kind.name!r} is registered already")
    ADAPTERS[kind.name] = kind
    return kind


for _kind in (BrakeOverrideKind(), CameraTwinKind()):
    register(_kind)


def keywords() -> dict[str, str]:
    """CARLAWebData's older keyword for each adapter's option -> the adapter's name."""
    return {k.keyword: k.name for k in ADAPTERS.values() if k.keyword}


def adapter_options(adapters: Mapping[str, Any] | None, aliases: Mapping[str, Any]
                    ) -> dict[str, Any]:
    """One {adapter name: option} from `adapters=` and the older keywords (each an alias of
    one adapter's option); a name given both ways, or an unknown name, is refused."""
    given = dict(adapters or {})
    unknown = sorted(set(given) - set(ADAPTERS))
    if unknown:
        raise ValueError(f"adapters {unknown}: unknown; the registered load adapters are "
                         f"{sorted(ADAPTERS)}")
    names = keywords()
    for keyword, value in aliases.items():
        if keyword not in names:
            raise TypeError(f"CARLAWebData() got an unexpected keyword argument {keyword!r}")
        if names[keyword] in given:
            raise ValueError(f"{keyword}= and adapters[{names[keyword]!r}] both set the same "
                             "option; give one")
        given[names[keyword]] = value
    return given


def adapters_for(spec: SampleSpec, options: Mapping[str, Any]) -> tuple[LoadAdapter, ...]:
    """The configured adapters that apply to these shards, in registration order."""
    built = (kind.build(spec, options.get(name)) for name, kind in ADAPTERS.items())
    return tuple(a for a in built if a is not None)


__all__ = ["ADAPTERS", "AdapterKind", "Draw", "LoadAdapter", "SampleState", "adapter_options",
           "adapters_for", "keywords", "register"]
