"""The interface every load adapter follows, with no dataset in it.

A load adapter is a dataset's or a codebase's own change to what the loader serves (TCP's brake
override, carla_garage's camera twin, next the model-ready adapters). Its *kind* is registered
under a name (load/adapters/__init__.py) and decides from the manifest's spec, and the caller's
option for it, whether it applies; the configured adapter it builds is a small frozen object
that travels to the DataLoader workers (pickled) and is called on each sample at three points:

1. `before_decode(raw, draw)`: the raw members, before anything decodes (may swap members);
2. `on_record(values)`: the measurements record's values, once decoded;
3. `after_labels(labels, state)`: the sample's labels and selected fields, once decoded.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from ...schema import SampleSpec

Raw = dict[str, Any]


@dataclass(frozen=True)
class Draw:
    """What an adapter's random choices are a function of: (seed, epoch, sample key); `train`
    is False in eval passes, which never draw."""
    seed: int = 0
    epoch: int = 0
    train: bool = True


@dataclass
class SampleState:
    """What the adapters decided for one sample, from before_decode to after_labels.

    `twin`: the sample's members are its twin set's (the manifest's Extra.twin_of), so record
    fields computed for the twin (MeasField.twin_of) take their fields' places."""
    twin: bool = False
    values: dict[str, Any] = field(default_factory=dict)   # adapter-private, by adapter name


class LoadAdapter:
    """A configured adapter; every hook defaults to leaving the sample as it is."""
    name: str = ""

    def before_decode(self, raw: Raw, draw: Draw, state: SampleState) -> Raw:
        return raw

    def on_record(self, values: dict[str, Any]) -> dict[str, Any]:
        return values

    def after_labels(self, labels: dict[str, Any], state: SampleState) -> None:
        return None


class AdapterKind(Protocol):
    """A registered adapter: `name` (the registry's key, and the manifest's word for it where
    the manifest names it), `keyword` (CARLAWebData's older keyword for its option, kept as an
    alias; "" for none) and `build`: the configured adapter for these shards and the caller's
    option (None: the manifest's choice), or None where it does not apply. Bad options raise
    ValueError naming the option and what is expected."""
    name: str
    keyword: str

    def build(self, spec: SampleSpec, option: Any) -> LoadAdapter | None: ...
