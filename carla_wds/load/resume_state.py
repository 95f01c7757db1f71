"""A loader state's counters, checked before CARLAWebData.load_state_dict uses them (issue 38).

A state comes back from a checkpoint file, which anyone may edit: a negative or huge `consumed`
resumed a run that skipped or replayed a whole epoch's worth of batches, a negative step ramped
the augmenter from before the run began, and an absurd epoch or split sized the re-plan of a
resume in another split (reshape.py replays one plan per old rank and worker). Every counter must
be a whole number in its range; the message names the field, its value and the range.
"""
from __future__ import annotations

from typing import Any

# 10 million epochs: one a second for four months. A step is exact in a float64 up to 2^53.
MAX_EPOCH = 10 ** 7
MAX_STEP = 2 ** 53
# A resume in another split replays each old rank's and worker's plan (reshape.py): 65,536
# ranks and 1,024 workers a rank are past any cluster, and bound that replay.
MAX_WORLD_SIZE = 2 ** 16
MAX_WORKERS = 1024
# The old split's shuffle buffer, replayed on sample positions (no bytes) in a resume.
MAX_SHUFFLE_BUFFER = 10 ** 6
_FIX = ("Fix: resume from a state that CARLAWebData.state_dict() wrote (the checkpoint "
        "carla-wds train wrote), or start afresh")
_RESHAPE = ("world_size", "num_workers", "consumed", "shuffle_buffer")


def _whole(where: str, name: str, value: Any, lo: int, hi: int, what: str = "") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ValueError(f"cannot resume: the loader state's {where}{name}={value!r} is invalid: "
                         f"expected a whole number from {lo:,} to {hi:,}{what}. {_FIX}")
    return value


def check_counters(state: Any) -> None:
    """ValueError naming the field unless every counter of `state` is a whole number in its
    range; `consumed` is held to its epoch's length later (check_consumed), once it is known."""
    if not isinstance(state, dict):
        raise ValueError(f"cannot resume: the loader state is a {type(state).__name__}, not the "
                         f"dict CARLAWebData.state_dict() returns. {_FIX}")
    _whole("", "epoch", state.get("epoch"), 0, MAX_EPOCH)
    _whole("", "consumed", state.get("consumed"), 0, MAX_STEP, " (batches of its epoch)")
    _whole("", "step_at_epoch_start", state.get("step_at_epoch_start"), 0, MAX_STEP)
    for name, hi, lo in (("world_size", MAX_WORLD_SIZE, 1), ("num_workers", MAX_WORKERS, 0),
                         ("shuffle_buffer", MAX_SHUFFLE_BUFFER, 0)):
        if state.get(name) is not None:   # older states lack them
            _whole("", name, state[name], lo, hi)
    reshape = state.get("reshape")
    if reshape is None:
        return
    if not isinstance(reshape, dict) or sorted(reshape) != sorted(_RESHAPE):
        raise ValueError(f"cannot resume: the loader state's reshape is {reshape!r:.200}: "
                         f"expected null or a mapping of {', '.join(_RESHAPE)}. {_FIX}")
    _whole("reshape.", "world_size", reshape["world_size"], 1, MAX_WORLD_SIZE)
    _whole("reshape.", "num_workers", reshape["num_workers"], 0, MAX_WORKERS)
    _whole("reshape.", "consumed", reshape["consumed"], 0, MAX_STEP)
    _whole("reshape.", "shuffle_buffer", reshape["shuffle_buffer"], 0, MAX_SHUFFLE_BUFFER)


def check_consumed(state: dict[str, Any], batches: int, split: tuple[int, int]) -> None:
    """`consumed` within the `batches` of its epoch for the (world_size, num_workers) it was
    saved in; at `batches` the epoch was whole."""
    _whole("", "consumed", state["consumed"], 0, batches,
           f" (the batches of epoch {state['epoch']} for world_size {split[0]}, num_workers "
           f"{split[1]})")
