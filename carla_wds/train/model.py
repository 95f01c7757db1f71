"""Camera + measurement waypoint model with an autoregressive GRU decoder.

This generalises the trajectory branch of TCP (OpenDriveLab/TCP) to any number
of cameras and any prediction horizon: a shared image encoder, a small
measurement MLP, a join MLP that initialises a GRU hidden state, and a GRUCell
that emits one waypoint delta per step.

With `prior: constant_velocity` (the default) those deltas are residuals on top of the
straight-line, current-speed extrapolation (frames.straight_ahead, the baseline eval reports).
The residual head starts at zero, so an untrained model predicts exactly the baseline and
training only has to learn the corrections; `prior: none` is TCP's original formulation.
Optional inputs, off by default: a LiDAR BEV histogram through a small CNN whose features join
the cameras', and extra measurement values joining speed, target point and command.

With history windows (data.history=K > 0, issue 27) the model also sees each sample's K earlier
frames (`Past`): see WaypointModel.pool_past. At history=0 the model, its parameters and its
outputs are exactly those of the single-frame model.

Waypoints are in the frame of the shards' labels (TCP's: x lateral, forward -y; garage's:
x forward), which the prior needs to know which way is ahead.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import torch
from torch import Tensor, nn

from ..datasets import lidar_presets
from ..schema import N_COMMANDS
from .bounds import MAX_CAMERAS, MAX_FEATURE_DIM, MAX_PRED_LEN
from .frames import DEFAULT_FRAME, canonical, straight_ahead
from .settings import setting

logger = logging.getLogger(__name__)

VALID_BACKBONES: tuple[str, ...] = ("resnet34", "resnet18", "tiny")
PRIORS: tuple[str, ...] = ("constant_velocity", "none")
# the LiDAR histogram presets the dataset registry holds (carla_wds.datasets.lidar_presets)
LIDAR_PRESETS: tuple[str, ...] = tuple(sorted(lidar_presets()))
RESNET_BACKBONES: tuple[str, ...] = ("resnet34", "resnet18")

# CARLA speeds in urban driving rarely exceed ~12 m/s; TCP divides by 12 so the
# speed input is O(1) like the other measurement inputs.
SPEED_SCALE: float = 12.0
# Positions (target point, previous waypoint) reach 20-30 m. TCP feeds them raw, which saturates
# the GRU gates early on; dividing the network's position INPUTS by 10 m (outputs stay in metres)
# cut the tiny model's training loss after 250 steps from 1.05 to 0.48 on synthetic data
# (measured before the join lost its Tanh; see WaypointModel).
POSITION_SCALE: float = 10.0
MEASUREMENT_DIM: int = 1 + 2 + N_COMMANDS
_MEAS_HIDDEN: int = 128
_JOIN_HIDDEN: int = 512


@dataclass
class ModelConfig:
    backbone: str = setting("resnet34", choices=VALID_BACKBONES,
                            doc="tiny: a small CNN for CPU tests")
    # a LOCAL torchvision state_dict (.pth), never downloaded
    pretrained: str | None = setting(None, nonempty=True)
    feature_dim: int = setting(256, ge=1, le=MAX_FEATURE_DIM, doc="the GRU's hidden size")
    dropout: float = setting(0.0, ge=0, lt=1)
    prior: str = setting("constant_velocity", choices=PRIORS,
                         doc="constant_velocity: residuals on the straight-line baseline; "
                             "none: plain deltas, the original formulation")
    lidar: str | None = setting(None, choices=LIDAR_PRESETS,
                                doc="a LiDAR BEV branch on that project's histogram; null: off")
    measurements: list[str] = setting(default_factory=list, unique=True,
                                      doc="extra inputs: names in the shards' measurements")

    def cross_checks(self) -> list[tuple[str, str]]:
        if self.pretrained is not None and self.backbone not in RESNET_BACKBONES:
            return [("pretrained", f"pretrained weights are for {', '.join(RESNET_BACKBONES)}, "
                     f"not backbone {self.backbone}. Fix: model.pretrained=null, or a ResNet "
                     "backbone")]
        return []


class TinyEncoder(nn.Module):
    """~100k-parameter CNN so tests and CPU smoke runs stay fast."""

    def __init__(self, widths: tuple[int, ...] = (16, 32, 64, 128), in_channels: int = 3) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        c_in = in_channels
        for c_out in widths:
            # bias is redundant before BatchNorm
            layers += [
                nn.Conv2d(c_in, c_out, 3, stride=2, padding=1, bias=False),
                nn.BatchNorm2d(c_out),
                nn.ReLU(inplace=True),
            ]
            c_in = c_out
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.out_dim = c_in

    def forward(self, x: Tensor) -> Tensor:
        return torch.flatten(self.pool(self.features(x)), 1)


def _build_resnet(name: str) -> nn.Module:
    import torchvision

    # weights=None: we never download; pretrained weights come from a local file.
    net = getattr(torchvision.models, name)(weights=None)
    net.out_dim = net.fc.in_features
    net.fc = nn.Identity()
    return net


def _build_encoder(backbone: str) -> nn.Module:
    if backbone == "tiny":
        return TinyEncoder()
    if backbone in RESNET_BACKBONES:
        return _build_resnet(backbone)
    raise ValueError(
        f"unknown backbone {backbone!r}; valid backbones are: {', '.join(VALID_BACKBONES)}"
    )


def _preview(keys: list[str], n: int = 5) -> str:
    shown = ", ".join(keys[:n])
    return shown + (f", ... ({len(keys) - n} more)" if len(keys) > n else "")


def load_pretrained_backbone(encoder: nn.Module, path: str | Path, backbone: str) -> None:
    """Load a local torchvision ResNet state_dict into ``encoder`` (fc.* keys ignored)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"pretrained backbone weights not found: {path}. Fix: on a machine with internet run "
            f"`torch.save(torchvision.models.{backbone}(weights='DEFAULT').state_dict(), '{path.name}')`"
            f" and copy the file to {path}, or set model.pretrained to null to train from scratch."
        )
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # corrupt file, or a pickled nn.Module that weights_only refuses
        raise ValueError(f"could not read {path} as a weights-only state_dict: {exc}") from exc
    if not isinstance(state, Mapping):
        raise ValueError(f"{path} does not contain a state_dict (got {type(state).__name__})")
    # The classifier head is replaced by Identity, so its weights have no home.
    state = {k: v for k, v in state.items() if not k.startswith("fc.")}
    expected = set(encoder.state_dict())
    missing = sorted(expected - state.keys())
    unexpected = sorted(state.keys() - expected)
    if missing or unexpected:
        raise ValueError(
            f"{path} does not match torchvision {backbone}: "
            f"{len(missing)} missing keys [{_preview(missing)}], "
            f"{len(unexpected)} unexpected keys [{_preview(unexpected)}]. "
            f"Is it a plain torchvision {backbone} state_dict (no 'module.' prefix, no wrapper dict)?"
        )
    try:
        encoder.load_state_dict(state, strict=True)
    except RuntimeError as exc:  # shape mismatches, e.g. resnet18 vs resnet34 blocks
        raise ValueError(f"{path} has incompatible tensors for {backbone}: {exc}") from exc
    logger.info("loaded pretrained %s backbone from %s", backbone, path)


