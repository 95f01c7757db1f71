"""adapter="b2d_tcp": the batches of Bench2DriveZoo's TCP port's own DataLoader(CARLA_Data) after
torch's default collate (Thinklab-SJTU/Bench2DriveZoo, branch tcp/admlp, commit 31278ff,
TCP/data.py CARLA_Data.__getitem__ over tools/gen_tcp_data.py's data), as its TCP/train.py
training_step and validation_step read them. Checked against their loader's output in
tests/load/adapters/test_b2d_tcp_model.py (golden: tools/golden/b2d_tcp_batches.py).

Each key, in their order (B = batch size, F = the expert feature's length):
- front_img float32 (B, 3, 256, 900): their 3-camera stitch (data.py l.137-144): columns
  :1400 of front_left, 200:1400 of front, 200: of front_right, side by side (B2D's 1600-wide
  cameras give 4000 columns), as float, bilinear to 256x900 (F.interpolate, align_corners
  False), truncated back to uint8 (`.byte()`), then ToTensor + ImageNet Normalize (TCP's).
- waypoints float64 (B, 4, 2): the frames t + 5k in the frame of t, their left-handed
  rotation by theta - pi/2 (the pack's, --handedness left, a NaN compass as 0).
- action float32 (B, 3): (throttle, steer, brake) of the expert action index (their
  get_action table, float32 as they build it); action_index int64 (B,).
- future_action_index: list of 4 int64 (B,) (the expert files t + 5k, k = 1..4);
  future_feature: list of 4 float32 (B, F) (those files without their last two values).
- target_point float64 (B, 2); speed float64 (B,); feature float32 (B, F); value: the expert
  file's value as their numpy float32 scalar; target_command int64 (B, 6): the one-hot of
  next_command - 1 (VOID as LANEFOLLOW).
With augment=True (train mode): their colour augmentation, TCP/augment.py `hard` (TCP's, the
same formulas: load/decode/augment.py), on the stitched uint8 256x900 image before the normalisation,
as their `augmenter(...).augment_image(front_img)`; the loader's own augmenter stays off
(own_augment). Seeded from the sample's generator. Its strength ramp follows the trainer's
global step as the loader's own augmenter does (theirs counts each worker copy's reads).
"""
from __future__ import annotations

import threading

import numpy as np
import torch
import torch.nn.functional as F

from ...manifest import Manifest
from ..decode.augment import hard
from .model import ModelAdapter
from .tcp import tcp_image

# B2D's camera size (H, W) and their stitch (TCP/data.py l.137-141): column slices of the
# front_left, front and front_right images, in that order, and the size they are resized to
CAMERAS = ("front_left", "front", "front_right")
CAMERA_HW = (900, 1600)
STITCH = (slice(None, 1400), slice(200, 1400), slice(200, None))
OUT_HW = (256, 900)
FUTURE_FRAMES = [5, 10, 15, 20]   # gen_tcp_data.py: full_seq_*[i + 5 : i + 25 : 5]
NEEDS = ("expert_value", "expert_action", "action_throttle", "action_steer", "action_brake",
         "future_expert_action", "next_command")
PACK = ("carla-wds pack RAW OUT --layout bench2drive --stride 1 --expert-pairing tcp_port "
        "(the port's every-frame samples, expert file t; keep expert in --sensors)")


_WIDE = threading.local()   # per thread: its float stitch tensors, by (H, W)


def _wide(height: int, width: int) -> torch.Tensor:
    """A reused float32 (1, 3, H, W) tensor with their `.float()`'s exact strides: that of
    `from_numpy(hwc).permute(2, 0, 1).unsqueeze(0)`, (3, 1, 3W, 3), so F.interpolate takes
    the same kernel and memory format and gives the same bits. Reused: a fresh 43 MB tensor
    per sample cost its page faults, the largest item of the port's loader and of ours."""
    mine = _WIDE.__dict__.setdefault("by_size", {})
    buf = mine.get((height, width))
    if buf is None:   # numpy's memory: it asks for huge pages (21 faults, not 10,500)
        flat = torch.from_numpy(np.empty(height * width * 3, np.float32))
        buf = mine[(height, width)] = flat.as_strided((1, 3, height, width),
                                                      (3, 1, 3 * width, 3))
    return buf


