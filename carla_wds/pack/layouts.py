"""Raw CARLA folder layouts, described by YAML files (no code per layout); the built-in ones
ship inside the package, in carla_wds/pack/layouts/."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from ..schema import CAMERAS

LAYOUT_DIR = Path(__file__).resolve().parent / "layouts"
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
    """A built-in layout name (`tcp`, `transfuser4`) or a path to a layout YAML file.

    Every problem with the file is a one-line ValueError naming the file, what was expected
    and the fix."""
    path = Path(name_or_path)
    if not path.suffix:
        path = LAYOUT_DIR / f"{name_or_path}.yaml"
        if not path.is_file():
            raise ValueError(f"unknown layout {str(name_or_path)!r}; built-in layouts are "
                             f"{builtin_layouts()}, or pass a path to a layout .yaml file")
    if not path.is_file():
        raise FileNotFoundError(f"layout file {path} does not exist")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise ValueError(f"{path}: not valid YAML ({problem}{at}); expected a mapping like "
                         f"{LAYOUT_DIR / 'tcp.yaml'}. {FIX}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not a text file; expected a YAML mapping. {FIX}") from None
    return _layout_from_dict({} if data is None else data, str(path))


FIX = f"Fix: copy a file from {LAYOUT_DIR} and edit it"
ALLOWED = ("name", "cameras", "fields", "measurements", "image_ext")


def _mapping(value: object, where: str, key: str, example: str) -> dict[str, str]:
    """A YAML mapping of names to plain names (folder or JSON key), else a one-line error."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"{where}: {key} is a {type(value).__name__}; expected a mapping "
                         f"such as `{example}`. {FIX}")
    bad = {k: v for k, v in value.items() if not isinstance(k, str)
           or not isinstance(v, (str, int)) or isinstance(v, bool)}
    if bad:
        raise ValueError(f"{where}: {key} maps {bad}; expected names to names such as "
                         f"`{example}`. {FIX}")
    return {k: str(v) for k, v in value.items()}


def _layout_from_dict(data: object, where: str) -> Layout:
    if not isinstance(data, dict):
        raise ValueError(f"{where}: the file holds a {type(data).__name__}, expected a mapping "
                         f"with keys {list(ALLOWED)}. {FIX}")
    unknown = [k for k in data if k not in ALLOWED]
    if unknown:
        raise ValueError(f"{where}: unknown keys {sorted(map(str, unknown))}; valid keys are "
                         f"{sorted(ALLOWED)}. {FIX}")
    cameras = _mapping(data.get("cameras"), where, "cameras", "front: rgb")
    bad = [c for c in cameras if c not in CAMERAS]
    if not cameras or bad:
        raise ValueError(f"{where}: cameras {list(cameras)} invalid; map some of {list(CAMERAS)} "
                         f"to folder names, e.g. `front: rgb`. {FIX}")
    fields = _mapping(data.get("fields"), where, "fields", "x: x")
    missing = [f for f in FIELD_NAMES if f not in fields]
    extra = [f for f in fields if f not in FIELD_NAMES]
    if missing or extra:
        raise ValueError(f"{where}: fields must map exactly {list(FIELD_NAMES)} to measurement "
                         f"keys; missing {missing}, unknown {extra}. {FIX}")
    for key in ("name", "measurements", "image_ext"):
        if key in data and not isinstance(data[key], str):
            raise ValueError(f"{where}: {key} is {data[key]!r}; expected a plain string. {FIX}")
    ext = data.get("image_ext", "png").lower()
    if ext not in ("png", "jpg"):
        raise ValueError(f"{where}: image_ext {ext!r}; expected png or jpg. {FIX}")
    return Layout(name=data.get("name", Path(where).stem), cameras=cameras, fields=fields,
                  measurements=data.get("measurements", "measurements"), image_ext=ext)
