"""fileio: the shard writer's vectored, hashed writes and the atomic small-file writes."""
from __future__ import annotations

import hashlib
import os

import numpy as np

from carla_wds.fileio import HashingWriter, atomic_write_json, sha256_file, writev_all


def _parts(rng: np.random.Generator, n: int) -> list[bytes]:
    sizes = rng.choice([0, 1, 511, 512, 4096, 200_000], size=n)
    return [rng.integers(0, 256, int(s), dtype=np.uint8).tobytes() for s in sizes]


def test_writev_all_writes_every_part_in_order(tmp_path):
    """More parts than IOV_MAX (1024), empty parts and large ones."""
    parts = _parts(np.random.default_rng(0), 2500)
    path = tmp_path / "out.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        writev_all(fd, parts)
    finally:
        os.close(fd)
    assert path.read_bytes() == b"".join(parts)


def test_hashing_writer_hash_size_and_bytes(tmp_path):
    """Writeback requested after every write (writeback_bytes=1) changes nothing in the bytes."""
    rng = np.random.default_rng(1)
    batches = [_parts(rng, int(rng.integers(1, 20))) for _ in range(40)]
    for writeback in (None, 1):
        path = tmp_path / f"out-{writeback}.bin"
        with open(path, "wb", buffering=0) as f:
            writer = HashingWriter(f.fileno(), writeback_bytes=writeback)
            for parts in batches:
                writer.write_parts(parts)
            digest = writer.hexdigest()
        expected = b"".join(b"".join(p) for p in batches)
        assert path.read_bytes() == expected
        assert writer.size == len(expected)
        assert digest == hashlib.sha256(expected).hexdigest() == sha256_file(path)


def test_hashing_writer_hashes_what_was_written_even_from_mutable_buffers(tmp_path):
    buf = bytearray(b"a" * 1000)
    with open(tmp_path / "x", "wb", buffering=0) as f:
        writer = HashingWriter(f.fileno())
        writer.write_parts([buf])
        buf[:] = b"b" * 1000    # changed after the write: the hash must not see it
        digest = writer.hexdigest()
    assert digest == hashlib.sha256(b"a" * 1000).hexdigest()


def test_atomic_write_leaves_no_temporary_and_is_readable(tmp_path):
    path = atomic_write_json(tmp_path / "sub" / "m.json", {"b": 1, "a": [1, 2]})
    assert path.read_text() == '{\n  "a": [\n    1,\n    2\n  ],\n  "b": 1\n}\n'
    assert [p.name for p in path.parent.iterdir()] == ["m.json"]
    assert oct(path.stat().st_mode & 0o777) in ("0o644", "0o664", "0o666")
