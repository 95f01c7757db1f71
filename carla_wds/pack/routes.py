"""What every dataset's planner hands the packer: the ordered frame tasks of an episode (a route
folder or a clip), the frames it skipped with why, and how the encoder reads each extra file.

The packer, the encoder (frames.py) and the report work on these alone, whatever the dataset.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ..schema import SchemaError, make_key
from .errors import PackError

FIX_SKIP = "fix or remove the file, or pack with --on-error skip to record the frame and go on"
FIX_MISSING = ("restore the file (or remove the frame's measurement file), or pack with "
               "--on-error skip to record the frame and go on")


def frame_file(like: Path | str, t: int, ext: str, prefix: str = "") -> str:
    """Frame t's file name written as `like` (a measurement file) writes its number: the
    same digit count (%04d, %05d), so a message names the file the dataset would hold."""
    width = len(Path(like).name.partition(".")[0])
    return f"{prefix}{t:0{width}d}.{ext}"


@dataclass(frozen=True)
class Skip:
    episode: str
    frame: int | None
    file: str
    reason: str
    fix: str = FIX_SKIP
    derived: bool = False   # skipped only because another frame's file is bad

    def message(self) -> str:
        frame = "" if self.frame is None else f" frame {self.frame:04d}"
        return f"{self.episode}{frame}: {self.file}: {self.reason}. Fix: {self.fix}"

    def record(self) -> dict[str, Any]:
        return {"episode": self.episode, "frame": self.frame, "file": self.file,
                "reason": self.reason}


@dataclass
class FrameTask:
    episode: str
    frame: int
    key: str
    labels: dict[str, Any]
    image_paths: dict[str, str]    # camera -> absolute file path
    sensor_paths: dict[str, str] = field(default_factory=dict)   # extra field -> file path
    record: dict[str, Any] | None = None   # the measurements record's values


@dataclass
class RoutePlan:
    episode: str
    n_frames: int = 0
    tail: int = 0
    tasks: list[FrameTask] = field(default_factory=list)
    head: int = 0           # frames before the loader's first (the layout's samples.head)
    loader_tail: int = 0    # frames with a full future after the loader's last sample
    skipped: list[Skip] = field(default_factory=list)
    nan_theta: int = 0
    void_command: int = 0
    filtered: str = ""     # why the whole route was left out (the layout's route filter)

    @property
    def unsampled(self) -> int:
        """Frames that are no sample: tails, head, the loader's tail and skips."""
        return self.tail + self.head + self.loader_tail + len(self.skipped)

    def extra_counts(self) -> dict[str, int]:
        """The whole-number fields a dataset's plan type adds to these (its own counts, such
        as frames left between keyframes): the manifest's counts sum them over the plans."""
        own = {f.name for f in fields(RoutePlan)}
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.name not in own and isinstance(getattr(self, f.name), int)}

    def check(self) -> None:
        accounted = len(self.tasks) + self.unsampled
        if accounted != self.n_frames:
            raise AssertionError(f"{self.episode}: {self.n_frames} frames found but "
                                 f"{accounted} accounted for; this is a carla-wds bug")


@dataclass(frozen=True)
class Reader:
    """How the encoder turns one raw file into one or two members (picklable)."""
    name: str
    member: str
    read: str                     # layout_parts.readers(), or "camera" for a camera twin
    codec: str
    gz: bool = False
    raw_member: str | None = None   # boxes: the raw JSON beside the typed array


def check_key_collisions(routes: list[str], dot_replacement: str | None) -> None:
    """Two routes whose keys coincide (a.b and a_b with --dot-replacement _) would interleave."""
    seen: dict[str, str] = {}
    for route in routes:
        try:
            key = make_key(route, 0, dot_replacement)
        except SchemaError:
            continue   # reported per frame by plan_route
        if key in seen:
            raise PackError(f"routes {seen[key]!r} and {route!r} give the same sample keys "
                            f"({key[:-6]}__NNNN). Fix: rename one folder or choose another "
                            "--dot-replacement")
        seen[key] = route


def select_part(routes: list, part: tuple[int, int] | None,
                select: tuple[str, ...] | None = None) -> list:
    """The episodes this pack takes: a plan's part by name (`select`: routes are names, clips
    have .name), else part i of N as a contiguous slice, else all."""
    if select is not None:
        keep = set(select)
        return [r for r in routes if (r if isinstance(r, str) else r.name) in keep]
    if part is None:
        return routes
    i, n = part
    # Contiguous slices keep the merged parts in the same order as a single pack.
    return routes[i * len(routes) // n:(i + 1) * len(routes) // n]


def raise_first_skip(plan: RoutePlan, on_error: str) -> None:
    """In fail mode, a plan's first skip is the pack's error: the bad file's own frame rather
    than an earlier frame it makes unusable."""
    if plan.skipped and on_error == "fail":
        cause = [s for s in plan.skipped if not s.derived] or plan.skipped
        raise PackError(cause[0].message())
