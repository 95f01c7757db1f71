"""Rank and world size, and distributed setup: the one place that knows about torch.distributed."""
from __future__ import annotations

import logging
import os
from datetime import timedelta

log = logging.getLogger(__name__)


def rank_world(rank: int | None = None, world_size: int | None = None) -> tuple[int, int]:
    """Explicit values, else the initialised process group, else RANK/WORLD_SIZE, else 0/1."""
    if rank is not None and world_size is not None:
        r, w = rank, world_size
    else:
        r, w = _group_rank_world()
        r = r if rank is None else rank
        w = w if world_size is None else world_size
    if not 0 <= r < w:
        raise ValueError(f"rank {r} is outside world_size {w}; expected 0 <= rank < world_size")
    return r, w


def _group_rank_world() -> tuple[int, int]:
    try:
        import torch.distributed as tdist
        if tdist.is_available() and tdist.is_initialized():
            return tdist.get_rank(), tdist.get_world_size()
    except ImportError:
        pass
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


def setup(device: str = "auto") -> tuple[str, int, int]:
    """Initialise the process group when launched by torchrun; returns (device, rank, world).

    nccl on CUDA, gloo on CPU. A plain `python -m` run stays single-process.
    """
    import torch
    import torch.distributed as tdist
    use_cuda = torch.cuda.is_available() if device == "auto" else device.startswith("cuda")
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    dev = f"cuda:{local_rank}" if use_cuda else "cpu"
    if use_cuda:
        torch.cuda.set_device(local_rank)
    if int(os.environ.get("WORLD_SIZE", 1)) > 1 and not tdist.is_initialized():
        tdist.init_process_group("nccl" if use_cuda else "gloo", timeout=timedelta(minutes=10))
    rank, world = rank_world()
    return dev, rank, world


def cleanup(barrier: bool = True) -> None:
    """Tear the process group down; after success, all ranks leave together.

    A rank tearing gloo down while a peer still talked to it was seen to abort ("terminate
    called without an active exception"). After a failure there is no barrier: the other ranks
    may be stuck in another collective, and torchrun stops them.
    """
    import torch.distributed as tdist
    if tdist.is_initialized():
        if barrier:
            tdist.barrier()
        tdist.destroy_process_group()
