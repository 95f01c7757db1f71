"""LEAD's own TFv6 training step (kesai-labs/lead@44891760 lead/training/train.py Trainer.train,
unchanged) on batches of CARLAWebData(adapter="lead"), on CPU with random init, for 3 steps,
with the planning, semantic, CenterNet box, BEV semantic and radar detection heads on (their
radar tokens feeding the planner: use_radar_detection).

    /tmp/golden_venv/bin/pip install timm     # TFv6's backbones; beside tools/golden/lead.py's
    /tmp/golden_venv/bin/python -m tools.golden.lead_train --repo-dir /tmp/golden_src/lead \\
        --shards PACK [--steps 3] [--out result.json]

PACK: a `lead` pack made as the adapter says (carla-wds pack RAW OUT --layout lead
--allow-pickle-input --image-format png). Their Trainer is built without its __init__ (which
reads the environment, starts DDP and their DataLoader): model, optimizer, scheduler and
scaler come from their own functions (TFv6(device, config), initialize_optimizer,
schedule_loss_weights); `dataloader` is ours. Then their Trainer.train runs as written:
forward, compute_loss, the weighted sum, backward, optimizer and scheduler steps.
Run-time shims, each because the step cannot run on this machine without it:
- lead.py's stubs of `carla` and RoadOption, numpy 2's np.string_;
- timm.create_model with pretrained=False (random init; the image backbone would download
  ImageNet weights);
- their Logger (wandb, tensorboard and their visualisation code) is a no-op log_train;
- the config: TrainingConfig with the adapter's CONFIG (box, semantic, BEV semantic and radar
  heads on; with --no-semantic use_semantic False, with --no-boxes detect_boxes False and
  use_bev_semantic False, which their loader draws from the boxes, with --no-radar the
  three radar switches False), compile False,
  mixed precision off (CPU: their autocast and GradScaler are CUDA-only and turn
  themselves off), use_persistent_cache False.
Writes (--out) the losses of each step, and whether every parameter that has a gradient moved.
"""
from __future__ import annotations

import argparse
import json
import sys
import types
from itertools import islice
from pathlib import Path

from .lead import COMMIT, _stubs
from .lead_batches import BLOBS, CONFIG

TRAIN_BLOBS = {  # the training step's files at COMMIT (git blob ids), beside the loader's
    **BLOBS,
    "lead/training/train.py": "5d21c7f0f787118b9cf20f7da8a4174247de2ee8",
    "lead/training/training_utils.py": "879669e9b0d4151df5201561bd2ab84ada51bf24",
    "lead/tfv6/tfv6.py": "039197527671e6f0b159b7aa31e5594036e8e51c",
    "lead/tfv6/planning_decoder.py": "fde27da08baf0733f16d87a8c805441d5871a999",
    "lead/tfv6/center_net_decoder.py": "a4953c3906641556bc1e4f082f6e85ac2a37d4c3",
    "lead/tfv6/bev_decoder.py": "b534aa9914aa1a65257ee11c44ff1ecb3d53c3f5",
    "lead/tfv6/radar_detector.py": "6a1ab6ba25ca9f03c9627fa2fbd567f34137867c",
    "lead/tfv6/transfuser_backbone.py": "ff117e2cc6d6d3e169114d4a158e756af469687a"}


def _shim_imports() -> None:
    import numpy as np
    import timm
    if not hasattr(np, "string_"):
        np.string_ = np.bytes_
    create = timm.create_model
    timm.create_model = lambda *a, **k: create(*a, **{**k, "pretrained": False})
    logger = types.ModuleType("lead.training.logger")

    class Logger:
        def __init__(self, *a, **k) -> None:
            pass

        def log_train(self, **k) -> None:
            pass

        def logs(self, *a, **k) -> None:
            pass
    logger.Logger = Logger  # type: ignore[attr-defined]
    sys.modules["lead.training.logger"] = logger


def trainer(shards: str, steps: int, batch_size: int, semantic: bool, boxes: bool,
            radar: bool = True):
    """Their Trainer with our dataloader and their model/optimizer, ready for .train()."""
    import torch
    from lead.tfv6.tfv6 import TFv6
    from lead.training import training_utils
    from lead.training.config_training import TrainingConfig
    from lead.training.train import Trainer

    from carla_wds.load import CARLAWebData
    config = TrainingConfig({"carla_root": "data/carla_leaderboard2", **CONFIG,
                             "detect_boxes": boxes, "use_bev_semantic": boxes,
                             "use_radars": radar, "radar_detection": radar,
                             "use_radar_detection": radar,
                             "use_mixed_precision_training": False,
                             "use_semantic": semantic})
    type(config).compile = property(lambda self: False)      # no torch.compile on CPU
    torch.manual_seed(0)
    t = Trainer.__new__(Trainer)
    t.config, t.step, t.cur_epoch, t.gradient_steps_skipped = config, 0, 0, 0
    t.model = t.model_wrapper = TFv6(torch.device("cpu"), config)
    t.dataloader = CARLAWebData(shards, batch_size=batch_size, mode="train", seed=0,
                                adapter="lead", augment=True)
    t.gradient_steps_per_epoch = steps
    t.optimizer, t.scheduler, t.scaler, _ = training_utils.initialize_optimizer(
        model_wrapper=t.model_wrapper, model=t.model, config=config,
        gradient_steps_per_epoch=steps)
    t.logger = sys.modules["lead.training.logger"].Logger()
    t.schedule_loss_weights(0)
    return t


def run(repo_dir: Path, shards: str, steps: int, batch_size: int, semantic: bool,
        boxes: bool = True, radar: bool = True) -> dict:
    sys.path.insert(0, str(repo_dir))
    _stubs()
    _shim_imports()
    import torch
    t = trainer(shards, steps, batch_size, semantic, boxes, radar)
    before = {n: p.detach().clone() for n, p in t.model.named_parameters()}
    losses: list[dict] = []
    compute = t.model.compute_loss

    def recorded(predictions, data):          # their compute_loss, its result kept
        out = compute(predictions=predictions, data=data)
        losses.append({k: float(v.detach()) for k, v in out[0].items()})
        return out
    t.model.compute_loss = recorded
    t.dataloader = list(islice(iter(t.dataloader), steps))
    t.train()
    moved = [n for n, p in t.model.named_parameters()
             if p.requires_grad and not torch.equal(p.detach(), before[n])]
    trained = [n for n, p in t.model.named_parameters() if p.requires_grad]
    return {"commit": COMMIT, "steps": len(losses), "losses": losses,
            "parameters": len(trained), "moved": len(moved),
            "batch_keys": sorted(t.dataloader[0].keys())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo-dir", type=Path, required=True)
    parser.add_argument("--shards", required=True)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--no-semantic", action="store_true",
                        help="their model without the semantic head")
    parser.add_argument("--no-boxes", action="store_true",
                        help="their model without the CenterNet box head (detect_boxes off)")
    parser.add_argument("--no-radar", action="store_true",
                        help="their model without the radar input and detection head")
    args = parser.parse_args()
    from . import common
    common.check_pinned(args.repo_dir, TRAIN_BLOBS, COMMIT)
    result = run(args.repo_dir, args.shards, args.steps, args.batch_size, not args.no_semantic,
                 not args.no_boxes, not args.no_radar)
    text = json.dumps(result, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
