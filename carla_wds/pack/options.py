"""`carla-wds pack` options, checked as a whole before OUTPUT_DIR is touched."""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, fields
from typing import Any

from ..remote import RemoteOptions
from ..schema import IMAGE_FORMATS
from .datasets import DEFAULT_LAYOUT, all_options, check_options, identity_options
from .errors import PackError
from .errors import bad_option as _bad
from .errors import whole_number as _whole

# A shard name must stay a plain file name in OUTPUT_DIR that a manifest may list: no path
# separator or "..", and no leading dot (hidden, and the pack's temporary files start with one).
_PREFIX = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,199}$")
_KEY_CHARS = re.compile(r"^[A-Za-z0-9_\-~+=,@]*$")   # what schema.make_key allows in a key
MAX_SIDE = 65535   # JPEG's limit on a side; PNG's is larger but no camera comes near it


@dataclass
class PackOptions:
    """`carla-wds pack`'s options in Python, checked as a whole (`validate()`, which `pack()`
    calls) before the output folder is touched. Each is the command's option of the same name
    (`max_samples` is `--max-samples`). A layout's own options (e.g. `stride=1` for
    bench2drive) may be passed as keywords too; they go into `dataset_options`.

    Attributes:
        layout: a built-in layout (the docs' Layouts page) or the path of a layout YAML.
        pred_len: future waypoints per sample; None: the layout's 2 s horizon.
        max_samples: samples after which a shard is closed.
        max_bytes: bytes after which a shard is closed; None: no byte limit.
        route_shards: also close a shard where a route starts once it holds half of
            max_samples, so history windows shuffle better.
        prefix: shard file names, `<prefix>-000000.tar`.
        image_format: re-encode the cameras as "png" or "jpg", or "raw": decode each camera
            once at pack time and store uint8 H x W x 3 `.npy` (no decode when loading, larger
            shards). None: copy the source bytes verbatim.
        quality: the JPEG quality of a re-encode.
        resize: (H, W) of the stored cameras; None: as recorded.
        workers: encoding processes.
        part: (i, N): this machine packs part i of N (then `carla-wds merge`).
        select: only these episodes (routes or clips): what `pack --plan --part` packs from
            `carla-wds plan`'s part.
        on_error: "fail", or "skip": a bad frame is skipped, named in the manifest's
            `skipped` and counted.
        check_images: fully decode every image while packing.
        dot_replacement: map dots in route names to this string.
        resume: continue an interrupted pack into the same folder.
        overwrite: replace what the output folder holds.
        progress: progress on a terminal, a few lines in a log.
        fsync: fsync each shard before it gets its name, durable against power loss.
        allow_pickle_input: read pickled raw `.npy` files from a source you trust (shards
            never hold pickles).
        all_frames: every frame with a full future, not only those the layout's project serves.
        dataset_options: the layout dataset's own options, e.g. {"stride": 1} for
            bench2drive; None: its defaults.
        spool_bytes: for archived inputs, the bytes of one archive held in memory before the
            rest goes to one temporary file (1 GiB).
        stage: for an `s3://` output, the local folder shards are staged in before upload.
        storage_options: fsspec's options for `s3://` (key, secret, endpoint_url, ...).
        read_timeout: seconds an `s3://` read may wait for bytes.
        retries: further attempts of an `s3://` read or write after a transient failure.
    """
    layout: str = DEFAULT_LAYOUT
    pred_len: int | None = None            # None: the layout's horizon_s x rate_hz
    max_samples: int = 1000
    max_bytes: int | None = None
    # close a shard at a route's start once it holds max_samples // 2 (history windows: the
    # loader keeps shards a route links adjacent, so fewer links shuffle better; sequence.py)
    route_shards: bool = False
    prefix: str = "shard"
    image_format: str | None = None        # None: keep the source format, bytes copied verbatim
    quality: int = 95
    resize: tuple[int, int] | None = None  # (H, W)
    workers: int = 1
    part: tuple[int, int] | None = None    # (i, N): this machine packs part i of N
    # the episodes (names) of a plan's part (pack/plan_parts.py): when set, `part` is only the
    # (i, P) the manifest records and these are packed, in discovery order. Not in identity():
    # the plan's fingerprint is checked before a pack starts (plan_parts.check_input)
    select: tuple[str, ...] | None = None
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
    # The options the layout's dataset owns (pack/datasets: DatasetOption.name -> value), e.g.
    # {"stride": 1} for --layout bench2drive; checked by that dataset. None: its defaults.
    dataset_options: dict[str, Any] | None = None
    # how much of an archive's episode is spooled in memory before the rest goes to one
    # temporary file
    spool_bytes: int = 1 << 30
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
        skip = {"select", "workers", "resume", "overwrite", "progress", "fsync", "allow_pickle_input",
                "spool_bytes", "stage", "storage_options", "read_timeout", "retries"}
        out = {k: v for k, v in asdict(self).items() if k not in skip | {"dataset_options"}}
        # the built-in datasets' options and the layout's own, at their defaults unless given:
        # a manifest's pack_args lists the same keys whatever the built-in layout
        given = self.dataset_options or {}
        out.update((o.name, given.get(o.name, o.default)) for o in identity_options(self.layout)
                   if o.recorded_at_default or given.get(o.name, o.default) != o.default)
        return out

    @classmethod
    def of(cls, **kw: Any) -> "PackOptions":
        """PackOptions from keywords, where those naming a layout's own option (e.g.
        stride=1 for bench2drive) go into dataset_options (as PackOptions(...) does)."""
        return cls(**kw)

    def __getattr__(self, name: str) -> Any:
        # Only reached when the dataclass has no such field: a dataset's option, as the
        # attribute it was before issue 25 moved it into its room (opts.stride).
        for option in all_options():
            if option.name == name:
                return (self.__dict__.get("dataset_options") or {}).get(name, option.default)
        raise AttributeError(f"'PackOptions' object has no attribute {name!r}")

    def remote(self) -> RemoteOptions:
        """How an object store's objects are read and written: timeouts, retries, options."""
        return RemoteOptions(read_timeout=float(self.read_timeout), retries=self.retries,
                             storage_options=self.storage_options)

    def validate(self) -> None:
        """Raise PackError naming the first bad option, what it expects and the fix."""
        if self.pred_len is not None:
            _whole("--pred-len", self.pred_len, 1, None, "pass the number of future waypoints, "
                   "e.g. --pred-len 4, or leave it out for the layout's 2 s horizon")
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
        if self.dataset_options is not None and not isinstance(self.dataset_options, dict):
            raise _bad("dataset_options", repr(self.dataset_options), "a mapping of option "
                       "names to values", "pass e.g. dataset_options={} or leave it out")
        check_options(self.layout, self.dataset_options or {})
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


_FIELDS_INIT = PackOptions.__init__
_OWN = frozenset(f.name for f in fields(PackOptions))


def _init(self: PackOptions, *args: Any, **kw: Any) -> None:
    """The dataclass __init__, where a keyword naming a dataset's option (stride=1 for a
    clip layout) goes into dataset_options: PackOptions(...) and dataclasses.replace() take
    the keywords they took before those options moved into their dataset's room."""
    theirs = {k: kw.pop(k) for k in list(kw) if k not in _OWN}
    if theirs:
        known = sorted({o.name for o in all_options()})
        unknown = sorted(set(theirs) - set(known))
        if unknown:
            raise TypeError(f"PackOptions() got unexpected keyword arguments {unknown}; its "
                            f"fields are {sorted(_OWN)}, the datasets' own options {known}")
        kw["dataset_options"] = {**(kw.get("dataset_options") or {}), **theirs}
    _FIELDS_INIT(self, *args, **kw)


PackOptions.__init__ = _init   # type: ignore[method-assign]
