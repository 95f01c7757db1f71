"""Run under torchrun: a small model with the Bench2Drive TCP port's batch contract, trained and
validated by a Lightning DDP fit on CARLADataModule(adapter="b2d_tcp"); each rank reports what
it saw.

    torchrun --standalone --nproc_per_node 2 tests/scripts/b2d_tcp_contract_fit.py TRAIN VAL OUT

The steps read the batch as the port's TCP/train.py (Bench2DriveZoo@31278ff, tcp/admlp)
training_step and validation_step do (written here from them, not copied): speed as float32
/ 12, the state cat(speed, target_point, target_command), NLL on action_index and on each of
the pred_len `batch["future_action_index"][i]`, MSE on value.view(-1, 1), feature and each
future_feature[i], L1 on the float64 waypoints; validation: the future loop over pred_len - 1
and the per-row action L1 `batch["action"][i][k]`. All 7 of their training losses compute.
"""
import sys
from pathlib import Path

import pytorch_lightning as pl
import torch
import torch.nn.functional as F

from contract_common import ContractSteps, lightning_fit

train, val, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
PRED_LEN, ACTIONS, FEATURE = 4, 39, 1536    # config.py pred_len; 39 discrete actions; synth F
LISTS = ("future_action_index", "future_feature")


class TinyB2DTCP(ContractSteps, pl.LightningModule):
    PRED_LEN, ROW_ACTION = PRED_LEN, "speed"   # the steps (contract_common): pred["speed"][i][0]

    def __init__(self):
        super().__init__()
        self.sizes = [ACTIONS, 1, 2, 2 * FEATURE, 8, PRED_LEN * (ACTIONS + FEATURE)]
        self._tiny(sum(self.sizes))
        self.losses = []

    def forward(self, batch):
        h = self._head(batch)
        act, spd, value, feat, wp, fut = h.split(self.sizes, 1)
        fut = fut.view(-1, PRED_LEN, ACTIONS + FEATURE)
        return {"action_index": act, "speed": spd, "value": value.split(1, 1),
                "feature": feat.split(FEATURE, 1), "wp": wp.view(-1, 4, 2),
                "future_action_index": [fut[:, i, :ACTIONS] for i in range(PRED_LEN)],
                "future_feature": [fut[:, i, ACTIONS:] for i in range(PRED_LEN)]}

    def _check(self, batch):
        """The port's contract: keys, dtypes, shapes; future_* lists of pred_len tensors."""
        b = batch["front_img"].shape[0]
        ok = (batch["front_img"].shape[1:] == (3, 256, 900)
              and batch["waypoints"].dtype == torch.float64
              and batch["speed"].dtype == torch.float64
              and batch["action_index"].dtype == torch.int64
              and batch["target_command"].dtype == torch.int64
              and all(isinstance(batch[k], list) and len(batch[k]) == PRED_LEN
                      and batch[k][0].shape[0] == b for k in LISTS)
              and batch["future_action_index"][0].dtype == torch.int64
              and batch["valid"].dtype == torch.bool)
        self.contract.append(bool(ok))

    def _loss(self, batch, pred, steps):
        """Their 7 losses: action, speed, value, feature, waypoints, future feature/action."""
        speed = batch["speed"].to(dtype=torch.float32).view(-1, 1) / 12.
        value = batch["value"].view(-1, 1)
        parts = [F.nll_loss(F.log_softmax(pred["action_index"], 1), batch["action_index"]),
                 F.l1_loss(pred["speed"], speed),
                 sum(F.mse_loss(v, value) for v in pred["value"]),
                 sum(F.mse_loss(f, batch["feature"]) for f in pred["feature"]),
                 F.l1_loss(pred["wp"], batch["waypoints"], reduction="none").mean()]
        fut_f = sum(F.mse_loss(pred["future_feature"][i], batch["future_feature"][i])
                    for i in range(steps))
        fut_a = sum(F.nll_loss(F.log_softmax(pred["future_action_index"][i], 1),
                               batch["future_action_index"][i]) for i in range(steps))
        parts += [fut_f / PRED_LEN, fut_a / PRED_LEN]
        self.losses.append([bool(torch.isfinite(p)) for p in parts])
        return sum(parts)


lightning_fit(pl, TinyB2DTCP(), train, val, out, "b2d_tcp", eval_batch_size=2,
              extra=lambda m: {"losses": m.losses})
