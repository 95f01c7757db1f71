"""Writing reproducible tar shards, each one atomically.

The bytes are those webdataset's `TarWriter` writes (members `<key>.<suffix>` in sorted suffix
order, PAX format, mtime 0, mode 0644, empty owner names), but written directly: `TarWriter`'s
"w|" stream re-slices its buffer every 10 KB (a copy of the rest of each image per slice),
`tarfile` spends ~40 us of Python per member header, and importing webdataset pulls in torch
(seconds in every pack worker). `_member_header` reproduces tarfile's header bytes exactly.

Shard boundaries depend only on the ordered sample stream, `max_samples` and `max_bytes`, never
on timing or worker count, which is what makes packs byte-identical and resumable: on resume the
sink replays the boundaries of the shards already on disk without writing them.
"""
from __future__ import annotations

import json
import os
import tarfile
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .fileio import HashingWriter, fsync_dir

TAR_BLOCK = 512
TAR_RECORD = 20 * TAR_BLOCK   # tarfile pads a closed stream to whole 10240-byte records
JOURNAL = ".pack-journal.jsonl"
_ZEROS = bytes(TAR_BLOCK)


def _padded(n: int) -> int:
    return -(-n // TAR_BLOCK) * TAR_BLOCK


def _header_size(name: str) -> int:
    """A member's header bytes. Shards are PAX tars, as webdataset's TarWriter writes them (its
    `format` argument is not used): a name over 100 characters gets an extended header (a block
    plus its padded record) first."""
    if len(name) <= 100:
        return TAR_BLOCK
    n = len(f" path={name}\n".encode("utf-8"))
    length = n + len(str(n))
    length = n + len(str(length))
    return TAR_BLOCK + _padded(length) + TAR_BLOCK


def tar_size(sample: dict[str, Any]) -> int:
    """Bytes a sample takes in the tar stream: header(s) plus padded data per member."""
    key = str(sample.get("__key__", ""))
    return sum(_header_size(f"{key}.{k}") + _padded(len(v))
               for k, v in sample.items() if not k.startswith("__"))


def _tarinfo(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode, info.uname, info.gname = size, 0, 0o644, "", ""
    return info


def _pax_header(name: str, size: int) -> bytes:
    """What tarfile (PAX format, as TarFile.addfile uses it) writes before a member's data."""
    return _tarinfo(name, size).tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")


_TEMPLATE = bytearray(_pax_header("", 0))
_TEMPLATE[148:156] = b" " * 8      # the checksum is computed with its own field as spaces


def _member_header(name: str, size: int) -> bytes:
    """tarfile's header for a member, from a template in the common case (short ASCII name)."""
    raw = name.encode("utf-8")
    if len(raw) > 100 or not raw.isascii() or size >= 8 ** 11:
        return _pax_header(name, size)   # needs an extended header; let tarfile build it
    buf = bytearray(_TEMPLATE)
    buf[:len(raw)] = raw
    buf[124:136] = b"%011o\0" % size
    buf[148:156] = b"%06o\0 " % sum(buf)
    return bytes(buf)


def archive_size(payload: int) -> int:
    """Bytes of a closed shard holding `payload` bytes of members: end blocks, record padding."""
    return -(-(payload + 2 * TAR_BLOCK) // TAR_RECORD) * TAR_RECORD


def shard_name(prefix: str, index: int) -> str:
    return f"{prefix}-{index:06d}.tar"


@dataclass
class ShardRecord:
    name: str
    samples: int
    bytes: int
    sha256: str


class ShardSink:
    """Receives encoded samples in order and cuts them into shards.

    `done` holds records of shards already complete on disk (from the journal); their samples
    are counted against the journal instead of being written again.
    """

    def __init__(self, out_dir: Path, prefix: str, max_samples: int, max_bytes: int | None,
                 done: list[ShardRecord] | None = None, fsync: bool = True) -> None:
        if max_samples < 1:
            raise ValueError(f"max_samples must be >= 1, got {max_samples}")
        self.out_dir, self.prefix = Path(out_dir), prefix
        self.max_samples, self.max_bytes = max_samples, max_bytes
        self.done = list(done or [])
        self.fsync = fsync
        self.records: list[ShardRecord | Future] = []
        self._count = self._bytes = 0
        self._file = self._hasher = None
        # One committer thread: fsync, rename and journal each finished shard, in order, while
        # the next shard is being written (the fsync wait was a quarter of the pack time).
        self._committer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="shard-commit")

    def _write_sample(self, sample: dict[str, Any]) -> None:
        key, parts = sample["__key__"], []
        for suffix in sorted(sample):
            if suffix.startswith("_"):
                continue
            data = sample[suffix]
            # images go out as they are, never copied: header, data and padding are parts
            parts += (_member_header(f"{key}.{suffix}", len(data)), data,
                      _ZEROS[:-len(data) % TAR_BLOCK])
        self._hasher.write_parts(parts)

    @property
    def journal(self) -> Path:
        return self.out_dir / JOURNAL

    def add(self, sample: dict[str, Any]) -> None:
        size = tar_size(sample) if self.max_bytes is not None else 0   # only cuts need it
        full = self._count >= self.max_samples or (
            self.max_bytes is not None and archive_size(self._bytes + size) > self.max_bytes)
        if self._count and full:
            self._finish()
        if self._count == 0:
            self._start()
        if self._hasher is not None:
            self._write_sample(sample)
        self._count += 1
        self._bytes += size

    def close(self) -> list[ShardRecord]:
        if self._count:
            self._finish()
        self._committer.shutdown(wait=True)
        self.records = [r.result() if isinstance(r, Future) else r for r in self.records]
        if len(self.records) < len(self.done):
            raise RuntimeError(f"the input gives {len(self.records)} shards but the interrupted "
                               f"pack had written {len(self.done)}; the input changed. "
                               "Fix: pack again with --overwrite")
        return self.records

    def _replaying(self) -> bool:
        return len(self.records) < len(self.done)

    def _start(self) -> None:
        if self._replaying():
            return
        name = shard_name(self.prefix, len(self.records))
        self._tmp = self.out_dir / f".{name}.tmp"
        self._file = open(self._tmp, "wb", buffering=0)
        self._hasher = HashingWriter(self._file.fileno(),
                                     writeback_bytes=32 << 20 if self.fsync else None)

    def _finish(self) -> None:
        index = len(self.records)
        if self._replaying():
            record = self.done[index]
            if record.samples != self._count:
                raise RuntimeError(f"shard {record.name} held {record.samples} samples before the "
                                   f"interruption but the input now gives {self._count}; the input "
                                   "changed. Fix: pack again with --overwrite")
        else:
            # End of archive as tarfile writes it: two zero blocks, then zeros to a whole record.
            end = 2 * TAR_BLOCK
            self._hasher.write_parts([bytes(end + -(self._hasher.size + end) % TAR_RECORD)])
            record = self._committer.submit(self._commit, self._file, self._hasher, self._tmp,
                                            shard_name(self.prefix, index), self._count)
            self._file = self._hasher = None
        self.records.append(record)
        self._count = self._bytes = 0

    def _commit(self, f, hasher: HashingWriter, tmp: Path, name: str, count: int) -> ShardRecord:
        """Runs on the committer thread: the shard becomes visible only once it is durable."""
        if self.fsync:
            os.fsync(f.fileno())
        f.close()
        os.replace(tmp, self.out_dir / name)
        if self.fsync:
            fsync_dir(self.out_dir)
        record = ShardRecord(name, count, hasher.size, hasher.hexdigest())
        with open(self.journal, "a") as j:
            j.write(json.dumps({"shard": record.__dict__}) + "\n")
            j.flush()
            if self.fsync:
                os.fsync(j.fileno())
        return record

    def abort(self) -> None:
        """Drop a half-written shard (on error) so no partial file keeps a shard's name."""
        if self._file is not None:
            self._hasher.close()
            self._file.close()
            Path(self._tmp).unlink(missing_ok=True)
            self._file = self._hasher = None
        self._committer.shutdown(wait=True)   # finished shards still land, whole
