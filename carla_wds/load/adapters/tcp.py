"""TCP's brake override (OpenDriveLab/TCP TCP/data.py): where only the rule-based detector
braked (`only_ap_brake`), the acceleration Beta's (alpha, beta) of the current action and each
future step are set to 0.8 / 5.5, "the average value of roach braking action".

The manifest asks for it by name (spec.transforms, recorded by the tcp_roach layout); the
caller's option (`adapters={"tcp_brake_override": False}`, or the older `brake_override=`)
overrides the manifest's choice.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ...datasets.tcp import BRAKE_MU, BRAKE_OVERRIDE, BRAKE_SIGMA
from ...schema import SampleSpec
from .base import LoadAdapter

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
