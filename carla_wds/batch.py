"""Typed samples and batches: named fields instead of the seed's positional tuples."""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

import numpy as np
import torch

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


@dataclass
class CARLASample:
    """One decoded frame: uint8 camera images and float32 labels (numpy, worker side)."""
    key: str
    images: np.ndarray          # (n_cameras, 3, H, W) uint8 RGB, a view of (n, H, W, 3) memory
    speed: float                # m/s
    target_point: np.ndarray    # (2,) float32, ego frame
    command: np.ndarray         # (6,) float32 one-hot
    waypoints: np.ndarray       # (pred_len, 2) float32, ego frame (forward is -y)
    waypoints_diff: np.ndarray  # (pred_len, 2) float32
    meta: dict = field(default_factory=dict)
    valid: bool = True


@dataclass
class CARLABatch:
    """A batch of samples as tensors; `valid` is False for padding and skipped samples."""
    images: torch.Tensor          # (B, n_cameras, 3, H, W) uint8, channels-last in memory
    speed: torch.Tensor           # (B,) float32
    target_point: torch.Tensor    # (B, 2)
    command: torch.Tensor         # (B, 6)
    waypoints: torch.Tensor       # (B, pred_len, 2)
    waypoints_diff: torch.Tensor  # (B, pred_len, 2)
    keys: list[str]
    valid: torch.Tensor           # (B,) bool
    errors: list[str] = field(default_factory=list)   # why samples were skipped, if any

    def __len__(self) -> int:
        return len(self.keys)

    def _map(self, fn) -> "CARLABatch":
        return replace(self, **{f.name: fn(getattr(self, f.name)) for f in fields(self)
                                if isinstance(getattr(self, f.name), torch.Tensor)})

    def to(self, device: torch.device | str, non_blocking: bool = True) -> "CARLABatch":
        return self._map(lambda t: t.to(device, non_blocking=non_blocking))

    def pin_memory(self) -> "CARLABatch":
        # DataLoader(pin_memory=True) calls this on custom batch types.
        return self._map(lambda t: t.pin_memory())

    def normalized_images(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """ImageNet-normalised float images on this batch's device (the GPU in training)."""
        mean = torch.tensor(IMAGENET_MEAN, device=self.images.device, dtype=dtype).view(3, 1, 1)
        std = torch.tensor(IMAGENET_STD, device=self.images.device, dtype=dtype).view(3, 1, 1)
        return (self.images.to(dtype) / 255.0 - mean) / std


def empty_sample(n_cameras: int, image_size: tuple[int, int], pred_len: int) -> CARLASample:
    """A zero padding sample with valid=False (eval padding, skipped-sample fill)."""
    h, w = image_size
    z2 = np.zeros((pred_len, 2), np.float32)
    return CARLASample("", np.zeros((n_cameras, h, w, 3), np.uint8).transpose(0, 3, 1, 2), 0.0,
                       np.zeros(2, np.float32), np.zeros(6, np.float32), z2, z2.copy(),
                       valid=False)


def collate(samples: list[CARLASample], errors: list[str] | None = None) -> CARLABatch:
    """Stack samples into a batch; images are copied once into one uint8 array.

    The images keep HWC memory (a permuted view), so `flatten(0, 1)` of the batch is already
    channels_last for the encoder; call `.contiguous()` where NCHW memory is needed.
    """
    first = samples[0].images
    images = torch.empty((len(samples), first.shape[0], *first.shape[2:], first.shape[1]),
                         dtype=torch.uint8)
    if torch.utils.data.get_worker_info() is not None:
        # Allocated in shared memory up front: the DataLoader then sends it to the main process
        # as is, instead of copying the whole batch into shared memory once more.
        images.share_memory_()
    np.stack([s.images.transpose(0, 2, 3, 1) for s in samples], out=images.numpy())
    return CARLABatch(
        images=images.permute(0, 1, 4, 2, 3),
        speed=torch.tensor([s.speed for s in samples], dtype=torch.float32),
        target_point=torch.from_numpy(np.stack([s.target_point for s in samples])),
        command=torch.from_numpy(np.stack([s.command for s in samples])),
        waypoints=torch.from_numpy(np.stack([s.waypoints for s in samples])),
        waypoints_diff=torch.from_numpy(np.stack([s.waypoints_diff for s in samples])),
        keys=[s.key for s in samples],
        valid=torch.tensor([s.valid for s in samples], dtype=torch.bool),
        errors=list(errors or []),
    )
