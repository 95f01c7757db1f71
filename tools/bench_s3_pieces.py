"""tools/bench_s3.py's helpers for timing one shard's fetch piece by piece: a median, a timer,
ranged GETs over plain HTTP, and the cache's write + rename. See bench_s3.py's docstring.
"""
from __future__ import annotations

import http.client
import os
import statistics
import time
import urllib.parse
from pathlib import Path


def _mid(values: list[float]) -> float:
    return statistics.median(values)


def _timed(call, repeats: int) -> float:
    """Median seconds of call() over repeats."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return _mid(times)


def _http_blocks(presigned: str, size: int, block: int) -> None:
    """The shard in ranged GETs of `block` bytes over one plain HTTP connection, to a URL
    signed beforehand: moto's own handling and the loopback, without an S3 client."""
    where = urllib.parse.urlsplit(presigned)
    conn = http.client.HTTPConnection(where.hostname, where.port, timeout=30)
    try:
        for off in range(0, size, block):
            end = min(size, off + block) - 1
            conn.request("GET", f"{where.path}?{where.query}",
                         headers={"Range": f"bytes={off}-{end}"})
            resp = conn.getresponse()
            if resp.status != 206 or len(resp.read()) != end - off + 1:
                raise SystemExit(f"{where.path}: ranged GET answered {resp.status}")
    finally:
        conn.close()


def _copy(data: bytes, dest: Path) -> None:
    """What the cache does with checked bytes: a temporary file, then a rename."""
    tmp = dest.with_suffix(".temp")
    with open(tmp, "wb") as f:
        for off in range(0, len(data), 8 << 20):
            f.write(data[off:off + (8 << 20)])
    os.replace(tmp, dest)
