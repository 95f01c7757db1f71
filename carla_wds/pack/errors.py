"""The pack's own error: a pack that cannot go on (kept apart so every pack module can raise
it without importing the route planner)."""
from __future__ import annotations


class PackError(RuntimeError):
    """A pack that cannot go on; the message names episode, frame, file, expectation and fix."""
