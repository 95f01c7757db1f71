r"""Train the waypoint model on packed shards: one process, or one per GPU under torchrun.

The settings come from a config: a shipped one (--config tiny) or a YAML file of your own.
Every KEY=VALUE after it overrides one setting; nested keys are dotted (optim.lr=3e-4,
data.batch_size=32), a value is read as YAML (lists: data.image_size=[90,320]).

Examples:
  one process:
    python -m carla_wds.train --config tiny epochs=2 optim.lr=3e-4

  one node, 2 processes (gloo on CPU, nccl on GPUs):
    torchrun --standalone --nproc_per_node 2 -m carla_wds.train --config tiny

  two nodes, 8 GPUs each (NODE_RANK=0 on the first machine, 1 on the second):
    torchrun --nnodes 2 --node_rank $NODE_RANK --nproc_per_node 8 \
        --rdzv-backend c10d --rdzv-endpoint $HEAD_NODE:29400 \
        -m carla_wds.train --config tcp

The config's run_dir gets the checkpoint, metrics.jsonl and curves.png; run the same
command again to resume from its checkpoint. More: docs/training.md.
"""
