"""Run under torchrun: a short Lightning DDP fit on CARLADataModule; each rank reports counts.

    torchrun --standalone --nproc_per_node 2 tests/scripts/lightning_fit.py SHARDS OUT_DIR
"""
import json
import sys
from pathlib import Path

import pytorch_lightning as pl
import torch

from carla_wds.lightning import CARLADataModule

shards, out = sys.argv[1], Path(sys.argv[2])


def children() -> list[int]:
    pids = []
    for task in Path("/proc/self/task").iterdir():
        try:
            pids += [int(p) for p in (task / "children").read_text().split()]
        except FileNotFoundError:
            pass
    return pids


class Tiny(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.head = torch.nn.Linear(3, 8)
        self.train_keys, self.val_batches, self.first_step_children = [], 0, []

    def forward(self, batch):
        feats = batch.normalized_images().mean(dim=(1, 3, 4))
        return self.head(feats).view(-1, 4, 2)

    def training_step(self, batch, batch_idx):
        self.train_keys.append(batch.keys)
        if batch_idx == 0:   # the worker processes alive as each epoch starts
            self.first_step_children.append(sorted(children()))
        return (self(batch) - batch.waypoints).abs().mean()

    def on_validation_epoch_start(self):
        self.val_keys = []

    def validation_step(self, batch, _):
        self.val_batches += 1
        self.val_keys += [k for k, v in zip(batch.keys, batch.valid.tolist()) if v]

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


model = Tiny()
dm = CARLADataModule(shards, shards, batch_size=3, num_workers=1, image_size=(16, 24),
                     persistent_workers=True)
trainer = pl.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_epochs=2,
                     logger=False, enable_checkpointing=False, enable_model_summary=False)
trainer.fit(model, dm)
(out / f"rank{trainer.global_rank}.json").write_text(json.dumps({
    "num_training_batches": trainer.num_training_batches, "len": len(dm._train),
    "train_keys": model.train_keys, "val_batches": model.val_batches,
    "num_val_batches": trainer.num_val_batches, "last_val_keys": model.val_keys,
    "first_step_children": model.first_step_children}))
