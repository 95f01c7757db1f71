"""`carla-wds pack` options, checked as a whole before OUTPUT_DIR is touched."""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from ..remote import RemoteOptions
from ..schema import IMAGE_FORMATS
from .errors import PackError

# A shard name must stay a plain file name in OUTPUT_DIR that a manifest may list: no path
# separator or "..", and no leading dot (hidden, and the pack's temporary files start with one).
_PREFIX = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,199}$")
_KEY_CHARS = re.compile(r"^[A-Za-z0-9_\-~+=,@]*$")   # what schema.make_key allows in a key
MAX_SIDE = 65535   # JPEG's limit on a side; PNG's is larger but no camera comes near it


def _bad(option: str, value: Any, expected: str, fix: str) -> PackError:
    return PackError(f"{option} {value}: expected {expected}. Fix: {fix}")


def _whole(option: str, value: Any, low: int, high: int | None, fix: str) -> None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= low and (
        high is None or value <= high)
    if not ok:
        span = f"a whole number >= {low}" if high is None else f"a whole number {low}..{high}"
        raise _bad(option, value, span, fix)


@dataclass
class PackOptions:
    layout: str = "tcp"
    pred_len: int | None = None            # None: the layout's horizon_s x rate_hz
    max_samples: int = 1000
    max_bytes: int | None = None
    prefix: str = "shard"
    image_format: str | None = None        # None: keep the source format, bytes copied verbatim
    quality: int = 95
    resize: tuple[int, int] | None = None  # (H, W)
    workers: int = 1
    part: tuple[int, int] | None = None    # (i, N): this machine packs part i of N
    on_error: str = "fail"
    check_images: bool = False
    dot_replacement: str | None = None
    resume: bool = False
    overwrite: bool = False
    progress: bool = True
    # fsync each shard before its rename: durable against power loss, not only against a killed
    # process. Off, a pack runs at page-cache speed; the kernel writes the shards out later.
    fsync: bool = True
    # Unpickle raw inputs (TCP supervision, TransFuser 2022 LiDAR) from a source the user
    # trusts; what they hold is stored as typed members, never as a pickle.
    allow_pickle_input: bool = False
    # Every frame with a full future, instead of the frames the layout's own project serves
    # (its SampleRule: garage skips its first 10 frames, TransFuser ends earlier, ...)
    all_frames: bool = False
    # --layout bench2drive (clips): keyframe stride (None: 5, B2D's own 2 Hz), the official
    # split file and which subset of it, label handedness, box radius (None: 75 m, as
    # prepare_B2D.py), sensors besides the cameras (None: lidar, boxes, expert), and how much
    # of an archive's clip is spooled in memory before the rest goes to one temporary file.
    stride: int | None = None
    split: str | None = None
    subset: str = "train"
    handedness: str = "left"
    box_radius: float | None = None
    sensors: tuple[str, ...] | None = None
    spool_bytes: int = 1 << 30
    # bench2drive: prepare_B2D's depth-visibility test of each box (filter: drop the boxes no
    # camera sees, as prepare_B2D does by default; flag: keep them, marked in the `visible`
    # column; off: no test, no depth PNGs read), and which expert file goes with frame t
    # (prepare_b2d: t - 1, as prepare_B2D and VAD; tcp_port: t, as the TCP port's gen_tcp_data)
    box_visibility: str = "filter"
    expert_pairing: str = "prepare_b2d"
    # OUTPUT_DIR an s3:// (fsspec) prefix: the local folder shards are staged in before their
    # upload (None: under the user's cache folder, keyed by the URL; see pack/upload.py), and
    # fsspec's options for the store (None: the AWS environment and config)
    stage: str | None = None
    storage_options: dict[str, Any] | None = None
    # reads and writes of an object store (INPUT_DIR or OUTPUT_DIR): seconds a read may wait
    # for bytes, and further attempts after a transient failure (see remote.RemoteOptions)
    read_timeout: float = 30.0
    retries: int = 3

    def identity(self) -> dict[str, Any]:
        """The options that change the output bytes; a resume must match them exactly."""
        skip = {"workers", "resume", "overwrite", "progress", "fsync", "allow_pickle_input",
                "spool_bytes", "stage", "storage_options", "read_timeout", "retries"}
        return {k: v for k, v in asdict(self).items() if k not in skip}

    def remote(self) -> RemoteOptions:
        """How an object store's objects are read and written: timeouts, retries, options."""
        return RemoteOptions(read_timeout=float(self.read_timeout), retries=self.retries,
                             storage_options=self.storage_options)

    def validate(self) -> None:
        """Raise PackError naming the first bad option, what it expects and the fix."""
        if self.pred_len is not None:
            _whole("--pred-len", self.pred_len, 1, None, "pass the number of future waypoints, "
                   "e.g. --pred-len 4 (TCP's), or leave it out for the layout's 2 s horizon")
        _whole("--max-samples", self.max_samples, 1, None, "pass samples per shard, e.g. "
               "--max-samples 1000")
        if self.max_bytes is not None:
            _whole("--max-bytes", self.max_bytes, 1, None, "pass bytes per shard, e.g. "
                   "--max-bytes 1000000000, or leave it out for no size limit")
        _whole("--quality", self.quality, 1, 100, "pass a JPEG quality such as --quality 95")
        _whole("--workers", self.workers, 1, None, "pass the number of processes, e.g. "
               "--workers 4")
        _whole("--retries", self.retries, 0, None, "pass further attempts per object, e.g. "
               "--retries 3")
        if not isinstance(self.read_timeout, (int, float)) or not self.read_timeout > 0:
            raise _bad("--read-timeout", self.read_timeout, "seconds > 0",
                       "pass e.g. --read-timeout 30")
        if not isinstance(self.prefix, str) or not _PREFIX.match(self.prefix) or (
                ".." in self.prefix):
            raise _bad("--prefix", repr(self.prefix), "a plain file-name part of letters, "
                       "digits and -_. (no '/', no '..', not starting with '.', at most 200 "
                       "characters)", "pass e.g. --prefix train")
        if self.image_format is not None and self.image_format not in IMAGE_FORMATS:
            raise _bad("--image-format", self.image_format, f"one of {list(IMAGE_FORMATS)}",
                       "pass --image-format png or jpg, or leave it out to copy the source bytes")
        if self.resize is not None:
            self._check_resize()
        if self.part is not None:
            self._check_part()
        if self.on_error not in ("fail", "skip"):
            raise _bad("--on-error", self.on_error, "fail or skip", "pass --on-error fail "
                       "or --on-error skip")
        if self.dot_replacement is not None and not _KEY_CHARS.match(self.dot_replacement):
            raise _bad("--dot-replacement", repr(self.dot_replacement), "characters allowed in "
                       "a sample key (letters, digits, _-~+=,@; no dot)",
                       "pass e.g. --dot-replacement _")
        if not isinstance(self.all_frames, bool):
            raise _bad("--all-frames", self.all_frames, "True or False", "pass all_frames=True "
                       "to keep every frame with a full future")
        # any layout: a negative spool is no size, and a library caller may pass one
        _whole("--spool-bytes", self.spool_bytes, 0, None, "pass the bytes of a clip held in "
               "memory, e.g. --spool-bytes 1000000000 (0: all of it in a temporary file)")
        self._check_clips()
        if self.resume and self.overwrite:
            raise _bad("--resume with --overwrite", "", "one of them", "pass --resume to "
                       "finish an interrupted pack, or --overwrite to start again")

    def _check_resize(self) -> None:
        value = self.resize
        text = "x".join(map(str, value)) if isinstance(value, (tuple, list)) else value
        try:
            h, w = value
            _whole("", h, 1, MAX_SIDE, "")
            _whole("", w, 1, MAX_SIDE, "")
        except (TypeError, ValueError, PackError):
            raise _bad("--resize", text, f"HxW with each side 1..{MAX_SIDE} pixels",
                       "pass e.g. --resize 256x512") from None

    def _check_part(self) -> None:
        try:
            i, n = self.part
            ok = all(isinstance(v, int) for v in (i, n)) and 0 <= i < n
        except (TypeError, ValueError):
            ok = False
        if not ok:
            text = "/".join(map(str, self.part)) if isinstance(self.part, tuple) else self.part
            raise _bad("--part", text, "i/N with 0 <= i < N", "pass e.g. --part 0/4 ... "
                       "--part 3/4, one per machine")

    def _check_clips(self) -> None:
        """The bench2drive options: refused for other layouts, checked for bench2drive."""
        from .b2d import SENSORS
        from .clips import SUBSETS
        given = [(o, v) for o, v in (("--stride", self.stride), ("--split", self.split),
                                     ("--box-radius", self.box_radius),
                                     ("--sensors", self.sensors)) if v is not None]
        given += [("--handedness", self.handedness)] if self.handedness != "left" else []
        given += [(o, v) for o, v, d in (("--box-visibility", self.box_visibility, "filter"),
                  ("--expert-pairing", self.expert_pairing, "prepare_b2d")) if v != d]
        if self.layout != "bench2drive":
            if given:
                raise _bad(given[0][0], given[0][1], "--layout bench2drive", f"leave "
                           f"{given[0][0]} out for --layout {self.layout}")
            return
        if self.stride is not None:
            _whole("--stride", self.stride, 1, None, "pass e.g. --stride 5 (2 Hz keyframes) "
                   "or --stride 1 (every 10 Hz frame)")
        if self.subset not in SUBSETS:
            raise _bad("--subset", self.subset, f"one of {list(SUBSETS)}", "pass --subset train")
        if self.handedness not in ("left", "right"):
            raise _bad("--handedness", self.handedness, "left or right", "pass --handedness "
                       "right for Bench2DriveZoo's right-handed frame, or leave it out")
        if self.box_visibility not in ("filter", "flag", "off"):
            raise _bad("--box-visibility", self.box_visibility, "filter, flag or off",
                       "pass --box-visibility off to keep every box without reading depth")
        if self.expert_pairing not in ("prepare_b2d", "tcp_port"):
            raise _bad("--expert-pairing", self.expert_pairing, "prepare_b2d or tcp_port",
                       "pass --expert-pairing tcp_port for the TCP port's file t at frame t")
        if self.box_radius is not None and not (isinstance(self.box_radius, (int, float))
                                                and 0 < self.box_radius < 1e4):
            raise _bad("--box-radius", self.box_radius, "metres > 0", "pass e.g. --box-radius 75")
        bad = [s for s in self.sensors or () if s not in SENSORS]
        if bad or (self.sensors is not None and len(set(self.sensors)) != len(self.sensors)):
            raise _bad("--sensors", ",".join(self.sensors), f"distinct names from {list(SENSORS)}",
                       "pass e.g. --sensors lidar,boxes,expert,radar")
        if "radar" in (self.sensors or ()):
            try:
                import h5py  # noqa: F401
            except ImportError:
                raise _bad("--sensors", ",".join(self.sensors), "h5py installed for radar",
                           "pip install 'carla-wds[radar]', or leave radar out") from None