def _image_encoder(cfg: ModelConfig) -> nn.Module:
    encoder = _build_encoder(cfg.backbone)
    if cfg.pretrained is not None:
        if cfg.backbone not in RESNET_BACKBONES:
            raise ValueError(
                f"pretrained weights are only supported for {RESNET_BACKBONES}, "
                f"not backbone {cfg.backbone!r}; set pretrained to null"
            )
        load_pretrained_backbone(encoder, cfg.pretrained, cfg.backbone)
    return encoder


@dataclass(frozen=True)
class ModelIO:
    """What the data decides about the model besides cameras and horizon: the waypoints'
    frame and frame interval (for the prior), extra measurement values, LiDAR channels."""
    frame: str = DEFAULT_FRAME
    frame_dt: float = 0.5
    extra_dim: int = 0
    lidar_channels: int = 0
    extra_scales: tuple[float, ...] = ()   # one divisor per model.measurements name
    history: int = 0                       # data.history: earlier frames per sample

    def __post_init__(self) -> None:
        canonical(self.frame)
        if self.frame_dt <= 0 or min(self.extra_dim, self.lidar_channels, self.history) < 0:
            raise ValueError(f"bad model inputs: {self}")


class Past(NamedTuple):
    """A window's earlier frames, oldest first (CARLAWebData(history=K), load/stream/history.py)."""
    images: Tensor   # (B, K, n_cameras, 3, H, W) float, normalised as the current frame's
    speed: Tensor    # (B, K) m/s
    valid: Tensor    # (B, K) bool, the batch's frame_valid: False for padding steps


