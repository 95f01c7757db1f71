"""Writing reproducible tar shards with webdataset's TarWriter, each one atomically.

Shard boundaries depend only on the ordered sample stream, `max_samples` and `max_bytes`, never
on timing or worker count, which is what makes packs byte-identical and resumable: on resume the
sink replays the boundaries of the shards already on disk without writing them.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import webdataset as wds

from .fileio import HashingWriter, fsync_dir

TAR_BLOCK = 512
JOURNAL = ".pack-journal.jsonl"


def tar_size(sample: dict[str, Any]) -> int:
    """Bytes a sample takes in a ustar stream: a header plus padded data per member."""
    return sum(TAR_BLOCK + -(-len(v) // TAR_BLOCK) * TAR_BLOCK
               for k, v in sample.items() if not k.startswith("__"))


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
                 done: list[ShardRecord] | None = None) -> None:
        if max_samples < 1:
            raise ValueError(f"max_samples must be >= 1, got {max_samples}")
        self.out_dir, self.prefix = Path(out_dir), prefix
        self.max_samples, self.max_bytes = max_samples, max_bytes
        self.done = list(done or [])
        self.records: list[ShardRecord] = []
        self._count = self._bytes = 0
        self._file = self._hasher = self._writer = None

    @property
    def journal(self) -> Path:
        return self.out_dir / JOURNAL

    def add(self, sample: dict[str, Any]) -> None:
        size = tar_size(sample)
        full = self._count >= self.max_samples or (
            self.max_bytes is not None and self._bytes + size > self.max_bytes)
        if self._count and full:
            self._finish()
        if self._count == 0:
            self._start()
        if self._writer is not None:
            self._writer.write(sample)
        self._count += 1
        self._bytes += size

    def close(self) -> list[ShardRecord]:
        if self._count:
            self._finish()
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
        self._file = open(self._tmp, "wb")
        self._hasher = HashingWriter(self._file)
        # Fixed metadata: mtime 0, empty owner names, one mode, so equal input gives equal bytes.
        self._writer = wds.TarWriter(self._hasher, user="", group="", mode=0o644, mtime=0,
                                     encoder=False, format="USTAR_FORMAT")

    def _finish(self) -> None:
        index = len(self.records)
        if self._replaying():
            record = self.done[index]
            if record.samples != self._count:
                raise RuntimeError(f"shard {record.name} held {record.samples} samples before the "
                                   f"interruption but the input now gives {self._count}; the input "
                                   "changed. Fix: pack again with --overwrite")
        else:
            record = self._commit(index)
        self.records.append(record)
        self._count = self._bytes = 0

    def _commit(self, index: int) -> ShardRecord:
        self._writer.close()
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        name = shard_name(self.prefix, index)
        os.replace(self._tmp, self.out_dir / name)
        fsync_dir(self.out_dir)
        record = ShardRecord(name, self._count, self._hasher.size, self._hasher.sha.hexdigest())
        with open(self.journal, "a") as j:
            j.write(json.dumps({"shard": record.__dict__}) + "\n")
            j.flush()
            os.fsync(j.fileno())
        self._file = self._hasher = self._writer = None
        return record

    def abort(self) -> None:
        """Drop a half-written shard (on error) so no partial file keeps a shard's name."""
        if self._file is not None:
            self._file.close()
            Path(self._tmp).unlink(missing_ok=True)
            self._file = None
