"""The DDP waypoint-prediction trainer (`python -m carla_wds.train`; its --help: usage.py).

Reads top to bottom: setup, data, model, optimizer, resume, then `train_one_epoch` and
`evaluate` (evaluate.py) per epoch, with one checkpoint dict written atomically by rank 0.
"""
from __future__ import annotations

import argparse
import json
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as tdist
from torch.nn.parallel import DistributedDataParallel

from .. import dist, limits
from ..fileio import atomic_write_json
from ..load import Augment, CARLAWebData, History, RemoteOptions, Storage, Transport
from ..manifest import read_manifest
from ..progress import bar as progress_bar   # a terminal's bar, or a few log lines
from ..rng import derive_seed, rng_state, seed_everything, set_rng_state
from . import usage
from .checkpoint import (
    CHECKPOINT,
    CheckpointError,
    find_resume,
    load_checkpoint,
    load_weights,
    refuse_other_training,
    save_checkpoint,
    trim_metrics,
)
from .config import TrainConfig, check_runtime, load_config, shipped_configs, to_dict
from .control import controller_source
from .errors import USER_ERRORS, one_line
from .evaluate import baseline_verdict, eval_line, evaluate
from .finite import check_losses, check_progress, check_resume_state, check_weights
from .inputs import (autocast_for, check_inputs, current_frame, loader_options, model_for,
                     predict, same_view)
from .runlock import hold_run_dir

log = logging.getLogger("carla_wds.train")


@dataclass
class Run:
    cfg: TrainConfig
    device: str
    rank: int
    world: int
    model: torch.nn.Module          # the DDP wrapper when world > 1
    raw_model: torch.nn.Module
    opt: torch.optim.Optimizer
    sched: torch.optim.lr_scheduler.LambdaLR
    train: CARLAWebData
    val: CARLAWebData
    step: int = 0
    epoch: int = 0
    last_loss: float = float("nan")

    @property
    def main(self) -> bool:
        return self.rank == 0

    def autocast(self):
        return autocast_for(self.device, self.cfg.bf16)

    def log_metrics(self, record: dict[str, Any]) -> None:
        if self.main:
            with open(Path(self.cfg.run_dir) / "metrics.jsonl", "a") as f:
                f.write(json.dumps(record) + "\n")


def build_data(cfg: TrainConfig, rank: int, world: int, pin: bool) -> tuple[CARLAWebData, CARLAWebData]:
    d = cfg.data
    # a trainer process reads only this run's data: its limits are the process's (manifests,
    # workers and the loaders alike)
    limits.set_active(limits.DEFAULT.with_overrides(d.limits))
    remote = RemoteOptions(read_timeout=d.read_timeout, retries=d.retries)
    common = dict(num_workers=d.num_workers, seed=cfg.seed, image_size=tuple(d.image_size),
                  cameras=d.cameras, rank=rank, world_size=world, on_error=d.on_error,
                  transport=Transport(persistent=d.persistent_workers, pin_memory=pin),
                  storage=Storage(remote=remote, cache_dir=d.cache_dir,
                                  cache_limit_bytes=d.cache_limit_bytes, verify=d.verify),
                  history=History(d.history, stride=d.history_stride))
    # the specs first: the model's inputs are checked in the config's words, and where the val
    # shards carry the expert's controls, eval decodes them too
    named = ([] if d.val_mix else [("data.val", d.val)]) + \
        ([] if d.mix else [("data.train", d.train)])
    specs = {path: _manifest(key, path, remote) for key, path in named}
    for path, manifest in specs.items():
        check_inputs(cfg.model, manifest.spec, manifest.where)
    source = dict(mix=d.mix) if d.mix else dict(source=d.train)   # a mix: its packs instead
    train = CARLAWebData(**source, batch_size=d.batch_size, mode="train",
                         augment=Augment(d.augment, per_camera=d.per_camera_augment),
                         shuffle_buffer=d.shuffle_buffer, **common, **loader_options(cfg.model))
    val = CARLAWebData(**(dict(mix=d.val_mix) if d.val_mix else dict(source=d.val)),
                       batch_size=d.eval_batch_size, mode="eval", **common,
                       **loader_options(cfg.model, None if d.val_mix else specs[d.val].spec))
    same_view(train, val)
    return train, val


