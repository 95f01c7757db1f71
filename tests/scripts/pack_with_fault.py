"""`carla-wds pack` in a real process with one real OS failure injected, for the fault tests.

usage: pack_with_fault.py replace N  ARGS...   the rename of the N-th shard (1-based) fails
       pack_with_fault.py enospc  B  ARGS...   shard writes fail with ENOSPC once B bytes went out
ARGS are the command line after `carla-wds` (e.g. pack IN OUT --max-samples 7). A failed rename
fails once and later renames work, so a packer that went on after the failure would be caught by
its leftovers; a full disk stays full for every write that does not fit the budget.
"""
from __future__ import annotations

import errno
import os
import sys

from carla_wds.cli import main


def _fail_nth_shard_rename(n: int) -> None:
    real, seen = os.replace, [0]

    def replace(src, dst, *args, **kwargs):
        if str(dst).endswith(".tar"):
            seen[0] += 1
            if seen[0] == n:
                raise OSError(errno.EIO, "Input/output error (injected)")
        return real(src, dst, *args, **kwargs)
    os.replace = replace


def _full_disk_after(budget: int) -> None:
    real, written = os.writev, [0]

    def writev(fd, buffers):
        size = sum(len(b) for b in buffers)
        if written[0] + size > budget:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        written[0] += size
        return real(fd, buffers)
    os.writev = writev


if __name__ == "__main__":
    fault, amount, args = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    {"replace": _fail_nth_shard_rename, "enospc": _full_disk_after}[fault](amount)
    main(args)
