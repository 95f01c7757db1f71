"""CARLADataModule under a real 2-process Lightning DDP fit (gloo; ranks forked by
tests/ranks.py with torchrun's environment, so that Lightning takes them as torchrun's)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from .helpers import SCRIPTS, all_keys, make_pack
from .ranks import run_script


@pytest.fixture(scope="module", autouse=True)
def _pytorch_lightning() -> None:
    """Skips the module without pytorch_lightning; imported here, once before its tests (the
    ranks forked from this process inherit it), not at import: every pytest process collects
    this module, make quick's too, and the import costs seconds of CPU."""
    pytest.importorskip("pytorch_lightning")


@pytest.mark.ddp
def test_lightning_ddp_fit_has_exact_lengths(tmp_path):
    shards = make_pack(tmp_path / "data", episodes=2, frames=24)
    run_script(str(SCRIPTS / "lightning_fit.py"), str(shards), str(tmp_path))
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


def _tcp_roach(root: Path, seed: int, episodes: int) -> Path:
    from carla_wds.pack import PackOptions, pack
    from carla_wds.pack.synth import synth_dataset
    synth_dataset(root / "raw", "tcp_roach", episodes=episodes, frames=10, seed=seed,
                  image_size=(48, 64), progress=False)
    pack(root / "raw", root / "shards", PackOptions(layout="tcp_roach", progress=False,
                                                      allow_pickle_input=True, max_samples=4))
    return root / "shards"


@pytest.mark.ddp
def test_tcp_contract_model_trains_and_validates_under_ddp(tmp_path):
    """adapter="tcp" through CARLADataModule: a model reading the batch as TCP's train.py
    does trains and validates under DDP (2 ranks, gloo); train and val batches are the
    same dicts; validation covers every val sample once with equal batch counts, and its
    padding rows (copies of real samples) keep their loss finite."""
    train = _tcp_roach(tmp_path / "train", seed=3, episodes=2)
    val = _tcp_roach(tmp_path / "val", seed=4, episodes=1)
    run_script(str(SCRIPTS / "tcp_contract_fit.py"), str(train), str(val), str(tmp_path))
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for r in ranks:
        assert r["contract"] and all(r["contract"])
        assert len(r["train_keys"]) == r["len"] > 0
        assert r["val_losses"] and all(abs(v) < float("inf") for v in r["val_losses"])
    assert ranks[0]["val_batches"] == ranks[1]["val_batches"]
    val_keys = ranks[0]["val_keys"] + ranks[1]["val_keys"]
    assert sorted(val_keys) == sorted(all_keys(val))
    assert len(val_keys) < 2 * 5 * ranks[0]["val_batches"]   # so padding rows were validated


def test_lightning_package_trainer_takes_the_datamodule(tmp_path):
    """`import lightning` (the unified package): its Trainer sets up CARLADataModule as its own
    (before: its loaders were None, "TypeError: 'NoneType' object is not iterable")."""
    pytest.importorskip("lightning")
    import subprocess
    import sys
    train = _tcp_roach(tmp_path / "train", seed=3, episodes=1)
    env = {**__import__("os").environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    code = (
        "import sys, torch, lightning as L\n"
        "from carla_wds.lightning import CARLADataModule\n"
        "class M(L.LightningModule):\n"
        "    def __init__(self):\n"
        "        super().__init__(); self.w = torch.nn.Parameter(torch.zeros(1))\n"
        "    def training_step(self, batch, i):\n"
        "        assert batch['front_img'].shape[1:] == (3, 256, 900)\n"
        "        return (self.w - batch['front_img'].mean()).abs()\n"
        "    def configure_optimizers(self):\n"
        "        return torch.optim.SGD(self.parameters(), lr=0.1)\n"
        "t = L.Trainer(accelerator='cpu', devices=1, max_epochs=1, logger=False,\n"
        "              enable_checkpointing=False, enable_progress_bar=False)\n"
        "t.fit(M(), CARLADataModule(sys.argv[1], batch_size=2, adapter='tcp'))\n"
        "print('steps', t.global_step)\n")
    run = subprocess.run([sys.executable, "-c", code, str(train)], capture_output=True,
                         text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "steps 3" in run.stdout
