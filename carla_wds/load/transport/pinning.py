"""`pin_memory=True`: each batch copied into pinned (page-locked) memory off the training
thread, so that `batch.to("cuda", non_blocking=True)` is a real asynchronous copy.

Where the copy runs. With workers, a background thread (`Ahead`) takes each batch from the
DataLoader, receives it from its ring slot (rings.py) straight into pinned memory, and queues
it; the training thread finds the batch already pinned while its step ran, as torch's
DataLoader does with its own pin thread. Without workers the batch is made in the training
thread anyway, and so is its pinned copy, as in torch's DataLoader.

Why a pending copy cannot read freed memory. Every pinned tensor is a fresh block of torch's
caching host allocator (`Tensor.pin_memory()`); a `non_blocking` copy from such a block records
a CUDA event on it (at::native's copy_kernel_cuda calls CachingHostAllocator_recordEvent), and
the allocator hands the block out again only once that event has completed. So a batch the
caller drops while its copy is in flight, or the next batch the thread pins meanwhile, never
overwrites memory a copy still reads. The ring slot it came from is shared, not pinned, memory,
copied synchronously before the slot is freed.

Without CUDA, `pin_memory=True` warns once (a UserWarning, as torch's DataLoader does) and the
loader runs unpinned: a config written for the cluster also runs on a laptop.

A test stands in for CUDA on a machine without it with `available` and `Tensor.pin_memory`
(a copy), which every pinned copy goes through (tests/load/test_pinning.py).
"""
from __future__ import annotations

import logging
import queue
import threading
import warnings
from typing import Any, Callable, Iterator

import torch

log = logging.getLogger(__name__)
THREAD_NAME = "carla-wds-pin"
POLL = 0.1          # seconds between the thread's checks that it was told to stop
CLOSE_WAIT = 30.0   # seconds close() waits for the thread (it may be in a worker's next())
NO_CUDA = ("pin_memory=True, but CUDA is not available (torch.cuda.is_available() is False): "
           "batches load unpinned. Fix: transport=Transport(pin_memory=False) on a machine "
           "without a GPU")


def available() -> bool:
    """Whether pinned memory can be made here."""
    return torch.cuda.is_available()


def usable(pin_memory: bool) -> bool:
    """pin_memory as it can run here: False, with one warning, where no CUDA is."""
    if pin_memory and not available():
        warnings.warn(NO_CUDA, UserWarning, stacklevel=5)   # the caller of CARLAWebData
        return False
    return bool(pin_memory)


_ITEM, _END, _ERROR = "item", "end", "error"


class Ahead:
    """`make(item)` for each item of `source`, run in a background thread one item ahead of
    the caller, in order. An exception from `source` or `make` is raised to the caller as it
    was raised (its type and message; torch's re-raise of a worker's error included), after
    the items before it. close() (also at the end, and at an error) stops and joins the
    thread; what it made ahead is dropped, so the caller's count of items is what it got."""

    def __init__(self, source: Iterator, make: Callable[[Any], Any]) -> None:
        # one made item queued, one being made: pinned memory is scarce
        self._queue: queue.Queue = queue.Queue(maxsize=1)
        self._stop = threading.Event()
        # the caller's device: cudaHostAlloc in a new thread would otherwise open a context
        # on GPU 0 (one per DDP rank); torch's pin thread sets it too
        device = torch.cuda.current_device() if torch.cuda.is_available() else None
        self._thread = threading.Thread(target=self._run, args=(source, make, device),
                                        name=THREAD_NAME, daemon=True)
        self._thread.start()

    def _run(self, source: Iterator, make: Callable[[Any], Any], device: int | None) -> None:
        try:
            torch.set_num_threads(1)   # thread-local here: the copies take one core, as torch's
            if device is not None:
                torch.cuda.set_device(device)
            for item in source:
                if self._stop.is_set() or not self._put((_ITEM, make(item))):
                    return
            self._put((_END, None))
        except BaseException as exc:   # noqa: BLE001 - handed to the caller, which raises it
            self._put((_ERROR, exc))

    def _put(self, entry: tuple[str, Any]) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(entry, timeout=POLL)
                return True
            except queue.Full:
                continue
        return False

    def __iter__(self) -> "Ahead":
        return self

    def __next__(self) -> Any:
        if self._stop.is_set():
            raise StopIteration
        kind, value = self._queue.get()
        if kind == _ITEM:
            return value
        self.close()
        if kind == _ERROR:
            raise value
        raise StopIteration

    def close(self) -> None:
        """Stop the thread and wait for it: at most the rest of one `next(source)`, bounded
        by CLOSE_WAIT (a worker stuck in a batch of its own keeps the thread, a daemon, until
        that batch comes or torch shuts the workers down)."""
        self._stop.set()
        self._drain()   # a thread blocked in put sees the stop within POLL
        if self._thread is not threading.current_thread():
            self._thread.join(CLOSE_WAIT)
        self._drain()
        if self._thread.is_alive():
            log.warning("the pin_memory thread %r still waits for a DataLoader batch %.0f s "
                        "after its pass ended; left to end on its own", self._thread.name,
                        CLOSE_WAIT)

    def _drain(self) -> None:
        try:
            while True:
                self._queue.get_nowait()
        except queue.Empty:
            pass
