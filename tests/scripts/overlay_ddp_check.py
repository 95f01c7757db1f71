"""Run under torchrun: every rank writes (key, entry) of its train batches and the keys of its
eval batches of a pack read with one overlay (eval: only samples with an entry).

    torchrun --standalone --nproc_per_node 2 tests/scripts/overlay_ddp_check.py BASE OVERLAY OUT
"""
import json
import sys
from pathlib import Path

import torch.distributed as tdist

from carla_wds import CARLAWebData

base, overlay, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
tdist.init_process_group("gloo")
rank = tdist.get_rank()
field = json.loads((Path(overlay) / "manifest.json").read_text())["field"]
train = CARLAWebData(base, batch_size=3, num_workers=2, image_size=(16, 24), overlays=[overlay])
val = CARLAWebData(base, batch_size=2, mode="eval", num_workers=1, image_size=(16, 24),
                   overlays=[overlay], overlay_required=True)
train_rows = [[k, v] for b in train for k, v, ok in zip(b.keys, b.fields[field],
                                                         b.valid.tolist()) if ok]
eval_keys = [k for b in val for k, ok in zip(b.keys, b.valid.tolist()) if ok]
tdist.barrier()
(out / f"rank{rank}.json").write_text(json.dumps({"train": train_rows, "eval": eval_keys}))
tdist.barrier()
tdist.destroy_process_group()
