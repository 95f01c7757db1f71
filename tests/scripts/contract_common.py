"""Shared by the contract scripts run under torchrun (imported flat: torchrun puts this folder
on sys.path): the plain-DDP train-then-eval run of garage_contract_train.py and
tf2022_contract_train.py, and the Lightning steps and fit of tcp_contract_fit.py and
b2d_tcp_contract_fit.py. Each script keeps its own model, contract check and losses (written
from its project's train.py); what it hands here is the same for all of them."""
import json
import math
from pathlib import Path
from typing import Callable

import torch
import torch.distributed as tdist
from torch import nn

from carla_wds import CARLAWebData


def ddp_train_eval(shards: str, out: Path, adapter: str, make_model: Callable[[], nn.Module],
                   contract: Callable[[dict], bool], loss_of: Callable, val_batch_size: int
                   ) -> None:
    """A gloo process group; make_model() in DDP (seed 0), Adam 1e-3, one training pass on
    CARLAWebData(adapter) at batch 2, then an eval pass at val_batch_size without gradients
    whose loss must stay finite (padding rows); every batch's contract(d) is recorded.
    Writes out/rank{rank}.json: contract, train_losses, val_keys (valid rows), val_batches."""
    tdist.init_process_group("gloo")
    rank = tdist.get_rank()
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(make_model())
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    report = {"contract": [], "train_losses": [], "val_keys": [], "val_batches": 0}
    for d in CARLAWebData(shards, batch_size=2, num_workers=1, adapter=adapter):
        report["contract"].append(contract(d))
        loss = loss_of(model, d)
        opt.zero_grad()
        loss.backward()
        opt.step()
        report["train_losses"].append(float(loss))
    with torch.no_grad():
        for d in CARLAWebData(shards, batch_size=val_batch_size, mode="eval", num_workers=1,
                              adapter=adapter):
            report["contract"].append(contract(d))
            report["val_batches"] += 1
            report["val_keys"] += [k for k, ok in zip(d["key"], d["valid"].tolist()) if ok]
            if not math.isfinite(float(loss_of(model.module, d))):
                raise SystemExit("padding rows broke the loss")
    (out / f"rank{rank}.json").write_text(json.dumps(report))
    tdist.barrier()   # leave together (see carla_wds.dist.cleanup)
    tdist.destroy_process_group()


class ContractSteps:
    """The Lightning steps of a TCP-style contract model (mixed in before LightningModule):
    training checks the contract, records the keys and returns _loss over PRED_LEN future
    steps; validation records the valid rows' keys and adds their per-row action L1 (the
    prediction named ROW_ACTION, column 0, against batch["action"][i][0]) to _loss over
    PRED_LEN - 1 steps, as TCP/train.py's validation_step. The subclass sets PRED_LEN and
    ROW_ACTION, calls _tiny in __init__, and defines _check, _loss and forward (on _head)."""
    PRED_LEN: int
    ROW_ACTION: str

    def _tiny(self, outputs: int) -> None:
        """The model: a strided conv encoder of front_img and a linear head over it and the
        9-number state, into `outputs` numbers; the records the steps keep."""
        self.enc = nn.Sequential(nn.Conv2d(3, 4, 16, stride=16), nn.AdaptiveAvgPool2d(1),
                                 nn.Flatten())
        self.head = nn.Linear(4 + 9, outputs)
        self.train_keys, self.val_keys, self.val_batches, self.contract = [], [], 0, []

    def _head(self, batch) -> torch.Tensor:
        """The head's outputs: the state as TCP reads it, speed as float32 / 12, then
        cat(speed, target_point, target_command)."""
        speed = batch["speed"].to(dtype=torch.float32).view(-1, 1) / 12.
        target_point = batch["target_point"].to(dtype=torch.float32)
        state = torch.cat([speed, target_point, batch["target_command"]], 1)
        return self.head(torch.cat([self.enc(batch["front_img"]), state], 1))

    def training_step(self, batch, batch_idx):
        self._check(batch)
        self.train_keys.append(batch["key"])
        return self._loss(batch, self(batch), self.PRED_LEN)

    def on_validation_epoch_start(self):
        self.val_keys, self.val_losses = [], []

    def validation_step(self, batch, batch_idx):
        self._check(batch)
        self.val_batches += 1
        self.val_keys += [k for k, v in zip(batch["key"], batch["valid"].tolist()) if v]
        pred = self(batch)
        loss = self._loss(batch, pred, self.PRED_LEN - 1)
        row = pred[self.ROW_ACTION]
        for i in range(row.shape[0]):   # their per-row action L1
            loss = loss + torch.abs(row[i][0] - batch["action"][i][0])
        assert torch.isfinite(loss), "validation loss not finite (padding rows?)"
        self.val_losses.append(float(loss))

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-4)


def lightning_fit(pl, model, train: str, val: str, out: Path, adapter: str,
                  eval_batch_size: int, extra: Callable[[object], dict]) -> None:
    """model fitted one epoch by a 2-rank CPU DDP Trainer (pl: pytorch_lightning or
    lightning.pytorch) on CARLADataModule(train, val, adapter, batch 2); writes
    out/rank{rank}.json: the train length, keys seen, val batches, contract and val losses,
    plus extra(model)'s entries."""
    from carla_wds.lightning import CARLADataModule
    dm = CARLADataModule(train, val, batch_size=2, eval_batch_size=eval_batch_size,
                         adapter=adapter, num_workers=1)
    trainer = pl.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_epochs=1,
                         logger=False, enable_checkpointing=False, enable_model_summary=False,
                         enable_progress_bar=False, num_sanity_val_steps=0)
    trainer.fit(model, dm)
    (out / f"rank{trainer.global_rank}.json").write_text(json.dumps({
        "len": len(dm._train), "train_keys": model.train_keys, "val_keys": model.val_keys,
        "val_batches": model.val_batches, "contract": model.contract,
        "val_losses": model.val_losses, **extra(model)}))
