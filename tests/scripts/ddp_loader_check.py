"""Run under torchrun: every rank writes the keys of its train and eval batches to a JSON file.

    torchrun --standalone --nproc_per_node 2 tests/scripts/ddp_loader_check.py SHARDS OUT_DIR
"""
import json
import sys
from pathlib import Path

import torch.distributed as tdist

from carla_wds import CARLAWebData

shards, out = sys.argv[1], Path(sys.argv[2])
tdist.init_process_group("gloo")
rank = tdist.get_rank()
# rank and world size come from the initialised process group, not from arguments
train = CARLAWebData(shards, batch_size=3, num_workers=2, image_size=(16, 24))
val = CARLAWebData(shards, batch_size=4, mode="eval", num_workers=1, image_size=(16, 24))
train_keys = [b.keys for b in train]
eval_keys = [k for b in val for k, v in zip(b.keys, b.valid.tolist()) if v]
eval_batches = len(list(val))
tdist.barrier()
(out / f"rank{rank}.json").write_text(json.dumps({
    "rank": rank, "world": tdist.get_world_size(), "len": len(train), "train": train_keys,
    "eval": eval_keys, "eval_batches": eval_batches, "eval_len": len(val)}))
tdist.barrier()   # leave together (see carla_wds.dist.cleanup)
tdist.destroy_process_group()
