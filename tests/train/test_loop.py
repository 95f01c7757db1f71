"""The trainer end to end: single process, torchrun DDP, two local "nodes", kill -9 + resume."""
from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import cv2
import pytest
import torch

from carla_wds.pack.packer import PackOptions, pack
from carla_wds.pack.synth import synth_dataset
from carla_wds.train.checkpoint import load_checkpoint
from carla_wds.train.config import CONFIG_DIR, ConfigError, load_config
from carla_wds.train.loop import run_training
from tests.ranks import run_module

ROOT = Path(__file__).resolve().parents[2]
TINY = str(CONFIG_DIR / "tiny.yaml")


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("train")
    for split, episodes, seed in (("train", 3, 0), ("val", 1, 1)):
        synth_dataset(root / "raw" / split, "transfuser4", episodes=episodes, frames=24,
                      seed=seed, image_size=(48, 64), progress=False)
        pack(root / "raw" / split, root / split,
             PackOptions(layout="transfuser4", max_samples=9, progress=False,
                         all_frames=True))   # every frame with a future: 20 per route
    return root


def overrides(data: Path, run_dir: Path, **extra) -> list[str]:
    items = {"run_dir": str(run_dir), "data.train": str(data / "train"),
             "data.val": str(data / "val"), "data.batch_size": 8, "data.eval_batch_size": 8,
             "data.num_workers": 0, "data.image_size": "[32, 48]", "model.feature_dim": 32,
             "epochs": 3, "log_every": 1, "eval_every": 1, "show_samples": 3,
             "optim.warmup_steps": 2, **extra}
    return [f"{k}={v}" for k, v in items.items()]


