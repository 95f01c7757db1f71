"""Typed training config: dataclasses loaded from YAML with `key=value` overrides.

Unknown keys are errors that list the valid ones, at any nesting level, so a typo never trains
silently with a default.

Every value that sizes an allocation has an upper bound here (issue 38 N7), checked by the one
validator (settings.validate) whatever the config came from: a YAML file, `key=value` overrides
or a checkpoint's stored config (`carla-wds show --checkpoint`, which builds a loader and a model
from it). The bounds sit far above real use; each constant below says why it is where it is.
YAML text, from a file or an override, is read with the alias cap of layouts and mix files
(safeyaml.py), and a dict (a checkpoint's) is counted the same way before it is read.
"""
from __future__ import annotations

import dataclasses
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .. import safeyaml
from ..limits import DEFAULT as DEFAULT_LIMITS
from ..suggest import did_you_mean
from .bounds import (MAX_BATCH, MAX_BATCH_PIXELS, MAX_HISTORY, MAX_HISTORY_STRIDE,
                     MAX_IMAGE_SIDE, MAX_SHOW_SAMPLES, MAX_SHUFFLE_BUFFER, MAX_WORKERS)
from .model import ModelConfig
from .settings import ConfigError, as_override, setting, shown, validate

__all__ = ["ConfigError", "DataConfig", "OptimConfig", "TrainConfig", "check_runtime",
           "config_from_dict", "load_config", "to_dict"]


@dataclass
class DataConfig:
    train: str = setting("data/shards/train", nonempty=True, doc="shard folder, manifest or URL")
    val: str = setting("data/shards/val", nonempty=True)
    batch_size: int = setting(16, ge=1, le=MAX_BATCH, doc="per rank")
    eval_batch_size: int = setting(32, ge=1, le=MAX_BATCH, doc="per rank")
    num_workers: int = setting(1, ge=0, le=MAX_WORKERS)
    # keep workers (and their ring slots) across epochs
    persistent_workers: bool = True
    image_size: list[int] = setting(default_factory=lambda: [64, 128], length=2, ge=1,
                                    le=MAX_IMAGE_SIDE, doc="height, width")
    cameras: list[str] | None = setting(None, nonempty=True, unique=True,
                                        doc="null: all cameras in the shards")
    augment: bool = False
    per_camera_augment: bool = True
    shuffle_buffer: int = setting(64, ge=0, le=MAX_SHUFFLE_BUFFER,
                                  doc="samples; 0 or 1: no buffer shuffle")
    cache_dir: str | None = None
    cache_limit_bytes: int | None = setting(None, ge=1, doc="bytes the cache_dir may hold, "
                                            "least recently used shards evicted; null: no bound")
    frame_dt: float = setting(0.5, gt=0, doc="seconds between frames (0.5: 2 Hz)")
    # issue 27: the model sees each sample's K earlier frames of its route (load/stream/history.py)
    history: int = setting(0, ge=0, le=MAX_HISTORY,
                           doc="earlier frames per sample; 0: the frame alone")
    history_stride: int = setting(1, ge=1, le=MAX_HISTORY_STRIDE,
                                  doc="samples between two frames of a window")
    # issue 29: train on a mix of packs (a YAML mix spec, load/plan/mix.py) instead of data.train
    mix: str | None = setting(None, nonempty=True, doc="a mix spec YAML; null: data.train")
    # issue 40: validate on a mix (every sample of its packs once), e.g. one val pack per
    # layout of a mix of layouts, served in the train mix's common view (docs/mixing.md)
    val_mix: str | None = setting(None, nonempty=True, doc="a mix spec YAML; null: data.val")
    verify: bool = False                    # check each shard's sha256 against the manifest
    on_error: str = setting("raise", choices=("raise", "skip"),
                            doc="skip: a bad sample becomes valid=False padding, counted")
    read_timeout: float = setting(30.0, gt=0, doc="seconds an http(s) read may wait for bytes")
    retries: int = setting(3, ge=0, doc="further attempts per remote object after a failure")
    limits: list[str] = setting(default_factory=list, unique=True, doc="NAME=N bounds on what "
                                "one file may make a decoder allocate (README, 'Security model')")

    def cross_checks(self) -> list[tuple[str, str]]:
        try:
            DEFAULT_LIMITS.with_overrides(self.limits)
        except ValueError as exc:
            return [("limits", f"{exc}. Fix: e.g. data.limits=[lidar_points=8e6]")]
        height, width = self.image_size
        batch = max(self.batch_size, self.eval_batch_size)
        pixels = batch * (self.history + 1) * height * width
        if pixels > MAX_BATCH_PIXELS:
            return [("image_size", f"data.image_size={as_override(self.image_size)} with "
                     f"batches of {batch} (data.batch_size, data.eval_batch_size) and "
                     f"data.history={self.history} is {pixels:.3g} pixels a camera a batch "
                     "(batch x (history + 1) x height x width); expected at most 2^31 "
                     f"({MAX_BATCH_PIXELS:,}). Fix: a smaller data.image_size, batch size "
                     "or data.history")]
        return []