def _manifest(key: str, path: str, remote: RemoteOptions):
    """The manifest a data key names; a missing one is one line naming the key to set."""
    try:
        return read_manifest(path, remote)
    except FileNotFoundError as exc:
        raise FileNotFoundError(f"{key}={path}: {exc}. Fix: pack your data there "
                                f"(carla-wds pack RAW {path} --layout ...) or set {key}=PATH"
                                ) from None


def lr_lambda(cfg: TrainConfig, total_steps: int):
    o = cfg.optim

    def factor(step: int) -> float:
        if step < o.warmup_steps:
            return (step + 1) / o.warmup_steps
        if o.schedule == "step":
            return o.gamma ** ((step - o.warmup_steps) // o.step_every)
        t = min(1.0, (step - o.warmup_steps) / max(1, total_steps - o.warmup_steps))
        return o.min_lr_ratio + (1 - o.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * t))
    return factor


def setup_run(cfg: TrainConfig, device: str, rank: int, world: int) -> Run:
    seed_everything(cfg.seed)   # identical initial weights on every rank
    train, val = build_data(cfg, rank, world, pin=device.startswith("cuda"))
    model = model_for(cfg, train).to(device)
    if device.startswith("cuda") and cfg.channels_last:
        model = model.to(memory_format=torch.channels_last)
    ddp = DistributedDataParallel(model, device_ids=[device] if device != "cpu" else None) \
        if world > 1 else model
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.optim.lr,
                            weight_decay=cfg.optim.weight_decay)
    total = cfg.epochs * len(train)
    total = min(total, cfg.max_steps) if cfg.max_steps else total
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(cfg, total))
    seed_everything(derive_seed(cfg.seed, rank))   # per-rank streams from here on
    return Run(cfg, device, rank, world, ddp, model, opt, sched, train, val)


def checkpoint_state(run: Run) -> dict[str, Any]:
    return {"model": run.raw_model.state_dict(), "optimizer": run.opt.state_dict(),
            "scheduler": run.sched.state_dict(), "step": run.step, "epoch": run.epoch,
            "config": to_dict(run.cfg), "loader": run.train.state_dict(), "rng": rng_state()}


def save(run: Run) -> None:
    check_weights(run)   # on every rank: one whose weights are not finite stops them all
    if run.main:
        save_checkpoint(Path(run.cfg.run_dir) / CHECKPOINT, checkpoint_state(run))


def restore(run: Run) -> None:
    path = find_resume(run.cfg.resume, run.cfg.run_dir)
    ckpt = _load_for_resume(run.cfg, path) if path is not None else None
    _check_ranks_agree(run, ckpt["step"] if ckpt else -1)
    if ckpt is None:
        if run.cfg.eval_only:
            raise FileNotFoundError(f"eval_only=true needs a checkpoint: none at "
                                    f"{run.cfg.run_dir}/{CHECKPOINT}. Pass resume=PATH")
        return
    refuse_other_training(path, ckpt, run.cfg)
    check_progress(path, ckpt, weights_only=run.cfg.eval_only)   # a file anyone may edit
    load_weights(run.raw_model, path, ckpt["model"], run.cfg.run_dir)
    run.step = ckpt["step"]
    if run.cfg.eval_only:   # weights only: any world size may evaluate them
        return
    check_resume_state(path, ckpt, run.opt)   # finite lr and moments: lr=inf trained at NaN
    run.opt.load_state_dict(ckpt["optimizer"])
    run.sched.load_state_dict(ckpt["scheduler"])
    run.train.load_state_dict(ckpt["loader"])
    set_rng_state(ckpt["rng"])
    run.step, run.epoch = ckpt["step"], ckpt["epoch"]
    if run.train.consumed >= len(run.train):
        run.epoch += 1   # the checkpoint closed its epoch
    if run.main:
        trim_metrics(Path(run.cfg.run_dir) / "metrics.jsonl", run.step)
        log.info("resumed from %s at step %d (epoch %d, batch %d)", path, run.step, run.epoch,
                 run.train.consumed % len(run.train))


def _load_for_resume(cfg: TrainConfig, path: Path) -> dict[str, Any]:
    try:
        return load_checkpoint(path)
    except CheckpointError as exc:
        raise CheckpointError(path, f"{exc.problem}. Fix: resume=PATH to a checkpoint.pt that "
                                    "carla-wds train wrote, or resume=none to start afresh"
                                    + (f" (or move {path} away)" if cfg.resume == "auto" else "")
                              ) from None


