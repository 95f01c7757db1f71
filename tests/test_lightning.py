"""CARLADataModule under a real 2-process Lightning DDP fit (torchrun, gloo)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("pytorch_lightning")

from .helpers import SCRIPTS, all_keys, make_pack, torchrun  # noqa: E402  # noqa: E402


def test_lightning_ddp_fit_has_exact_lengths(tmp_path):
    shards = make_pack(tmp_path / "data", episodes=2, frames=24)
    torchrun(str(SCRIPTS / "lightning_fit.py"), str(shards), str(tmp_path))
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for r in ranks:
        # a finite total for the progress bar, equal to our exact per-rank length
        assert r["num_training_batches"] == r["len"] > 0
        assert len(r["train_keys"]) == 2 * r["len"]   # two epochs, every batch seen
    assert ranks[0]["val_batches"] == ranks[1]["val_batches"]
    # after the sanity check stopped early, each validation epoch still covers every sample once
    val = ranks[0]["last_val_keys"] + ranks[1]["last_val_keys"]
    assert sorted(val) == sorted(all_keys(shards))
    epoch0 = [k for r in ranks for b in r["train_keys"][: r["len"]] for k in b]
    assert len(epoch0) == len(set(epoch0))   # no DistributedSampler duplicating samples
    assert ranks[0]["train_keys"][: ranks[0]["len"]] != ranks[0]["train_keys"][ranks[0]["len"]:]
    # persistent_workers=True: Lightning stops each pass at len(), and the train worker of
    # epoch 0 still serves epoch 1 (at epoch 0 the sanity check's val worker is also alive;
    # fresh workers would share no pid across epochs)
    for r in ranks:
        first, second = map(set, r["first_step_children"])
        assert len(first & second) == 1, r["first_step_children"]
