"""The trainer's user errors, and how each command prints one: a single line."""
from __future__ import annotations

from ..load import ShardError
from ..schema import SchemaError
from .checkpoint import CheckpointError
from .config import ConfigError
from .runlock import RunDirLocked

# A bad config, checkpoint, run_dir or shard: printed as one line, never as a traceback.
USER_ERRORS = (ConfigError, CheckpointError, RunDirLocked, ShardError, SchemaError,
               FileNotFoundError, ValueError)


def one_line(exc: BaseException) -> str:
    """An error as one line. A DataLoader worker's error arrives re-raised with the worker's
    traceback in its text; its last line is the original message."""
    lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()] or [type(exc).__name__]
    if len(lines) > 1 and lines[0].startswith("Caught "):
        head, sep, rest = lines[-1].partition(": ")
        return rest if sep and head.replace(".", "").replace("_", "").isalnum() else lines[-1]
    return " ".join(ln.strip() for ln in lines)