def _check_ranks_agree(run: Run, step: int) -> None:
    """Every rank must resume from the same step (-1: none), or collectives would hang later."""
    if run.world == 1:
        return
    mine = torch.tensor([float(step)], dtype=torch.float64, device=run.device)
    every = [torch.zeros_like(mine) for _ in range(run.world)]
    tdist.all_gather(every, mine)
    steps = [int(t.item()) for t in every]
    if len(set(steps)) > 1:
        raise RuntimeError(f"ranks disagree on where to resume (checkpoint step per rank, -1 for "
                           f"none: {steps}). Fix: put run_dir on a file system every node sees, "
                           "or pass resume=PATH that exists on every node, or resume=none")


def masked_l1(pred: torch.Tensor, target: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    per_sample = (pred.float() - target).abs().mean(dim=(1, 2))
    return (per_sample * valid).sum() / valid.sum().clamp(min=1)


def _log_window(run: Run, window: list[torch.Tensor], wait: float, started: float) -> float:
    """One metrics line per log window: loss, lr, throughput and the time spent waiting for data."""
    if run.device.startswith("cuda"):
        torch.cuda.synchronize()   # the GPU's queued work belongs to this window, not the next
    now = time.perf_counter()
    run.last_loss = torch.stack(window).float().mean().item()
    elapsed = now - started
    run.log_metrics({"kind": "train", "step": run.step, "epoch": run.epoch, "loss": run.last_loss,
                     "lr": run.sched.get_last_lr()[0], "steps": len(window),
                     "data_wait_s": wait, "window_s": elapsed,
                     "samples_per_s": len(window) * run.cfg.data.batch_size * run.world / elapsed,
                     "data_wait_share": wait / elapsed})
    return now


def train_one_epoch(run: Run) -> None:
    run.model.train()
    run.train.set_epoch(run.epoch, global_step=run.epoch * len(run.train))
    with progress_bar(total=len(run.train), initial=run.train.consumed, disable=not run.main,
              desc=f"epoch {run.epoch}", unit="batch") as bar:   # closed before an error prints
        window, wait, t0 = [], 0.0, time.perf_counter()
        started = t0
        for batch in run.train:
            wait += time.perf_counter() - t0
            batch = batch.to(run.device)
            # a windowed batch's labels are those of each window's own (last) frame
            loss = masked_l1(predict(run.model, batch, run.autocast()),
                             current_frame(batch).waypoints, batch.valid)
            run.opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(run.model.parameters(), run.cfg.optim.grad_clip)
            run.opt.step()
            run.sched.step()
            run.step += 1
            window.append(loss.detach())   # no GPU sync per step; .item() only when logging
            bar.update(1)
            if run.step % run.cfg.log_every == 0 or run.train.consumed == len(run.train):
                check_losses(run, window)   # the first non-finite loss stops the run
                started = _log_window(run, window, wait, started)
                bar.set_postfix(loss=f"{run.last_loss:.3f}")
                window, wait = [], 0.0
            if run.cfg.ckpt_every and run.step % run.cfg.ckpt_every == 0:
                check_losses(run, window)
                save(run)
            if run.cfg.max_steps and run.step >= run.cfg.max_steps:
                break
            t0 = time.perf_counter()
    check_losses(run, window)   # the steps since the last log line (max_steps)


def run_eval(run: Run) -> dict[str, Any]:
    return evaluate(run.raw_model, run.val, run.cfg, run.device, run.world)


def rank_consistency(run: Run) -> list[list[float]]:
    """[steps, parameter sum, parameter sum of squares] of every rank, to prove DDP kept them equal."""
    params = [p.detach().double() for p in run.raw_model.parameters()]
    mine = torch.tensor([float(run.step), sum(p.sum().item() for p in params),
                         sum((p * p).sum().item() for p in params)], dtype=torch.float64,
                        device=run.device)
    if run.world == 1:
        return [mine.tolist()]
    every = [torch.zeros_like(mine) for _ in range(run.world)]
    tdist.all_gather(every, mine)
    return [t.tolist() for t in every]


def skipped_samples(run: Run) -> dict[str, int]:
    """Samples data.on_error=skip replaced with padding during this process's run, all ranks."""
    counts = torch.tensor([float(d.stats["skipped_samples"]) for d in (run.train, run.val)],
                          dtype=torch.float64, device=run.device)
    if run.world > 1:
        tdist.all_reduce(counts)
    return {"train": int(counts[0].item()), "val": int(counts[1].item())}


def finish(run: Run, last_eval: dict[str, float] | None, ranks: list[list[float]],
           skipped: dict[str, int]) -> None:
    """Rank 0: curves, a prediction montage and a summary in the run directory."""
    from .show import show
    from .viz import plot_run
    run_dir = Path(run.cfg.run_dir)
    plot_run(run_dir, run_dir / "curves.png")
    if run.cfg.data.val_mix is None:   # show draws one pack; a val mix has several
        show(run.cfg.data.val, run_dir / "predictions.png", checkpoint=run_dir / CHECKPOINT,
             n=run.cfg.show_samples, on_error=run.cfg.data.on_error)
    summary = {"step": run.step, "epochs": run.cfg.epochs, "world_size": run.world,
               "train_batches_per_rank": len(run.train), "val": last_eval,
               "ranks": [{"steps": int(r[0]), "param_sum": r[1], "param_sumsq": r[2]}
                         for r in ranks], "skipped_samples": skipped}
    if any(skipped.values()):
        log.warning("data.on_error=skip replaced %d train and %d val samples with padding; the "
                    "loader's warnings name them", skipped["train"], skipped["val"])
    atomic_write_json(run_dir / "summary.json", summary)
    if last_eval:
        log.info("%s: the model %s", eval_line(last_eval),
                 baseline_verdict(last_eval["ade"], last_eval["baseline_ade"]))
        if "steer_mae" in last_eval:
            log.info("%s's PID controller vs the expert's controls, MAE (baseline's): steer "
                     "%.3f (%.3f), throttle %.3f (%.3f), brake %.3f (%.3f)", controller_source(),
                     *(last_eval[f"{p}{c}_mae"] for c in ("steer", "throttle", "brake")
                       for p in ("", "baseline_")))


def run_training(cfg: TrainConfig) -> dict[str, float] | None:
    """Train (or, with eval_only, evaluate) as configured; the value is the last evaluation.

    The config is checked before a process group or run_dir exists, and rank 0 holds
    run_dir's lock (runlock.py) from before the first file is written until the end.
    """
    check_runtime(cfg)
    device, rank, world = dist.setup(cfg.device)
    ok = False
    try:
        with hold_run_dir(cfg.run_dir, rank, world, device):
            result = _run(setup_run(cfg, device, rank, world))
        ok = True
        return result
    finally:
        dist.cleanup(barrier=ok)


def _run(run: Run) -> dict[str, float] | None:
    cfg = run.cfg
    if run.main:
        atomic_write_json(Path(cfg.run_dir) / "config.json", to_dict(cfg))
        log.info("world %d on %s: %d train batches of %d per rank per epoch, %d val batches",
                 run.world, run.device, len(run.train), cfg.data.batch_size, len(run.val))
    try:
        restore(run)
        if cfg.eval_only:
            result = run_eval(run)
            if run.main:
                atomic_write_json(Path(cfg.run_dir) / "eval.json", {**result, "step": run.step})
                log.info("eval of step %d: %s", run.step, result)
            return result
        last_eval = None
        while run.epoch < cfg.epochs and not (cfg.max_steps and run.step >= cfg.max_steps):
            train_one_epoch(run)
            if (run.epoch + 1) % cfg.eval_every == 0 or run.epoch + 1 == cfg.epochs:
                last_eval = run_eval(run)
                run.log_metrics({"kind": "eval", "step": run.step, "epoch": run.epoch, **last_eval})
                if run.main:
                    log.info("epoch %d/%d, step %d: %s", run.epoch + 1, cfg.epochs, run.step,
                             eval_line(last_eval))
            save(run)
            run.epoch += 1
        if last_eval is None:   # resumed after the last epoch: every rank joins the reduce
            last_eval = run_eval(run)
        ranks, skipped = rank_consistency(run), skipped_samples(run)
        if run.main:
            finish(run, last_eval, ranks, skipped)
        return last_eval
    finally:
        for data in (run.train, run.val):
            data.close()   # persistent workers end with the run, not at interpreter exit


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m carla_wds.train",
                                     description=usage.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=None,
                        help=f"a shipped config ({', '.join(shipped_configs())}) or a YAML file")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                        help="override one config setting, e.g. optim.lr=3e-4")
    args = parser.parse_args(argv)
    rank = dist.rank_world()[0]
    logging.basicConfig(level=logging.INFO if rank == 0 else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        run_training(load_config(args.config, args.overrides))
    except USER_ERRORS as exc:
        # a rank that has logged its line already (runlock) only exits
        parser.exit(1, "" if getattr(exc, "reported", False) else f"error: {one_line(exc)}\n")


if __name__ == "__main__":
    main()