def env() -> dict[str, str]:
    # One thread everywhere: CPU kernels are then bitwise reproducible across processes.
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def launch(args: list[str], nproc: int = 1, extra: list[str] = ()) -> subprocess.Popen:
    if nproc == 1 and not extra:
        cmd = [sys.executable, "-m", "carla_wds.train", "--config", TINY, *args]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", *extra,
               f"--nproc_per_node={nproc}", "-m", "carla_wds.train", "--config", TINY, *args]
    return subprocess.Popen(cmd, env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


def finish(proc: subprocess.Popen, timeout: int = 300) -> str:
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out[-4000:]
    return out


def metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_single_process_lowers_loss_and_writes_outputs(data, tmp_path, caplog):
    run_dir = tmp_path / "run"
    torch.set_num_threads(1)
    caplog.set_level(logging.INFO, logger="carla_wds.train")
    # TCP's plain deltas start from a random trajectory, so 28 steps must cut the loss; on the
    # default prior the first loss is already the baseline's (tests/train/test_evaluate.py)
    result = run_training(load_config(TINY, overrides(data, run_dir, epochs=4,
                                                      **{"model.prior": "none"})))
    losses = [m["loss"] for m in metrics(run_dir) if m["kind"] == "train"]
    assert sum(losses[-3:]) / 3 < 0.7 * sum(losses[:3]) / 3, losses
    assert result["n"] == 20   # every val sample once
    # every evaluation (eval_every=1) is logged next to the baseline, not only the last one
    evals = [m for m in metrics(run_dir) if m["kind"] == "eval"]
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("epoch ")]
    assert said == [f"epoch {e['epoch'] + 1}/4, step {e['step']}: val ADE {e['ade']:.3f} m, FDE "
                    f"{e['fde']:.3f} m on 20 samples; straight-line baseline ADE "
                    f"{e['baseline_ade']:.3f} m, FDE {e['baseline_fde']:.3f} m" for e in evals]
    assert len(said) == 4
    for name in ("checkpoint.pt", "config.json", "summary.json", "curves.png", "predictions.png"):
        assert (run_dir / name).is_file(), name
    curves = cv2.imread(str(run_dir / "curves.png"))
    assert curves is not None and curves.shape[0] > 200 and curves.shape[1] > 400
    montage = cv2.imread(str(run_dir / "predictions.png"))
    assert montage is not None and montage.shape[0] > 3 * 100
    ckpt = load_checkpoint(run_dir / "checkpoint.pt")
    assert set(ckpt) >= {"model", "optimizer", "scheduler", "step", "epoch", "config", "loader",
                         "rng"}
    assert ckpt["config"]["epochs"] == 4 and ckpt["step"] == 4 * (60 // 8)


def test_torchrun_two_ranks_equal_steps_identical_params(data, tmp_path):
    run_dir = tmp_path / "ddp"
    finish(launch(overrides(data, run_dir, **{"data.num_workers": 1}), nproc=2,
                  extra=["--standalone"]))
    summary = json.loads((run_dir / "summary.json").read_text())
    r0, r1 = summary["ranks"]
    assert summary["world_size"] == 2
    assert r0["steps"] == r1["steps"] == 3 * ((60 // 2) // 8)
    assert r0["param_sum"] == r1["param_sum"] and r0["param_sumsq"] == r1["param_sumsq"]


@pytest.mark.ddp
def test_eval_two_ranks_equals_one_process(data, tmp_path):
    run_dir = tmp_path / "base"
    run_module("carla_wds.train", "--config", TINY, *overrides(data, run_dir, epochs=1),
               nproc=1)
    ckpt = str(run_dir / "checkpoint.pt")
    results = []
    for nproc, name in ((1, "eval1"), (2, "eval2")):   # ranks forked by tests/ranks.py
        args = overrides(data, tmp_path / name, eval_only="true", resume=ckpt)
        run_module("carla_wds.train", "--config", TINY, *args, nproc=nproc)
        results.append(json.loads((tmp_path / name / "eval.json").read_text()))
    one, two = results
    assert one["n"] == two["n"] == 20
    for k in ("ade", "fde", "baseline_ade", "baseline_fde"):
        assert two[k] == pytest.approx(one[k], rel=1e-5), k


def test_kill_9_mid_epoch_then_resume_gives_identical_weights(data, tmp_path):
    args = dict(epochs=3, ckpt_every=1, **{"data.num_workers": 1})
    finish(launch(overrides(data, tmp_path / "full", **args)))
    killed_dir = tmp_path / "killed"
    proc = launch(overrides(data, killed_dir, **args))
    ckpt_path, deadline = killed_dir / "checkpoint.pt", time.time() + 240
    while time.time() < deadline:
        if ckpt_path.exists():
            state = load_checkpoint(ckpt_path)
            if state["epoch"] >= 1 and 0 < state["loader"]["consumed"] < 7:
                proc.send_signal(signal.SIGKILL)
                break
        time.sleep(0.02)
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL, "the run was not killed mid-training"
    at_kill = load_checkpoint(ckpt_path)
    assert at_kill["step"] < 3 * 7, "killed too late to test resuming"
    out = finish(launch(overrides(data, killed_dir, **args)))
    assert "resumed from" in out
    full = load_checkpoint(tmp_path / "full" / "checkpoint.pt")["model"]
    resumed = load_checkpoint(ckpt_path)["model"]
    assert all(torch.equal(full[k], resumed[k]) for k in full)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_local_nodes_finish_together(data, tmp_path):
    run_dir, port = tmp_path / "nodes", free_port()
    procs = [launch(overrides(data, run_dir, epochs=1), nproc=1,
                    extra=["--nnodes=2", f"--node_rank={rank}", "--rdzv-backend=c10d",
                           f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=carla-wds-test"])
             for rank in (0, 1)]
    for p in procs:
        finish(p)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["world_size"] == 2 and len(summary["ranks"]) == 2


def test_config_errors_and_overrides(tmp_path):
    cfg = load_config(TINY, ["optim.lr=0.01", "data.image_size=[16, 32]", "epochs=2"])
    assert cfg.optim.lr == 0.01 and cfg.data.image_size == [16, 32] and cfg.epochs == 2
    with pytest.raises(ConfigError, match="unknown config key optim.lrr.*optim.lr"):
        load_config(TINY, ["optim.lrr=1"])
    with pytest.raises(ConfigError, match="unknown config key bogus; valid keys here: run_dir"):
        load_config(None, ["bogus=1"])
    with pytest.raises(ConfigError, match="epochs: expected an integer, got .many.. Fix: e.g. epochs=4"):
        load_config(TINY, ["epochs=many"])
    with pytest.raises(ConfigError, match="key=value"):
        load_config(TINY, ["epochs"])
    bad = tmp_path / "bad.yaml"
    bad.write_text("data:\n  batchsize: 3\n")
    with pytest.raises(ConfigError, match="data.batchsize.*data.batch_size"):
        load_config(bad)
    assert load_config(str(CONFIG_DIR / "tcp.yaml")).model.backbone == "resnet34"


def test_cli_train_show_and_plot(data, tmp_path):
    run_dir = tmp_path / "run"
    cli = [sys.executable, "-m", "carla_wds.cli"]
    subprocess.run([*cli, "train", "--config", TINY, *overrides(data, run_dir, epochs=1)],
                   check=True, env=env(), capture_output=True)
    assert json.loads((run_dir / "summary.json").read_text())["world_size"] == 1
    bad = subprocess.run([*cli, "train", "--config", TINY, "optim.lrr=1"], env=env(),
                         capture_output=True, text=True)
    assert bad.returncode != 0 and "valid keys here: optim.lr" in bad.stderr
    out = tmp_path / "show.png"
    subprocess.run([*cli, "show", str(data / "val"), "--checkpoint",
                    str(run_dir / "checkpoint.pt"), "--out", str(out), "-n", "2"], check=True,
                   env=env())
    img = cv2.imread(str(out))
    assert img is not None and img.shape[0] > 150 and img.shape[1] > 500
    subprocess.run([*cli, "plot", str(run_dir), "--out", str(tmp_path / "c.png")], check=True,
                   env=env())
    assert cv2.imread(str(tmp_path / "c.png")).shape == (450, 1200, 3)


def test_eval_only_without_a_checkpoint_is_an_error(data, tmp_path):
    cfg = load_config(TINY, overrides(data, tmp_path / "none", eval_only="true"))
    with pytest.raises(FileNotFoundError, match="eval_only=true needs a checkpoint"):
        run_training(cfg)
