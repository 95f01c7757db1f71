"""Typed training config: dataclasses loaded from YAML with `key=value` overrides.

Unknown keys are errors that list the valid ones, at any nesting level, so a typo never trains
silently with a default.
"""
from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .model import ModelConfig


@dataclass
class DataConfig:
    train: str = "data/shards/train"        # shard folder, manifest path or URL
    val: str = "data/shards/val"
    batch_size: int = 16                    # per rank
    eval_batch_size: int = 32
    num_workers: int = 1
    persistent_workers: bool = True         # keep workers (and their ring slots) across epochs
    image_size: list[int] = field(default_factory=lambda: [64, 128])   # H, W
    cameras: list[str] | None = None        # default: all cameras in the shards
    augment: bool = False
    per_camera_augment: bool = True
    shuffle_buffer: int = 64
    cache_dir: str | None = None
    frame_dt: float = 0.5                   # seconds between frames (2 Hz in TCP/TransFuser)


@dataclass
class OptimConfig:
    lr: float = 1e-3
    weight_decay: float = 0.01
    warmup_steps: int = 20
    schedule: str = "cosine"                # "cosine" | "step"
    step_every: int = 1000                  # for "step": steps between decays
    gamma: float = 0.5
    min_lr_ratio: float = 0.05
    grad_clip: float = 10.0                # max grad norm; 1.0 stalled the tiny model for ~300 steps


@dataclass
class TrainConfig:
    run_dir: str = "runs/tiny"
    epochs: int = 4
    max_steps: int = 0                      # stop after this many steps (0: run all epochs)
    seed: int = 0
    eval_every: int = 1                     # epochs
    log_every: int = 10                     # steps
    ckpt_every: int = 0                     # steps; 0 = end of each epoch only
    resume: str = "auto"                    # "auto" (run_dir/checkpoint.pt if present), "none", or a path
    device: str = "auto"                    # "auto" | "cpu" | "cuda"
    bf16: bool = True                       # autocast on CUDA
    channels_last: bool = True
    show_samples: int = 6                   # rows of the final prediction montage
    eval_only: bool = False                 # evaluate the resumed checkpoint, then stop
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)


class ConfigError(ValueError):
    pass


def _coerce(value: Any, tp: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        return _coerce(value, next(a for a in args if a is not type(None)), where)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        return _from_dict(tp, value, where + ".")
    if origin is list:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        (item,) = typing.get_args(tp)
        return [_coerce(v, item, where) for v in value]
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp in (int, float, str, bool) and not (isinstance(value, tp) and
                                               not (tp is int and isinstance(value, bool))):
        raise ConfigError(f"{where}: expected {tp.__name__}, got {value!r}")
    return value


def _from_dict(cls: type, data: dict, prefix: str = "") -> Any:
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = [k for k in data if k not in names]
    if unknown:
        raise ConfigError(f"unknown config key {prefix}{unknown[0]}; valid keys here: "
                          + ", ".join(prefix + n for n in names))
    return cls(**{k: _coerce(v, hints[k], prefix + k) for k, v in data.items()})


def _set_dotted(data: dict, dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    for part in parts[:-1]:
        data = data.setdefault(part, {})
        if not isinstance(data, dict):
            raise ConfigError(f"override {dotted}: {part} is not a section")
    data[parts[-1]] = value


def load_config(path: str | Path | None = None, overrides: list[str] = ()) -> TrainConfig:
    """YAML file (optional) + `a.b=value` overrides (values parsed as YAML) -> TrainConfig."""
    data: dict = {}
    if path is not None:
        if not Path(path).is_file():
            raise ConfigError(f"config file {path} not found; see configs/train/ for examples")
        data = yaml.safe_load(Path(path).read_text()) or {}
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r}: expected key=value, e.g. optim.lr=3e-4")
        key, _, raw = item.partition("=")
        _set_dotted(data, key.strip(), yaml.safe_load(raw))
    return _from_dict(TrainConfig, data)


def config_from_dict(data: dict[str, Any]) -> TrainConfig:
    """A TrainConfig from a plain dict, such as the one stored in a checkpoint."""
    return _from_dict(TrainConfig, data)


def to_dict(cfg: TrainConfig) -> dict[str, Any]:
    return dataclasses.asdict(cfg)
