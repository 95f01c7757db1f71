"""Bench2Drive's own pack options: declared here (for `carla-wds pack` and the manifest's
pack_args) and checked here, carried by PackOptions.dataset_options as one mapping."""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping

from ...errors import bad_option, whole_number
from ..base import DatasetOption
from .clips import SUBSETS
from .future_boxes import MAX_STEPS, UNIAD_STEPS
from .futures import FUTURE_LABELS
from .plan import EXPERT_OFFSETS, SENSORS

EXPERT_PAIRINGS = tuple(EXPERT_OFFSETS)


def _comma_list(text: str) -> tuple[str, ...]:
    return tuple(x for x in text.split(",") if x)


# In the order the manifest's pack_args has always listed them.
OPTIONS = (
    DatasetOption("stride", "--stride", "bench2drive: pack every k-th 10 Hz frame (default 5: "
                  "B2D's 2 Hz keyframes).", None, int),
    DatasetOption("split", "--split", "bench2drive: the official train/val split JSON."),
    DatasetOption("subset", "--subset", "bench2drive: which clips of --split to pack.", "train",
                  choices=SUBSETS, show_default=True),
    DatasetOption("handedness", "--handedness", "bench2drive: labels in CARLA's left-handed "
                  "vehicle frame, or right-handed as Bench2DriveZoo's prepare_B2D.py.", "left",
                  choices=("left", "right"), show_default=True),
    DatasetOption("box_radius", "--box-radius", "bench2drive: keep boxes within this many "
                  "metres (default 75).", None, float),
    DatasetOption("sensors", "--sensors", "bench2drive: comma list from lidar, boxes, expert, "
                  "radar, depth, semantic, instance (default lidar,boxes,expert).",
                  parse=_comma_list),
    DatasetOption("box_visibility", "--box-visibility", "bench2drive: prepare_B2D's "
                  "depth-visibility test of each box (reads the depth PNGs): filter drops boxes "
                  "no camera sees, as prepare_B2D; flag keeps them, marked in the 'visible' "
                  "column; off: no test.", "filter", choices=("filter", "flag", "off"),
                  show_default=True),
    DatasetOption("expert_pairing", "--expert-pairing", "bench2drive: the expert file of frame "
                  "t: t-1 (prepare_B2D, VAD) or t (the Bench2DriveZoo TCP port).", "prepare_b2d",
                  choices=EXPERT_PAIRINGS, show_default=True),
    # new in issue 42: recorded in pack_args only when given, so earlier manifests keep bytes
    DatasetOption("future_labels", "--future-labels", "bench2drive: full: a sample needs its "
                  "whole future (frames without one are left out); masked: every frame, the "
                  "labels past the clip's end zero-filled and masked (record future_valid), "
                  "with the ego future gt_sdc_fut_traj, as UniAD/VAD (Bench2DriveZoo).", "full",
                  choices=FUTURE_LABELS, show_default=True, recorded_at_default=False),
    DatasetOption("future_boxes", "--future-boxes", "bench2drive: store the box sets of the "
                  f"next F infos (UniAD's occupancy labels: F = {UNIAD_STEPS}), each in its own "
                  "frame, with their poses (future_boxes.npy and record future_boxes_*); 0: "
                  "none.", 0, int, recorded_at_default=False),
)


@dataclass(frozen=True)
class Bench2DriveOptions:
    """--layout bench2drive (clips): keyframe stride (None: 5, B2D's own 2 Hz), the official
    split file and which subset of it, label handedness, box radius (None: 75 m, as
    prepare_B2D.py), sensors besides the cameras (None: lidar, boxes, expert), prepare_B2D's
    depth-visibility test of each box (filter: drop the boxes no camera sees, as prepare_B2D
    does by default; flag: keep them, marked in the `visible` column; off: no test, no depth
    PNGs read), which expert file goes with frame t (prepare_b2d: t - 1, as prepare_B2D
    and VAD; tcp_port: t, as the TCP port's gen_tcp_data), and the frames without a full
    future (full: left out; masked: kept with their future labels masked, futures.py), and
    how many infos ahead the future box sets reach (0: none; future_boxes.py)."""
    stride: int | None = None
    split: str | None = None
    subset: str = "train"
    handedness: str = "left"
    box_radius: float | None = None
    sensors: tuple[str, ...] | None = None
    box_visibility: str = "filter"
    expert_pairing: str = "prepare_b2d"
    future_labels: str = "full"
    future_boxes: int = 0

    @classmethod
    def of(cls, given: Mapping[str, Any] | None) -> "Bench2DriveOptions":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in (given or {}).items() if k in known})

    def check(self) -> None:
        """Raise PackError naming the first bad option, what it expects and the fix."""
        if self.stride is not None:
            whole_number("--stride", self.stride, 1, None, "pass e.g. --stride 5 (2 Hz "
                         "keyframes) or --stride 1 (every 10 Hz frame)")
        for flag, value, valid, fix in (
                ("--subset", self.subset, SUBSETS, "pass --subset train"),
                ("--handedness", self.handedness, ("left", "right"), "pass --handedness right "
                 "for Bench2DriveZoo's right-handed frame, or leave it out"),
                ("--box-visibility", self.box_visibility, ("filter", "flag", "off"), "pass "
                 "--box-visibility off to keep every box without reading depth"),
                ("--expert-pairing", self.expert_pairing, EXPERT_PAIRINGS, "pass "
                 "--expert-pairing tcp_port for the TCP port's file t at frame t"),
                ("--future-labels", self.future_labels, FUTURE_LABELS, "pass --future-labels "
                 "masked for UniAD/VAD's every frame, or leave it out")):
            if value not in valid:
                raise bad_option(flag, value, _one_of(flag, valid), fix)
        if self.box_radius is not None and not (isinstance(self.box_radius, (int, float))
                                                and 0 < self.box_radius < 1e4):
            raise bad_option("--box-radius", self.box_radius, "metres > 0",
                             "pass e.g. --box-radius 75")
        self._check_sensors()
        self._check_future_boxes()

    def _check_future_boxes(self) -> None:
        whole_number("--future-boxes", self.future_boxes, 0, MAX_STEPS, f"pass --future-boxes "
                     f"{UNIAD_STEPS} (UniAD's occ_n_future), or leave it out")
        if self.future_boxes and self.sensors is not None and "boxes" not in self.sensors:
            raise bad_option("--future-boxes", self.future_boxes, "boxes in --sensors",
                             "add boxes to --sensors, or leave --future-boxes out")

    def _check_sensors(self) -> None:
        bad = [s for s in self.sensors or () if s not in SENSORS]
        if bad or (self.sensors is not None and len(set(self.sensors)) != len(self.sensors)):
            raise bad_option("--sensors", ",".join(self.sensors), f"distinct names from "
                             f"{list(SENSORS)}", "pass e.g. --sensors lidar,boxes,expert,radar")
        if "radar" in (self.sensors or ()):
            try:
                import h5py  # noqa: F401
            except ImportError:
                raise bad_option("--sensors", ",".join(self.sensors), "h5py installed for "
                                 "radar", "pip install 'carla-wds[radar]', or leave radar "
                                 "out") from None


def _one_of(flag: str, valid: tuple[str, ...]) -> str:
    """How the pack's messages have always listed the valid values of each option."""
    if flag == "--subset":
        return f"one of {list(valid)}"
    return " or ".join(valid) if len(valid) == 2 else f"{', '.join(valid[:-1])} or {valid[-1]}"
