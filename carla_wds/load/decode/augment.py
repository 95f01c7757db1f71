"""TCP's image augmenter (TCP/augment.py `hard`, from COiLTRAiNE) on uint8, with two fixes.

* Its strength ramps with `image_iteration`. TCP counts that per DataLoader worker copy, so the
  ramp depends on num_workers; here it is computed from the global training step the trainer
  sets (`image_iteration = global_step * batch_size * world_size`, the images seen so far).
* Randomness is seeded per (seed, epoch, sample key[, camera]), so an augmented epoch is
  reproducible and a resumed run sees the same pixels.
"""
from __future__ import annotations

import functools
from typing import Callable

import numpy as np

from ...rng import derive_seed

# The ramp changes the augmenter slowly; rebuilding it at most once per this many images seen
# keeps construction out of the per-sample path without visibly flattening the ramp.
RAMP_QUANTUM = 32 * 1000


@functools.lru_cache(maxsize=4)
def hard(image_iteration: int):
    """TCP's `hard` augmenter with its exact strength formulas."""
    from imgaug import augmenters as iaa
    iteration = image_iteration / 32
    frequency = min(0.05 + iteration / 200000.0, 1.0)
    color = min(iteration / 1000000.0, 1.0)
    dropout = 0.198667 + (0.03856658 - 0.198667) / (1 + (iteration / 196416.6) ** 1.863486)
    blur = min(0.5 + (0.5 * iteration / 100000.0), 1.0)
    add = 10 + 10 * iteration / 100000.0
    mul_pos, mul_neg = 1 + (2.5 * iteration / 200000.0), 1 - (0.91 * iteration / 500000.0)
    con_pos, con_neg = 1 + (0.5 * iteration / 500000.0), 1 - (0.5 * iteration / 500000.0)
    s = functools.partial(iaa.Sometimes, frequency)
    return iaa.Sequential([
        s(iaa.GaussianBlur((0, blur))),
        s(iaa.AdditiveGaussianNoise(loc=0, scale=(0.0, dropout), per_channel=color)),
        s(iaa.CoarseDropout((0.0, dropout), size_percent=(0.08, 0.2), per_channel=color)),
        s(iaa.Dropout((0.0, dropout), per_channel=color)),
        s(iaa.Add((-add, add), per_channel=color)),
        s(iaa.Multiply((mul_neg, mul_pos), per_channel=color)),
        s(iaa.contrast.LinearContrast((con_neg, con_pos), per_channel=color)),
        s(iaa.Grayscale((0.0, 1))),
    ], random_order=True)


def image_iteration(global_step: int, batch_size: int, world_size: int) -> int:
    seen = global_step * batch_size * world_size
    return seen - seen % RAMP_QUANTUM


def ramp(step_at_epoch_start: int, batch_size: int, world_size: int, num_workers: int,
         logical_worker: int) -> Callable[[int], int]:
    """A worker's stream position -> the augmenter's ramp position (the loader's augmenter,
    and a sample_transform's sample["augment_iteration"])."""
    w_count = max(1, num_workers)

    def iteration_of(pos: int) -> int:
        # The global step of the batch holding this position: the trainer's step, not a
        # per-worker counter (TCP's bug).
        step = step_at_epoch_start + (pos // batch_size) * w_count + logical_worker
        return image_iteration(step, batch_size, world_size)
    return iteration_of


def augment_cameras(images: list[np.ndarray], *, seed: int, epoch: int, key: str,
                    iteration: int, per_camera: bool) -> list[np.ndarray]:
    """Augment one sample's uint8 HWC camera images deterministically."""
    aug = hard(iteration)
    out = []
    for cam, img in enumerate(images):
        aug.seed_(derive_seed(seed, epoch, key, cam if per_camera else -1, "augment"))
        result = aug(image=img)
        assert result.dtype == np.uint8, "imgaug must keep uint8 (the seed's black-image bug)"
        out.append(result)
    return out
