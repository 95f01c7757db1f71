"""TCP in the loader: its brake override (a load adapter) and adapter="tcp" (model-ready).

TCP's brake override (OpenDriveLab/TCP TCP/data.py): where only the rule-based detector
braked (`only_ap_brake`), the acceleration Beta's (alpha, beta) of the current action and each
future step are set to 0.8 / 5.5, "the average value of roach braking action".

The manifest asks for it by name (spec.transforms, recorded by the tcp_roach layout); the
caller's option (`adapters={"tcp_brake_override": False}`, or the older `brake_override=`)
overrides the manifest's choice.

adapter="tcp" (below): the batches of TCP's own DataLoader(CARLA_Data) after default collate,
checked against their loader's output in tests/load/adapters/test_tcp_model.py.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ...datasets.tcp import BRAKE_MU, BRAKE_OVERRIDE, BRAKE_SIGMA
from ...schema import SampleSpec
from .base import LoadAdapter
from .model import ModelAdapter

# the manifest's spec.transforms word (shard format: unchanged), and TCP/data.py's values for
# index 0 of action_mu / action_sigma, the acceleration Beta's (alpha, beta): the registry's
NAME, TCP_BRAKE_MU, TCP_BRAKE_SIGMA = BRAKE_OVERRIDE, BRAKE_MU, BRAKE_SIGMA


def brake_override(values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """TCP's override on copies: mu/sigma[..., 0] = 0.8/5.5 where only_ap_brake, for the
    current action and each future step."""
    out = dict(values)
    for prefix in ("", "future_"):
        flag, mu, sigma = (values.get(f"{prefix}{n}") for n in
                           ("only_ap_brake", "action_mu", "action_sigma"))
        if flag is None or mu is None or sigma is None:
            continue
        mu, sigma, flag = mu.copy(), sigma.copy(), np.asarray(flag, bool)
        mu[..., 0] = np.where(flag, TCP_BRAKE_MU, mu[..., 0])
        sigma[..., 0] = np.where(flag, TCP_BRAKE_SIGMA, sigma[..., 0])
        out[f"{prefix}action_mu"], out[f"{prefix}action_sigma"] = mu, sigma
    return out


@dataclass(frozen=True)
class BrakeOverride(LoadAdapter):
    name: str = NAME

    def on_record(self, values: dict[str, Any]) -> dict[str, Any]:
        return brake_override(values)


class BrakeOverrideKind:
    """Applies where the manifest asks for it, unless the caller says otherwise (a bool)."""
    name, keyword = NAME, "brake_override"

    def build(self, spec: SampleSpec, option: Any) -> LoadAdapter | None:
        on = NAME in spec.transforms if option is None else bool(option)
        return BrakeOverride() if on else None


# --- adapter="tcp": the batches of TCP's own DataLoader(CARLA_Data) (TCP@73cc1dd TCP/data.py)

# T.Normalize's ImageNet statistics in TCP/data.py's _im_transform, as float32 tensors
_MEAN = torch.tensor((0.485, 0.456, 0.406), dtype=torch.float32).view(-1, 1, 1)
_STD = torch.tensor((0.229, 0.224, 0.225), dtype=torch.float32).view(-1, 1, 1)
TCP_NEEDS = ("action", "action_mu", "action_sigma", "feature", "value", "future_action_mu",
             "future_action_sigma", "future_feature")


def tcp_image(hwc: np.ndarray) -> torch.Tensor:
    """TCP's _im_transform (T.ToTensor then T.Normalize) on one uint8 HWC image, in the same
    float32 operations, so the result is bit-identical: CHW, /255, (x - mean) / std. One
    float32 tensor, written by the uint8 -> float32 copy and then in place (0.45 ms against
    0.72 ms for a contiguous uint8 copy first and a new tensor per step, 256x900, 1 thread)."""
    chw = torch.empty((hwc.shape[2], *hwc.shape[:2]), dtype=torch.float32)
    chw.copy_(torch.from_numpy(hwc).permute(2, 0, 1))
    return chw.div_(255).sub_(_MEAN).div_(_STD)


def tcp_sample(adapter: ModelAdapter, s: dict, rng: np.random.Generator) -> dict:
    """One sample as TCP's CARLA_Data.__getitem__ returns it, key for key, in its order and
    Python/numpy types, so torch's default collate gives their batch: float64 where they
    compute in numpy float64 (waypoints, target points) or read a JSON float (speed); lists of
    pred_len arrays for future_*; the one-hot command as an int64 tensor. The waypoints and
    target point are the pack's (TCP's frame, its formulas; stored float32). target_point is
    target_point_aim in their code (data.py sets it twice, the second time to the aim point).
    Their colour augmentation runs before this, on uint8, with augment=True (load/decode/augment.py).
    Their brake override is the load adapter above (on_record)."""
    m, n = s["measurements"], adapter.pred_len
    aim = np.asarray(s["target_point"], np.float64)
    return {"front_img": tcp_image(s["images"][0]),
            "waypoints": np.asarray(s["waypoints"], np.float64),
            "action": np.array(m["action"]), "action_mu": np.array(m["action_mu"]),
            "action_sigma": np.array(m["action_sigma"]),
            "future_action_mu": [np.array(m["future_action_mu"][i]) for i in range(n)],
            "future_action_sigma": [np.array(m["future_action_sigma"][i]) for i in range(n)],
            "future_feature": [np.array(m["future_feature"][i]) for i in range(n)],
            "target_point": aim, "target_point_aim": aim.copy(),
            "speed": float(s["speed"]), "feature": np.array(m["feature"]),
            "value": np.float32(m["value"]),
            "target_command": torch.tensor(np.asarray(s["command"]).astype(np.int64))}


TCP = ModelAdapter(
    name="tcp", source="OpenDriveLab/TCP@73cc1dd TCP/data.py", layouts=("tcp_roach",),
    image_size=(256, 900), transform=tcp_sample, cameras=("front",), fields=("measurements",),
    needs=TCP_NEEDS, pred_len=4, load_adapters=((NAME, True),),
    pack="carla-wds pack RAW OUT --layout tcp_roach --allow-pickle-input (TCP's routes with "
         "their Roach supervision/*.npy)")
