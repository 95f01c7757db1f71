"""Run under torchrun: a small model with TCP's batch contract, trained and validated by a
Lightning DDP fit on CARLADataModule(adapter="tcp"); each rank reports what it saw.

    torchrun --standalone --nproc_per_node 2 tests/scripts/tcp_contract_fit.py TRAIN VAL OUT [pkg]

The steps read the batch as TCP's TCP/train.py (73cc1dd) training_step and validation_step
do (written here from them, not copied): speed as float32 / 12, the state
cat(speed, target_point, target_command), Beta KL on action_mu/sigma and on each of the
pred_len future steps `batch["future_action_mu"][i]`, MSE on feature, value and each
future_feature[i], L1 on the float64 waypoints, and in validation the per-row action L1
`batch["action"][i][k]`. pkg: "pytorch_lightning" (default) or "lightning".
"""
import importlib
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.distributions import Beta, kl_divergence

from contract_common import ContractSteps, lightning_fit

train, val, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
pl = importlib.import_module("lightning.pytorch" if sys.argv[4:] == ["lightning"]
                             else "pytorch_lightning")
PRED_LEN = 4
LISTS = ("future_action_mu", "future_action_sigma", "future_feature")


class TinyTCP(ContractSteps, pl.LightningModule):
    PRED_LEN, ROW_ACTION = PRED_LEN, "mu"   # the steps (contract_common): pred["mu"][i][0]

    def __init__(self):
        super().__init__()
        self._tiny(2 + 2 + 8 + 1 + 1 + 256 + PRED_LEN * (4 + 256))

    def forward(self, batch):
        h = self._head(batch)
        beta = lambda t: F.softplus(t) + 1.0   # noqa: E731 - Beta's parameters > 1
        mu, sigma, wp, spd, val, feat, fut = h.split(
            [2, 2, 8, 1, 1, 256, PRED_LEN * (4 + 256)], 1)
        fut = fut.view(-1, PRED_LEN, 4 + 256)
        return {"mu": beta(mu), "sigma": beta(sigma), "wp": wp.view(-1, 4, 2), "speed": spd,
                "value": val, "feature": feat, "future_mu": [beta(fut[:, i, :2]) for i in
                                                            range(PRED_LEN)],
                "future_sigma": [beta(fut[:, i, 2:4]) for i in range(PRED_LEN)],
                "future_feature": [fut[:, i, 4:] for i in range(PRED_LEN)]}

    def _check(self, batch):
        """TCP's contract: its keys, dtypes and shapes; future_* lists of pred_len tensors."""
        b = batch["front_img"].shape[0]
        ok = (batch["front_img"].shape[1:] == (3, 256, 900)
              and batch["waypoints"].dtype == torch.float64
              and batch["speed"].dtype == torch.float64
              and batch["target_command"].dtype == torch.int64
              and all(isinstance(batch[k], list) and len(batch[k]) == PRED_LEN
                      and batch[k][0].shape[0] == b for k in LISTS)
              and batch["valid"].dtype == torch.bool)
        self.contract.append(bool(ok))

    def _loss(self, batch, pred, steps):
        kl = kl_divergence(Beta(batch["action_mu"], batch["action_sigma"]),
                           Beta(pred["mu"], pred["sigma"]))
        loss = kl[:, 0].mean() * 0.5 + kl[:, 1].mean() * 0.5
        loss = loss + F.mse_loss(pred["value"], batch["value"].view(-1, 1))
        loss = loss + F.mse_loss(pred["feature"], batch["feature"])
        loss = loss + F.l1_loss(pred["wp"], batch["waypoints"], reduction="none").mean()
        for i in range(steps):
            kl = kl_divergence(Beta(batch["future_action_mu"][i], batch["future_action_sigma"][i]),
                               Beta(pred["future_mu"][i], pred["future_sigma"][i]))
            loss = loss + kl[:, 0].mean() * 0.5 + kl[:, 1].mean() * 0.5
            loss = loss + F.mse_loss(pred["future_feature"][i], batch["future_feature"][i])
        return loss


lightning_fit(pl, TinyTCP(), train, val, out, "tcp", eval_batch_size=5, extra=lambda m: {})
