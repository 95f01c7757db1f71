"""Run under torchrun: phase `stop` takes K batches and saves rank 0's loader state; phase
`rest` loads it (with however many ranks and workers this run has) and serves the rest of
the epoch. Every rank writes the keys it served to OUT/<phase>-rank<r>.json.

    torchrun --standalone --nproc_per_node N tests/scripts/reshape_resume.py SHARDS OUT PHASE K W
"""
import itertools
import json
import sys
from pathlib import Path

import torch.distributed as tdist

from carla_wds import CARLAWebData

shards, out, phase, k, workers = sys.argv[1], Path(sys.argv[2]), sys.argv[3], int(sys.argv[4]), \
    int(sys.argv[5])
tdist.init_process_group("gloo")
rank = tdist.get_rank()
data = CARLAWebData(shards, batch_size=3, num_workers=workers, image_size=(16, 24), seed=7,
                    shuffle_buffer=8)
data.set_epoch(1)
if phase == "stop":
    it = iter(data)
    keys = [key for b in itertools.islice(it, k) for key in b.keys]
    it.close()
    if rank == 0:
        (out / "state.json").write_text(json.dumps(data.state_dict()))
else:
    data.load_state_dict(json.loads((out / "state.json").read_text()))
    keys = [key for b in data for key in b.keys]
tdist.barrier()
(out / f"{phase}-rank{rank}.json").write_text(json.dumps({"keys": keys, "len": len(data)}))
tdist.barrier()   # leave together (see carla_wds.dist.cleanup)
tdist.destroy_process_group()
