"""Progress of long work (pack, verify, synth, train, view): one source for all of them.

On a terminal it is tqdm's bar. Anywhere else (a log file, a CI log, `> pack.log 2>&1`) a bar's
carriage-return redraws become thousands of lines, so there it is a few log lines instead: one
at each tenth of the work or every PERIOD seconds, whichever comes first, and one at the end,
each with the count, rate and time left.
"""
from __future__ import annotations

import logging
import sys
import time
from typing import Any, Iterable, Iterator

from tqdm import tqdm

log = logging.getLogger("carla_wds.progress")
PERIOD = 60.0   # seconds between two lines at most, on work without a known total too


def interactive(stream: Any = None) -> bool:
    """Whether `stream` (default stderr, where bars go) is a terminal."""
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):   # closed or replaced streams
        return False


class LogBar:
    """The part of tqdm's interface the project uses, writing a few log lines."""

    def __init__(self, iterable: Iterable | None = None, *, total: int | None = None,
                 desc: str = "", unit: str = "it", initial: int = 0, **_: Any) -> None:
        self.iterable, self.desc, self.unit = iterable, desc or "progress", unit
        if total is None and iterable is not None and hasattr(iterable, "__len__"):
            total = len(iterable)
        self.total, self.n, self.postfix = total, initial, ""
        self._start = self._last = time.monotonic()
        self._next_tenth = self._tenth_of(initial) + 1
        self._closed, self._said = False, initial   # the count the last line gave

    def _tenth_of(self, n: int) -> int:
        return int(10 * n / self.total) if self.total else 0

    def update(self, n: int = 1) -> None:
        self.n += n
        now = time.monotonic()
        if (self.total and self._tenth_of(self.n) >= self._next_tenth) or \
                now - self._last >= PERIOD:
            self._next_tenth = self._tenth_of(self.n) + 1
            self._line(now)

    def set_postfix(self, ordered_dict: dict | None = None, **kw: Any) -> None:
        items = {**(ordered_dict or {}), **kw}
        self.postfix = ", ".join(f"{k}={v}" for k, v in items.items())

    def _line(self, now: float) -> None:
        self._last, self._said = now, self.n
        spent = max(now - self._start, 1e-9)
        rate = self.n / spent
        done = f"{self.n}/{self.total} {self.unit}" if self.total else f"{self.n} {self.unit}"
        pct = f" ({100 * self.n / self.total:.0f}%)" if self.total else ""
        left = ""
        if self.total and rate > 0 and self.n < self.total:
            left = f", {(self.total - self.n) / rate:.0f} s left"
        extra = f", {self.postfix}" if self.postfix else ""
        log.info("%s: %s%s, %.1f %s/s%s%s", self.desc, done, pct, rate, self.unit, left, extra)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            if self.n != self._said:   # the end, unless the last line said it already
                self._line(time.monotonic())

    def __iter__(self) -> Iterator:
        try:
            for item in self.iterable:
                yield item
                self.update()
        finally:
            self.close()

    def __enter__(self) -> "LogBar":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def bar(iterable: Iterable | None = None, **kw: Any) -> tqdm | LogBar:
    """tqdm(iterable, **kw) on a terminal (or when disabled), else a LogBar."""
    if kw.get("disable") or interactive(kw.get("file")):
        return tqdm(iterable, **kw)
    return LogBar(iterable, **kw)
