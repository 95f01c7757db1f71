"""The bounds on what one untrusted file may make carla-wds allocate, decompress or download.

Raw inputs, shards and manifests are data from somewhere else. Every decoder checks the size a
file *declares* (an image header, a LAZ point count, an .npy/.npz/HDF5 shape and dtype, a
gzip member) against one of these limits before it allocates, and counts decompressed bytes
as they stream, cutting at the limit. The defaults are generous for CARLA data (a garage LiDAR
sweep is ~60k points, a Bench2Drive clip archive ~0.5 GB unpacked); raise one with
`--limit NAME=VALUE` on the command line or `CARLAWebData(limits={...})`.

One source of truth: the decoders read the process's active limits (`active()`), which the
CLI and the loader set once (`set_active`), and which pack worker processes receive from their
parent. A pack or a manifest may declare tighter bounds (per-camera image sizes); a declared
bound never lifts one of these.
"""
from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Iterable, Iterator


class LimitError(ValueError):
    """A file declares or holds more than a limit allows; the message names the limit."""

    def __init__(self, what: str, have: int | float, name: str, limit: int | float) -> None:
        super().__init__(f"{what} is {have:,}, over the limit {name}={limit:,}; expected a "
                         f"CARLA file. Fix: if the file is genuine, raise it with --limit "
                         f"{name}=N (CARLAWebData(limits={{'{name}': N}}))")
        self.name, self.have, self.limit = name, have, limit

    def __reduce__(self):   # survives the pipe from a pack worker process
        return _rebuild, (self.args[0], self.name, self.have, self.limit)


def _rebuild(message: str, name: str, have: Any, limit: Any) -> LimitError:
    err = LimitError.__new__(LimitError)
    ValueError.__init__(err, message)
    err.name, err.have, err.limit = name, have, limit
    return err


@dataclass(frozen=True)
class Limits:
    """Each field is an upper bound; all are whole numbers > 0."""
    image_pixels: int = 8192 * 8192        # H*W of any image whose size no manifest recorded
    lidar_points: int = 4_000_000          # points in one LiDAR sweep (LAZ header, npy rows)
    radar_rows: int = 1_000_000            # detections in one radar file, all radars together
    array_bytes: int = 256 << 20           # bytes one .npy/.npz/HDF5 array may decode to
    raw_file_bytes: int = 64 << 20         # one raw per-frame file as read from disk or archive
    member_bytes: int = 256 << 20          # one member of a shard, which a reader holds whole
    json_bytes: int = 256 << 20            # one JSON document after gunzip
    json_depth: int = 100                  # nesting of a JSON document (CARLA's is < 10)
    # values one JSON document may parse to (every dict, list, string, number): `{},` is 3
    # bytes of text and a ~64-byte dict, so json_bytes alone lets 256 MiB become 6 GB of
    # objects; a real frame's JSON is under 1 MB (< 100k values)
    json_values: int = 4_000_000
    # objects one raw pickle (LEAD's metas/boxes) may build, counted as the values they expand
    # to once stored as JSON (a shared or repeated object counts each time, an array its
    # elements): a frame's metas are ~10k values
    pickle_values: int = 4_000_000
    clip_bytes: int = 16 << 30             # a clip archive's members, unpacked, together
    clip_members: int = 200_000            # members of one clip archive
    # unpacked / compressed bytes of a clip archive, past its first 64 MiB: a clip's files are
    # JPEG, PNG, LAZ, gzip JSON and gzip HDF5, which gzip barely shrinks (~1.0-1.1x), while a
    # gzip bomb unpacks 1000x; so a bomb stops after ~64 MiB of spool, not at clip_bytes
    clip_ratio: int = 20
    remote_shard_bytes: int = 16 << 30     # a shard a manifest declares, read over HTTP/s3
    # the members of one sample together, as a shard reader gathers them before yielding it
    # (a Bench2Drive sample with six cameras and a LiDAR sweep is ~5 MB)
    sample_bytes: int = 1 << 30
    yaml_bytes: int = 1 << 20              # a layout or config YAML file

    def check(self, name: str, have: int | float, what: str) -> None:
        """LimitError unless `have` <= the limit `name`."""
        limit = getattr(self, name)
        if have > limit:
            raise LimitError(what, have, name, limit)

    def with_overrides(self, items: Iterable[str] | dict[str, Any]) -> Limits:
        """These limits with NAME=VALUE strings (or a dict) applied; ValueError lists the names."""
        pairs = items.items() if isinstance(items, dict) else (_split(s) for s in items)
        changes = {}
        for name, value in pairs:
            if name not in _NAMES:
                raise ValueError(f"--limit {name}: no such limit; valid: {', '.join(_NAMES)}")
            changes[name] = _whole(name, value)
        return replace(self, **changes)

    def doc(self) -> dict[str, int]:
        return asdict(self)


_NAMES = tuple(f.name for f in fields(Limits))


def _split(item: str) -> tuple[str, str]:
    name, sep, value = item.partition("=")
    if not sep:
        raise ValueError(f"--limit {item!r}: expected NAME=VALUE; names: {', '.join(_NAMES)}")
    return name.strip(), value.strip()


def _whole(name: str, value: Any) -> int:
    """A whole number > 0 from an int or a string such as 4000000, 4e6 or 2**30."""
    try:
        if isinstance(value, str):
            base, _, exp = value.partition("**")
            number = float(base) ** float(exp) if exp else float(value)
        else:
            number = float(value)
        ok = number.is_integer() and 0 < number < 2 ** 63 and not isinstance(value, bool)
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok:
        raise ValueError(f"--limit {name}={value}: expected a whole number > 0 (e.g. 4e6)")
    return int(number)


DEFAULT = Limits()
_active = DEFAULT


def active() -> Limits:
    """The limits the decoders of this process apply."""
    return _active


def set_active(limits: Limits) -> None:
    """Make `limits` the process's limits (the CLI, the loader's workers, pack workers)."""
    global _active
    _active = limits


@contextlib.contextmanager
def using(limits: Limits) -> Iterator[Limits]:
    """Apply `limits` within a block, then restore the previous ones."""
    before = _active
    set_active(limits)
    try:
        yield limits
    finally:
        set_active(before)


__all__ = ["DEFAULT", "LimitError", "Limits", "active", "set_active", "using"]


def scoped(stream: Iterator, bounds: Limits) -> Iterator:
    """`stream` with `bounds` the active limits while each item is made, and the caller's
    between items: with num_workers=0 the stream runs in the caller's process, beside other
    loaders, and a generator paused at a yield must not leave its limits switched on."""
    try:
        while True:
            with using(bounds):
                try:
                    item = next(stream)
                except StopIteration:
                    return
            yield item
    finally:
        stream.close()
