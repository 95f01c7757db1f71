"""The pack's own errors: a pack that cannot go on (kept apart so every pack module can raise
them without importing the route planner)."""
from __future__ import annotations

import errno
import shutil
import tempfile
from typing import Any

# errors of the machine, never of the input: the disk or a quota is full, a file too large
# for the process's limit (RLIMIT_FSIZE)
_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


class PackError(RuntimeError):
    """A pack that cannot go on; the message names episode, frame, file, expectation and fix."""


class WrongLayout(PackError):
    """INPUT_DIR holds data, but not of --layout: the registry adds the layouts that match
    (pack.datasets.open_input), else `fix`. The message itself says no fix."""

    def __init__(self, message: str, fix: str = "choose the --layout of the data "
                 "(carla-wds pack --help lists them)") -> None:
        super().__init__(message)
        self.fix = fix


def bad_option(option: str, value: Any, expected: str, fix: str) -> PackError:
    """The one-line error of a bad pack option: what it got, what it expects, the fix."""
    return PackError(f"{option} {value}: expected {expected}. Fix: {fix}")


def whole_number(option: str, value: Any, low: int, high: int | None, fix: str) -> None:
    """PackError unless value is an int (not a bool) in low..high (high None: no bound)."""
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= low and (
        high is None or value <= high)
    if not ok:
        span = f"a whole number >= {low}" if high is None else f"a whole number {low}..{high}"
        raise bad_option(option, value, span, fix)


class ResourceError(PackError):
    """The machine, not the input: a full disk or quota, or memory, while spooling or writing.
    Never a skipped clip or frame: --on-error skip must not drop good input for it."""


def _free(folder: str) -> str:
    try:
        return f"{shutil.disk_usage(folder).free:,} bytes free"
    except OSError:
        return "free space unknown"


def spool_error(what: str, exc: BaseException, spool_bytes: int) -> ResourceError:
    """One line for a spool (a clip unpacked into memory, then one temporary file) that the
    machine could not hold: where, how much room is left, and the options that move it."""
    tmp = tempfile.gettempdir()
    if isinstance(exc, MemoryError):
        return ResourceError(
            f"{what}: out of memory while unpacking it (up to --spool-bytes {spool_bytes:,} "
            f"of a clip is held in memory); the archive was not found bad. Fix: lower "
            f"--spool-bytes (the rest goes to one temporary file in {tmp}), or fewer --workers")
    why = "the disk or quota is full" if getattr(exc, "errno", None) in _FULL else "it failed"
    return ResourceError(
        f"{what}: writing its spool to a temporary file in {tmp} failed ({exc}; {why}, "
        f"{_free(tmp)}); the archive was not found bad. Fix: free space there, point TMPDIR "
        f"at a larger disk, or raise --spool-bytes (now {spool_bytes:,}) to hold more of a clip "
        "in memory")
