"""PyTorch Lightning integration (optional extra: `pip install carla-wds[lightning]`).

The loaders handed to Lightning have an exact `len()`, so its progress bar shows a total under
DDP (the seed's complaint). They are not torch DataLoaders, so Lightning injects no
DistributedSampler: sharding across ranks is CARLAWebData's own, exact plan.

Lightning ships as two packages, `pytorch_lightning` and `lightning` (`lightning.pytorch`),
whose Trainers each accept only their own LightningDataModule: a pytorch_lightning datamodule
given to `lightning.Trainer` is not set up (its loaders were None: "TypeError: 'NoneType'
object is not iterable"). CARLADataModule derives from every one installed, so either
Trainer takes it as its own.
"""
from __future__ import annotations

import importlib
from typing import Any, Iterator

from .load import CARLABatch, CARLAWebData


def _datamodule_bases() -> tuple[type, ...]:
    """LightningDataModule of each Lightning package installed (`lightning` first)."""
    bases = []
    for name in ("lightning.pytorch", "pytorch_lightning"):
        try:
            bases.append(importlib.import_module(name).LightningDataModule)
        except ImportError:
            continue
    if not bases:
        raise ImportError("carla_wds.lightning needs Lightning. Fix: pip install "
                          "'carla-wds[lightning]' (pytorch-lightning) or pip install lightning")
    return tuple(bases)


_BASES = _datamodule_bases()


class _FollowEpoch:
    """Sized iterable that selects the trainer's current epoch before each pass."""

    def __init__(self, data: CARLAWebData, module: "CARLADataModule") -> None:
        self.data, self.module = data, module

    def __len__(self) -> int:
        return len(self.data)

    def __iter__(self) -> Iterator[CARLABatch | dict[str, Any]]:
        trainer = self.module.trainer
        if trainer is not None:
            self.data.set_epoch(trainer.current_epoch, global_step=trainer.global_step)
        return iter(self.data)


class CARLADataModule(*_BASES):
    """Train/val CARLAWebData for Lightning; rank and world size come from the trainer.
    `adapter=NAME` (and any other CARLAWebData keyword) goes to both loaders: train and val
    batches are then the same dicts, which transfer_batch_to_device moves as Lightning does."""

    def __init__(self, train: str, val: str | None = None, *, batch_size: int,
                 eval_batch_size: int | None = None, **loader_kwargs: Any) -> None:
        super().__init__()
        self.train_source, self.val_source = train, val
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size or batch_size
        self.loader_kwargs = loader_kwargs
        self._train = self._val = None

    def _rank_world(self) -> dict[str, int]:
        trainer = self.trainer
        if trainer is None:
            return {}
        return {"rank": trainer.global_rank, "world_size": trainer.world_size}

    def setup(self, stage: str | None = None) -> None:
        kw = {**self.loader_kwargs, **self._rank_world()}
        self._train = CARLAWebData(self.train_source, batch_size=self.batch_size, mode="train",
                                   **kw)
        if self.val_source:
            eval_kw = {k: v for k, v in kw.items() if k not in ("augment", "shuffle_buffer")}
            self._val = CARLAWebData(self.val_source, batch_size=self.eval_batch_size,
                                     mode="eval", **eval_kw)

    def train_dataloader(self) -> _FollowEpoch:
        if self._train is None:   # a Trainer that did not call setup
            self.setup("fit")
        return _FollowEpoch(self._train, self)

    def val_dataloader(self) -> _FollowEpoch | list:
        if self._train is None:
            self.setup("validate")
        return _FollowEpoch(self._val, self) if self._val is not None else []

    def transfer_batch_to_device(self, batch: Any, device, dataloader_idx: int) -> Any:
        if isinstance(batch, CARLABatch):
            return batch.to(device)
        # an adapter's dict (tensors, lists of tensors, lists of str): Lightning's own move
        return super().transfer_batch_to_device(batch, device, dataloader_idx)