def _check_sizes(cfg: ModelConfig, n_cameras: int, pred_len: int) -> None:
    if not (1 <= n_cameras <= MAX_CAMERAS and 1 <= pred_len <= MAX_PRED_LEN):
        raise ValueError(f"{n_cameras} cameras, {pred_len} waypoints: expected 1 to {MAX_CAMERAS}"
                         f", 1 to {MAX_PRED_LEN}. Fix: fewer cameras (data.cameras)")
    if not 1 <= cfg.feature_dim <= MAX_FEATURE_DIM or not 0.0 <= cfg.dropout < 1.0:
        raise ValueError(f"bad feature_dim/dropout: {cfg.feature_dim}, {cfg.dropout}")


class WaypointModel(nn.Module):
    """Multi-camera images + (speed, target point, command[, LiDAR, extras]) -> waypoints."""

    def __init__(self, cfg: ModelConfig, n_cameras: int, pred_len: int,
                 io: ModelIO | None = None) -> None:
        super().__init__()
        _check_sizes(cfg, n_cameras, pred_len)
        self.cfg = cfg
        self.io = io or ModelIO()
        self.n_cameras = n_cameras
        self.pred_len = pred_len

        self.encoder = _image_encoder(cfg)
        enc_dim: int = self.encoder.out_dim
        # TransFuser-style BEV input, but a small CNN of its own: the histogram is 1-2 planes
        # of counts, nothing an ImageNet stem was trained on.
        self.lidar_encoder = (TinyEncoder(in_channels=self.io.lidar_channels)
                              if self.io.lidar_channels else None)
        lidar_dim = self.lidar_encoder.out_dim if self.lidar_encoder is not None else 0

        # Fusion by concatenation: camera slots are fixed (front/left/right/...),
        # so the position in the concatenated vector already identifies the
        # camera; a Linear over it learns per-camera weighting with no extra
        # embedding machinery and keeps the 1-camera case a plain projection.
        self.fuse = nn.Sequential(
            nn.Linear(n_cameras * enc_dim + lidar_dim, cfg.feature_dim),
            nn.ReLU(inplace=True),
            nn.Dropout(cfg.dropout),
        )
        self.measurements = nn.Sequential(
            nn.Linear(MEASUREMENT_DIM + self.io.extra_dim, _MEAS_HIDDEN),
            nn.ReLU(inplace=True),
            nn.Linear(_MEAS_HIDDEN, _MEAS_HIDDEN),
            nn.ReLU(inplace=True),
        )
        # ReLU as in TCP. A Tanh here (tried first) saturated and held the tiny model at the
        # mean trajectory for 160+ steps on 2 of 2 seeds; ReLU left it by step ~80 on both.
        self.join = nn.Sequential(
            nn.Linear(cfg.feature_dim + _MEAS_HIDDEN, _JOIN_HIDDEN),
            nn.ReLU(inplace=True),
            nn.Dropout(cfg.dropout),
            nn.Linear(_JOIN_HIDDEN, cfg.feature_dim),
            nn.ReLU(inplace=True),
        )
        if self.io.history:   # only then: a history=0 model keeps its parameters as they were
            self.past_frames = nn.Linear(n_cameras * enc_dim + 1, cfg.feature_dim)
            self.step_embedding = nn.Parameter(torch.zeros(self.io.history, cfg.feature_dim))
        self.decoder = nn.GRUCell(input_size=4, hidden_size=cfg.feature_dim)
        self.output = nn.Linear(cfg.feature_dim, 2)
        if cfg.prior != "none":
            # zero residuals: the untrained model is the prior, so small data starts from the
            # baseline's error instead of a random trajectory's
            nn.init.zeros_(self.output.weight)
            nn.init.zeros_(self.output.bias)

    def _check_inputs(self, images: Tensor, speed: Tensor, target_point: Tensor, command: Tensor,
                      lidar: Tensor | None, extra: Tensor | None) -> None:
        if images.dim() != 5 or images.shape[1] != self.n_cameras or images.shape[2] != 3:
            raise ValueError(
                f"images must be (B, {self.n_cameras}, 3, H, W), got {tuple(images.shape)}"
            )
        b = images.shape[0]
        if speed.numel() != b:
            raise ValueError(f"speed must be (B,)=({b},), got {tuple(speed.shape)}")
        if tuple(target_point.shape) != (b, 2):
            raise ValueError(f"target_point must be ({b}, 2), got {tuple(target_point.shape)}")
        if tuple(command.shape) != (b, N_COMMANDS):
            raise ValueError(f"command must be ({b}, {N_COMMANDS}) one-hot, got {tuple(command.shape)}")
        c = self.io.lidar_channels
        if (lidar is None) != (c == 0) or (lidar is not None and (
                lidar.dim() != 4 or tuple(lidar.shape[:2]) != (b, c))):
            raise ValueError(f"lidar must be a ({b}, {c}, H, W) histogram" if c else
                             "this model has no LiDAR branch (model.lidar=null); got lidar")
        e = self.io.extra_dim
        if (extra is None) != (e == 0) or (extra is not None and tuple(extra.shape) != (b, e)):
            raise ValueError(f"extra measurements must be ({b}, {e}), got "
                             f"{None if extra is None else tuple(extra.shape)}")

    def _check_past(self, images: Tensor, past: Past | None) -> None:
        b, k = images.shape[0], self.io.history
        want = (f"past=Past(images ({b}, {k}, {self.n_cameras}, 3, H, W), speed ({b}, {k}), "
                f"valid ({b}, {k}))")
        if past is None and k:
            raise ValueError(f"this model was built with history={k} (data.history): pass {want}")
        if past is not None and not k:
            raise ValueError("this model was built with history=0 (data.history=0), but got "
                             "past frames. Fix: build it with ModelIO(history=K), or pass past=None")
        if past is not None and (past.images.shape[:3] != (b, k, self.n_cameras)
                                 or past.images.shape[3:] != images.shape[2:]
                                 or past.speed.shape != (b, k) or past.valid.shape != (b, k)):
            raise ValueError(f"past frames must be {want} with the current frame's H, W; got "
                             f"images {tuple(past.images.shape)}, speed "
                             f"{tuple(past.speed.shape)}, valid {tuple(past.valid.shape)}")

    def encode_images(self, images: Tensor) -> Tensor:
        """(B, N, 3, H, W) -> (B, N * enc_dim); one encoder shared by all cameras."""
        b, n = images.shape[:2]
        x = images.flatten(0, 1)
        stem = next(self.encoder.parameters())
        if stem.is_contiguous(memory_format=torch.channels_last) and not stem.is_contiguous():
            # Match the weights' layout so convs don't convert on every call.
            x = x.contiguous(memory_format=torch.channels_last)
        return self.encoder(x).reshape(b, n * self.encoder.out_dim)

    def encode_frames(self, images: Tensor, past: Past | None) -> tuple[Tensor, Tensor | None]:
        """The current frames' camera features (B, N * enc_dim), and the past frames' (B, K,
        N * enc_dim), zeros at padding steps. The current and the real past frames go through
        the shared encoder in one call; padding never does (no compute spent on it, and no
        zero images in BatchNorm's batch statistics)."""
        if past is None:
            return self.encode_images(images), None
        b = images.shape[0]
        enc = self.encode_images(torch.cat([images, past.images[past.valid]]))
        feats = enc.new_zeros(b, self.io.history, enc.shape[1])
        feats[past.valid] = enc[b:]
        return enc[:b], feats

    def pool_past(self, feats: Tensor, past: Past) -> Tensor:
        """(B, K, N * enc_dim) past features -> (B, feature_dim), added to the current frame's
        fused features.

        Each past step's camera features and speed go through one shared projection plus a
        learned embedding of the step's age, then a mean over the window's real steps
        (frame_valid): the embedding keeps the order a plain mean would lose, the mean gives
        windows with few real frames (a route's first frames, a gap) the same scale as full
        ones, and padding steps add nothing. The speed history is there because it carries
        the acceleration the constant-velocity prior cannot see."""
        speed = past.speed.to(feats.dtype)[..., None] / SPEED_SCALE
        steps = torch.relu(self.past_frames(torch.cat([feats, speed], dim=-1))
                           + self.step_embedding)
        weight = past.valid.to(steps.dtype)[..., None]
        return (steps * weight).sum(dim=1) / weight.sum(dim=1).clamp(min=1)

    def forward(self, images: Tensor, speed: Tensor, target_point: Tensor, command: Tensor,
                lidar: Tensor | None = None, extra: Tensor | None = None,
                past: Past | None = None) -> Tensor:
        """images: (B, n_cameras, 3, H, W) float, already ImageNet-normalised; speed (B,) m/s;
        target_point (B, 2); command (B, 6) one-hot; lidar (B, C, H, W) histogram and extra
        (B, extra_dim) scaled measurements when the model has them; past: the K earlier
        frames when the model has history K. Returns waypoints (B, pred_len, 2) in the
        labels' ego frame."""
        self._check_inputs(images, speed, target_point, command, lidar, extra)
        self._check_past(images, past)
        b = images.shape[0]
        dtype = self.output.weight.dtype
        tp_in = target_point.to(dtype) / POSITION_SCALE
        meas = [speed.reshape(b, 1).to(dtype) / SPEED_SCALE, tp_in, command.to(dtype)]
        current, past_feats = self.encode_frames(images, past)
        feats = [current]
        if self.lidar_encoder is not None:
            feats.append(self.lidar_encoder(lidar.to(dtype)))
        if extra is not None:
            meas.append(extra.to(dtype))
        fused = self.fuse(torch.cat(feats, dim=1))
        if past is not None:
            fused = fused + self.pool_past(past_feats, past)
        h = self.join(torch.cat([fused, self.measurements(torch.cat(meas, dim=1))], dim=1))
        return self._decode(h, speed, tp_in)

    def _decode(self, h: Tensor, speed: Tensor, tp_in: Tensor) -> Tensor:
        # Accumulate waypoints in at least fp32: under bf16 autocast a running
        # sum of deltas would lose ~0.1 m of precision at 20 m range.
        b = h.shape[0]
        wp_dtype = torch.promote_types(self.output.weight.dtype, torch.float32)
        if self.cfg.prior == "none":
            prior = torch.zeros(b, self.pred_len, 2, dtype=wp_dtype, device=h.device)
        else:
            prior = straight_ahead(speed, self.pred_len, self.io.frame_dt, self.io.frame).to(wp_dtype)
        wp = torch.zeros(b, 2, dtype=wp_dtype, device=h.device)
        residual = torch.zeros_like(wp)
        out: list[Tensor] = []
        for t in range(self.pred_len):
            # autoregressive on the full estimate (prior + residual so far), as TCP is on its own
            h = self.decoder(torch.cat([wp / POSITION_SCALE, tp_in.to(wp_dtype)], dim=1), h)
            residual = residual + self.output(h).to(wp_dtype)
            wp = prior[:, t] + residual
            out.append(wp)
        return torch.stack(out, dim=1)


def build_model(cfg: ModelConfig, n_cameras: int, pred_len: int,
                io: ModelIO | None = None) -> WaypointModel:
    model = WaypointModel(cfg, n_cameras=n_cameras, pred_len=pred_len, io=io)
    n_params = sum(p.numel() for p in model.parameters())
    logger.info(
        "built WaypointModel(backbone=%s, cameras=%d, pred_len=%d, prior=%s, lidar=%s, "
        "extra inputs=%d, history=%d): %.2fM params", cfg.backbone, n_cameras, pred_len,
        cfg.prior, cfg.lidar, model.io.extra_dim, model.io.history, n_params / 1e6,
    )
    return model
