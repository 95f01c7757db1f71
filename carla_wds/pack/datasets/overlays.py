"""The overlay kinds `carla-wds pack-overlay --kind` knows, each from the room of the dataset
it annotates (routes/overlays.py: the carla_garage family's; bench2drive/overlays.py)."""
from __future__ import annotations

from ...suggest import did_you_mean
from ..errors import PackError
from ..overlay_kinds import OverlayKind
from .bench2drive.overlays import KINDS as _B2D
from .routes.overlays import KINDS as _ROUTES

_KINDS: dict[str, OverlayKind] = {**_ROUTES, **_B2D}


def overlay_kinds() -> list[str]:
    return sorted(_KINDS)


def overlay_kind(name: str) -> OverlayKind:
    """The kind of that name; a PackError naming the known ones otherwise."""
    if name not in _KINDS:
        raise PackError(f"--kind {name}: unknown overlay kind{did_you_mean(name, _KINDS)}; "
                        f"known kinds are {overlay_kinds()}")
    return _KINDS[name]