@dataclass
class OptimConfig:
    lr: float = setting(1e-3, gt=0)
    weight_decay: float = setting(0.01, ge=0)
    warmup_steps: int = setting(20, ge=0)
    schedule: str = setting("cosine", choices=("cosine", "step"))
    step_every: int = setting(1000, ge=1, doc="for schedule=step: steps between decays")
    gamma: float = setting(0.5, gt=0, le=1)
    min_lr_ratio: float = setting(0.05, ge=0, le=1)
    # max grad norm; 1.0 stalled the tiny model for ~300 steps
    grad_clip: float = setting(10.0, gt=0)


@dataclass
class TrainConfig:
    run_dir: str = setting("runs/tiny", nonempty=True)
    epochs: int = setting(4, ge=1)
    max_steps: int = setting(0, ge=0, doc="stop after this many steps; 0: run all epochs")
    seed: int = setting(0, ge=0)
    eval_every: int = setting(1, ge=1, doc="epochs; the last epoch is always evaluated")
    log_every: int = setting(10, ge=1, doc="steps between metrics lines")
    ckpt_every: int = setting(0, ge=0, doc="steps; 0: at the end of each epoch only")
    resume: str = setting("auto", choices=("auto", "none"), or_path=True,
                          doc="auto: run_dir/checkpoint.pt if present")
    device: str = setting("auto", choices=("auto", "cpu", "cuda"),
                          doc="cuda: GPU LOCAL_RANK, and an error without CUDA")
    bf16: bool = True                       # autocast on CUDA
    channels_last: bool = True
    show_samples: int = setting(6, ge=1, le=MAX_SHOW_SAMPLES,
                                doc="rows of the final prediction montage")
    eval_only: bool = False                 # evaluate the resumed checkpoint, then stop
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)

    def cross_checks(self) -> list[tuple[str, str]]:
        if self.eval_only and self.resume == "none":
            return [("eval_only", "eval_only=true with resume=none has nothing to evaluate. "
                     "Fix: resume=auto (run_dir/checkpoint.pt) or resume=PATH")]
        return []




# numbers with an exponent but no dot, which YAML 1.1 leaves as strings (YAML 1.2 reads them)
_YAML11_MISSED = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")
_TYPE_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}


def _coerce(value: Any, tp: Any, where: str, f: dataclasses.Field) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        return _coerce(value, next(a for a in args if a is not type(None)), where, f)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping of its keys, got {shown(value)}. Fix: "
                              f"write {where}.KEY=VALUE, or a {where}: section in the YAML")
        return _from_dict(tp, value, where + ".")
    wrong = None
    if origin is list:
        if not isinstance(value, (list, tuple)):
            wrong = "a list"
        else:
            (item,) = typing.get_args(tp)
            return [_coerce(v, item, where, f) for v in value]
    elif tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    elif tp is float and isinstance(value, str) and _YAML11_MISSED.fullmatch(value.strip()):
        return float(value)   # PyYAML (YAML 1.1) reads 3e-4 and 1E5 as strings
    elif tp in _TYPE_NAMES and not (isinstance(value, tp) and
                                    not (tp is int and isinstance(value, bool))):
        wrong = _TYPE_NAMES[tp]
    if wrong:
        raise ConfigError(f"{where}: expected {wrong}, got {shown(value)!r}. "
                          f"Fix: e.g. {where}={_example(f)}")
    return value


