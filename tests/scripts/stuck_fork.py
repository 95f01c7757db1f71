"""CARLAWebData whose first forked DataLoader worker never gets out of fork, as a child that
inherits a held interpreter lock does (CPython gh-112275): an at-fork hook that never returns
stands in for that lock. Writes the eval keys it got to OUT.

    python tests/scripts/stuck_fork.py SHARDS OUT MARK
"""
import json
import logging
import os
import signal
import sys
import time
from pathlib import Path

from carla_wds import CARLAWebData
from carla_wds.load.transport.workers import Workers

shards, out, mark = sys.argv[1], Path(sys.argv[2]), sys.argv[3]


def stuck_once() -> None:
    try:   # the first child to get here hangs; every later one goes on
        fd = os.open(mark, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    # The real stuck child runs no Python, so the parent's SIGTERM handler (installed below,
    # as Lightning and torchrun install theirs) never runs there: SIGTERM does not end it.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    while True:
        time.sleep(3600)


logging.basicConfig(level=logging.WARNING)
signal.signal(signal.SIGTERM, lambda *_: sys.exit("SIGTERM"))
Workers.START_WAIT = 3.0
os.register_at_fork(after_in_child=stuck_once)
data = CARLAWebData(shards, batch_size=3, num_workers=2, image_size=(16, 24), mode="eval")
keys = [k for batch in data for k, ok in zip(batch.keys, batch.valid.tolist()) if ok]
out.write_text(json.dumps(keys))
