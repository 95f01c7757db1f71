"""Raw CARLA folder layouts, described by YAML files in configs/layouts/ (no code per layout)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from .schema import CAMERAS

LAYOUT_DIR = Path(__file__).resolve().parent.parent / "configs" / "layouts"
FIELD_NAMES = ("x", "y", "theta", "speed", "target_x", "target_y", "command")


@dataclass(frozen=True)
class Layout:
    name: str
    cameras: dict[str, str]        # schema camera name -> folder inside a route
    fields: dict[str, str]         # our field name -> measurement JSON key
    measurements: str = "measurements"
    image_ext: str = "png"

    @property
    def camera_names(self) -> tuple[str, ...]:
        # Schema order, so a layout's YAML order cannot change the shard bytes.
        return tuple(c for c in CAMERAS if c in self.cameras)


def builtin_layouts() -> list[str]:
    return sorted(p.stem for p in LAYOUT_DIR.glob("*.yaml"))


def load_layout(name_or_path: str | Path) -> Layout:
    """A built-in layout name (`tcp`, `transfuser4`) or a path to a layout YAML file."""
    path = Path(name_or_path)
    if not path.suffix:
        path = LAYOUT_DIR / f"{name_or_path}.yaml"
        if not path.is_file():
            raise ValueError(f"unknown layout {str(name_or_path)!r}; built-in layouts are "
                             f"{builtin_layouts()}, or pass a path to a layout .yaml file")
    if not path.is_file():
        raise FileNotFoundError(f"layout file {path} does not exist")
    data = yaml.safe_load(path.read_text()) or {}
    return _layout_from_dict(data, str(path))


def _layout_from_dict(data: dict, where: str) -> Layout:
    allowed = {"name", "cameras", "fields", "measurements", "image_ext"}
    unknown = set(data) - allowed
    if unknown:
        raise ValueError(f"{where}: unknown keys {sorted(unknown)}; valid keys are {sorted(allowed)}")
    cameras = dict(data.get("cameras") or {})
    bad = [c for c in cameras if c not in CAMERAS]
    if not cameras or bad:
        raise ValueError(f"{where}: cameras {list(cameras)} invalid; map some of {list(CAMERAS)} "
                         "to folder names, e.g. `front: rgb`")
    fields = dict(data.get("fields") or {})
    missing = [f for f in FIELD_NAMES if f not in fields]
    extra = [f for f in fields if f not in FIELD_NAMES]
    if missing or extra:
        raise ValueError(f"{where}: fields must map exactly {list(FIELD_NAMES)} to measurement "
                         f"keys; missing {missing}, unknown {extra}")
    ext = str(data.get("image_ext", "png")).lower()
    if ext not in ("png", "jpg"):
        raise ValueError(f"{where}: image_ext {ext!r}; expected png or jpg")
    return Layout(name=str(data.get("name", Path(where).stem)), cameras=cameras, fields=fields,
                  measurements=str(data.get("measurements", "measurements")), image_ext=ext)