def _example(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        return as_override(f.default)
    return as_override(f.default_factory()) if f.default_factory is not dataclasses.MISSING \
        else "VALUE"


def _from_dict(cls: type, data: Any, prefix: str = "") -> Any:
    if not isinstance(data, dict):
        raise ConfigError(f"config {prefix.rstrip('.') or 'file'}: expected a mapping of keys, "
                          f"got {shown(data)}. Fix: write key: value lines, as in "
                          f"{CONFIG_DIR}/tiny.yaml")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = [k for k in data if k not in fields]
    if unknown:
        raise ConfigError(f"unknown config key {prefix}{unknown[0]}; valid keys here: "
                          + ", ".join(prefix + n for n in fields))
    return cls(**{k: _coerce(v, hints[k], prefix + k, fields[k])
                  for k, v in data.items()})


def _set_dotted(data: dict, dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    for part in parts[:-1]:
        data = data.setdefault(part, {})
        if not isinstance(data, dict):
            raise ConfigError(f"override {dotted}: {part} is not a section")
    data[parts[-1]] = value


_EXPECTED = "a training config, which needs under a hundred"


def _yaml(text: str | Path, where: str) -> Any:
    """A YAML value (text, or a file's path) with the alias cap of layouts and mix files
    (safeyaml.py): a few KB of aliases of aliases stand for 10^9 values otherwise."""
    try:
        if isinstance(text, Path):
            return safeyaml.read_yaml(text, "training config", _EXPECTED)
        return safeyaml.load_bounded(text, where, expected=_EXPECTED)
    except yaml.YAMLError as exc:
        detail = " ".join(str(exc).split())
        raise ConfigError(f"{where}: not valid YAML ({detail}). Fix: quote or correct "
                          "the value, e.g. data.image_size=[64,128]") from None
    except ValueError as exc:   # safeyaml's bounds: over the alias cap, too deep, too big
        raise ConfigError(str(exc)) from None


def _count_values(value: Any, sizes: dict[int, int], open_: set[int], where: str) -> int:
    """Values in a plain dict with shared references expanded, as safeyaml counts YAML nodes:
    a checkpoint's config comes from a pickle, whose memo shares objects as aliases do."""
    if not isinstance(value, (dict, list, tuple)):
        return 1
    key = id(value)
    if key in sizes:
        return sizes[key]
    if key in open_:
        raise ConfigError(f"{where}: a list or mapping inside itself; expected plain data")
    open_.add(key)
    total = 1
    for child in ([*value.keys(), *value.values()] if isinstance(value, dict) else value):
        total += _count_values(child, sizes, open_, where)
        if total > safeyaml.MAX_NODES:
            raise ConfigError(f"{where}: over {safeyaml.MAX_NODES:,} values with its shared "
                              f"references expanded; expected {_EXPECTED}. Fix: write the "
                              "config out as carla-wds train does")
    open_.discard(key)
    sizes[key] = total
    return total


CONFIG_DIR = Path(__file__).resolve().parent / "configs"


def shipped_configs() -> list[str]:
    return sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))


def config_path(name_or_path: str | Path) -> Path:
    """A shipped config's name (`tiny`, `tcp`) or a path to a YAML file."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    if not path.suffix and len(path.parts) == 1 and (CONFIG_DIR / f"{path}.yaml").is_file():
        return CONFIG_DIR / f"{path}.yaml"
    hint = did_you_mean(str(name_or_path), shipped_configs())
    raise ConfigError(f"config {str(name_or_path)!r} not found{hint}: neither a file nor a "
                      f"shipped config ({', '.join(shipped_configs())}). Fix: pass one of those names, "
                      f"or a path to a YAML file like {CONFIG_DIR / 'tiny.yaml'}")


def load_config(path: str | Path | None = None, overrides: list[str] = ()) -> TrainConfig:
    """YAML file (optional) + `a.b=value` overrides (values parsed as YAML) -> TrainConfig.

    Every value is checked against its field's rule here, before anything runs.
    """
    data: dict = {}
    if path is not None:
        path = config_path(path)
        data = _yaml(path, f"config file {path}") or {}
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r}: expected key=value, e.g. optim.lr=3e-4")
        key, _, raw = item.partition("=")
        _set_dotted(data, key.strip(), _yaml(raw, f"override {item!r}"))
    return config_from_dict(data)


def config_from_dict(data: dict[str, Any], where: str = "config") -> TrainConfig:
    """A checked TrainConfig from a plain dict, such as the one stored in a checkpoint: its
    size is counted before it is read (no error message or walk expands a shared reference)."""
    try:
        _count_values(data, {}, set(), where)
    except RecursionError:
        raise ConfigError(f"{where}: nested too deeply; expected {_EXPECTED}") from None
    cfg = _from_dict(TrainConfig, data)
    validate(cfg)
    return cfg


def check_runtime(cfg: TrainConfig) -> None:
    """What the values cannot tell alone, checked on this machine before a run starts: the
    config's rules, that device=cuda has a GPU (never a silent CPU run), that resume=PATH
    exists."""
    import os

    import torch
    validate(cfg)
    if cfg.device == "cuda":
        local_rank, count = int(os.environ.get("LOCAL_RANK", 0)), torch.cuda.device_count()
        if not torch.cuda.is_available() or local_rank >= count:
            raise ConfigError(
                f"device=cuda, but this process (LOCAL_RANK {local_rank}) has no CUDA device: "
                f"{count} visible, torch {torch.__version__} built for CUDA {torch.version.cuda}. "
                "Fix: device=cpu, or device=auto (CUDA when present), or run on a GPU machine "
                "with at most one process per GPU")
    if cfg.resume not in ("auto", "none") and not Path(cfg.resume).is_file():
        raise ConfigError(f"resume={cfg.resume}: no such checkpoint file. Fix: "
                          "resume=PATH to an existing checkpoint.pt, resume=auto (run_dir's "
                          "checkpoint if present) or resume=none")


def to_dict(cfg: TrainConfig) -> dict[str, Any]:
    return dataclasses.asdict(cfg)