def stitch(left: np.ndarray, front: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Their stitched front image, uint8 HWC (256, 900, 3): the three crops side by side,
    as float32 (each crop converted straight into its columns: uint8 -> float32 is exact, so
    no concatenated copy first), bilinear to 256x900, truncated to uint8 as their `.byte()`
    does."""
    crops = [img[:, cols] for img, cols in zip((left, front, right), STITCH)]
    wide = _wide(crops[0].shape[0], sum(c.shape[1] for c in crops))
    hwc, x0 = wide[0].permute(1, 2, 0), 0
    for crop in crops:
        hwc[:, x0:x0 + crop.shape[1]].copy_(torch.from_numpy(crop))
        x0 += crop.shape[1]
    x = F.interpolate(wide, size=OUT_HW, mode="bilinear", align_corners=False)
    return x.squeeze(0).permute(1, 2, 0).byte().numpy()


def front_img(s: dict, rng: np.random.Generator) -> torch.Tensor:
    """Their front_img: the stitch, their `hard` colour augmentation with sample["augment"]
    (its ramp at sample["augment_iteration"], seeded from the sample's generator), TCP's
    normalisation."""
    image = stitch(*s["images"])
    if s.get("augment"):
        aug = hard(int(s.get("augment_iteration", 0)))
        aug.seed_(int(rng.integers(2 ** 31)))
        image = aug(image=image)
    return tcp_image(image)


def command_one_hot(command: np.ndarray) -> torch.Tensor:
    """Their target_command: an int64 one-hot of 6 (the pack's one-hot of next_command,
    VOID already counted as LANEFOLLOW as their `if command < 0: command = 4` does)."""
    return torch.tensor(np.asarray(command).astype(np.int64))


def b2d_tcp_sample(adapter: ModelAdapter, s: dict, rng: np.random.Generator) -> dict:
    """One sample as the port's CARLA_Data.__getitem__ returns it (module docstring), key for
    key in its order and Python/numpy types, so default collate gives their batch."""
    m, f, n = s["measurements"], s["fields"], adapter.pred_len
    future = np.asarray(f["future_expert_feature"], np.float32)
    actions = np.asarray(m["future_expert_action"])
    return {"front_img": front_img(s, rng),
            "waypoints": np.asarray(s["waypoints"], np.float64),
            "action": np.array([m["action_throttle"], m["action_steer"], m["action_brake"]],
                               np.float32),
            "action_index": int(m["expert_action"]),
            "future_action_index": [int(actions[i]) for i in range(n)],
            "future_feature": [future[i].copy() for i in range(n)],
            "target_point": np.asarray(s["target_point"], np.float64),
            "speed": float(s["speed"]),
            "feature": np.asarray(f["expert_feature"], np.float32).copy(),
            "value": np.float32(m["expert_value"]),
            "target_command": command_one_hot(s["command"])}


class B2DTCPAdapter(ModelAdapter):
    """The port's pack settings, checked first: every 10 Hz frame (--stride 1), expert file t
    for frame t (--expert-pairing tcp_port), the expert's labels (--sensors expert), the
    future expert files t + 5..20, left-handed labels (their frame)."""

    def check(self, manifest: Manifest) -> None:
        spec = manifest.doc.get("spec") or {}
        record = {f.name for e in manifest.spec.extras if e.codec == "record"
                  for f in e.fields or ()}
        # a pack without the expert is refused below by the record fields it lacks
        if manifest.doc.get("layout") in self.layouts and set(self.needs) <= record:
            wrong = [f"{what} {spec.get(key)!r} (needs {want!r})" for key, want, what in (
                ("stride", 1, "--stride"), ("expert_file_offset", 0, "expert file offset"),
                ("handedness", "left", "--handedness"),
                ("future_expert_frames", FUTURE_FRAMES, "future expert frames"))
                if spec.get(key) != want]
            if spec.get("future_labels") == "masked":   # zero-filled futures: not the port's
                wrong.append("--future-labels 'masked' (its waypoints past a clip's end are "
                             "zeros; needs full futures: leave the option out)")
            if wrong:
                self._refuse(manifest.where, "were packed with " + ", ".join(wrong))
        super().check(manifest)


B2D_TCP = B2DTCPAdapter(
    name="b2d_tcp", source="Thinklab-SJTU/Bench2DriveZoo@31278ff (tcp/admlp) TCP/data.py",
    layouts=("bench2drive",), image_size=CAMERA_HW, transform=b2d_tcp_sample,
    cameras=CAMERAS, fields=("measurements", "expert_feature", "future_expert_feature"),
    needs=NEEDS, pred_len=4, strides=(1,), pack=PACK, own_augment=True)
