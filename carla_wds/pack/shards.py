"""Writing reproducible tar shards, each one atomically.

The bytes are those webdataset's `TarWriter` writes (members `<key>.<suffix>` in sorted suffix
order, PAX format, mtime 0, mode 0644, empty owner names), but written directly: `TarWriter`'s
"w|" stream re-slices its buffer every 10 KB (a copy of the rest of each image per slice),
`tarfile` spends ~40 us of Python per member header, and importing webdataset pulls in torch
(seconds in every pack worker). `_member_header` reproduces tarfile's header bytes exactly.

Shard boundaries depend only on the ordered sample stream, `max_samples` and `max_bytes`, never
on timing or worker count, which is what makes packs byte-identical and resumable: the journal
says how far into the stream each committed shard reached, so --resume starts the stream after
the last one without reading (or encoding) what went into them.
"""
from __future__ import annotations

import errno
import json
import os
import tarfile
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..fileio import HashingWriter, fsync_dir
from ..remote import RemoteError
from ..sequence import StepCounter
from .buckets import BucketCounter
from .routes import PackError

TAR_BLOCK = 512
TAR_RECORD = 20 * TAR_BLOCK   # tarfile pads a closed stream to whole 10240-byte records
JOURNAL = ".pack-journal.jsonl"
_ZEROS = bytes(TAR_BLOCK)
PUBLISH_AHEAD = 2   # finished shards a publisher may lag behind the one being written
# With fsync on, ask the kernel to start writing every this many bytes (sync_file_range), so
# the fsync before a shard's rename waits for the tail only; None: no early writeback.
WRITEBACK_BYTES: int | None = 32 << 20


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
    # where routes begin and break (sequence.py; issue 27): the loader's history windows
    first_key: str = ""
    last_key: str = ""
    steps: dict[str, int] = field(default_factory=dict)
    # each sample's bucket values, run-length encoded (pack/buckets.py; issue 29)
    buckets: dict[str, list] = field(default_factory=dict)


@dataclass
class JournalEntry:
    """One committed shard as the journal records it: enough for --resume to skip the shard's
    input without reading it. `tasks` counts the items of the stream (samples and skipped
    frames) up to and including the shard's last sample, `skipped` holds the items skipped
    since the previous shard's last sample, `meta` what the pack asked to keep (image sizes)."""
    shard: ShardRecord
    tasks: int
    last_key: str
    skipped: list[dict[str, Any]] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        return json.dumps({"shard": asdict(self.shard), "tasks": self.tasks,
                           "last_key": self.last_key, "skipped": self.skipped,
                           "meta": self.meta}) + "\n"


class Publisher(Protocol):
    """Where a committed shard goes besides OUTPUT_DIR (which then only stages it): `publish`
    puts it there and checks it, raising OSError (RemoteError) when it cannot; `journaled`
    follows each shard's journal line, so that the journal can be kept there too."""

    def publish(self, path: Path, record: ShardRecord) -> None: ...

    def journaled(self, journal: Path) -> None: ...


def output_error(path: Path, exc: OSError, out_dir: Path) -> PackError:
    """A failed write to OUTPUT_DIR as a one-line error naming the file and the way on."""
    what = f"[Errno {exc.errno}] {exc.strerror}" if exc.errno else str(exc)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        fix = f"free space on the disk that holds {out_dir}"
    else:
        fix = f"make {out_dir} writable (or repair its disk)"
    return PackError(f"writing {path} failed: {what}. Fix: {fix}, then run the same command "
                     "with --resume; the shards committed so far are kept")


class ShardSink:
    """Receives the ordered stream (encoded samples and skipped frames) and cuts the samples
    into shards.

    `done` holds the journal entries of shards already complete on disk (--resume): the caller
    feeds only the stream after the last of them, and numbering goes on from there.
    """

    def __init__(self, out_dir: Path, prefix: str, max_samples: int, max_bytes: int | None,
                 done: list[JournalEntry] | None = None, fsync: bool = True,
                 publisher: Publisher | None = None, route_shards: bool = False) -> None:
        if max_samples < 1:
            raise ValueError(f"max_samples must be >= 1, got {max_samples}")
        self.out_dir, self.prefix = Path(out_dir), prefix
        self.max_samples, self.max_bytes = max_samples, max_bytes
        self.fsync, self.route_shards = fsync, route_shards
        self.meta: dict[str, Any] = {}   # copied into each journal entry
        self.buckets: BucketCounter | None = None   # set by the packer (pack/buckets.py)
        done = list(done or [])
        self.records: list[ShardRecord | Future] = [e.shard for e in done]
        self._tasks = self._through = done[-1].tasks if done else 0   # through: last sample's
        self._last_key = ""
        self._first_key = ""   # of the open shard
        self._steps = StepCounter(done[-1].last_key if done else "")
        self._pending: list[dict] = []       # skipped since the last sample
        self._shard_skips: list[dict] = []   # skipped before a sample of the open shard
        self._count = self._bytes = 0
        self._file = self._hasher = None
        self._tmp: Path | None = None
        self._error: PackError | None = None   # set by the committer thread
        # One committer thread: fsync, rename and journal each finished shard, in order, while
        # the next shard is being written (the fsync wait was a quarter of the pack time).
        self._committer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="shard-commit")
        # With a publisher, a finished shard waits for at most PUBLISH_AHEAD shards ahead of it
        # to be published: the staging folder then holds at most PUBLISH_AHEAD + 1 shards.
        self.publisher = publisher
        self._slots = threading.BoundedSemaphore(PUBLISH_AHEAD) if publisher else None

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

    def _raise_if_failed(self) -> None:
        """A commit that failed on the committer thread stops the pack at the next sample."""
        if self._error is not None:
            raise self._error

    def skip(self, record: dict[str, Any]) -> None:
        """A frame of the stream that became no sample; journaled with the shard it precedes."""
        self._tasks += 1
        self._pending.append(record)

    def add(self, sample: dict[str, Any]) -> None:
        self._raise_if_failed()
        size = tar_size(sample) if self.max_bytes is not None else 0   # only cuts need it
        full = self._count >= self.max_samples or (
            self.max_bytes is not None and archive_size(self._bytes + size) > self.max_bytes) or (
            self.route_shards and self._count >= self.max_samples // 2
            and not self._steps.same_route(sample["__key__"]))
        try:
            if self._count and full:
                self._finish()
            if self._count == 0:
                self._start()
                self._first_key = sample["__key__"]
            self._write_sample(sample)
        except OSError as exc:
            raise output_error(self._tmp, exc, self.out_dir) from exc
        self._count += 1
        self._bytes += size
        self._tasks += 1
        self._through, self._last_key = self._tasks, sample["__key__"]
        self._steps.add(sample["__key__"])
        if self.buckets is not None:
            self.buckets.add(sample)
        self._shard_skips += self._pending
        self._pending = []

    def close(self) -> list[ShardRecord]:
        self._raise_if_failed()
        if self._count:
            try:
                self._finish()
            except OSError as exc:
                raise output_error(self._tmp, exc, self.out_dir) from exc
        self._committer.shutdown(wait=True)
        self._raise_if_failed()
        self.records = [r.result() if isinstance(r, Future) else r for r in self.records]
        return self.records

    def _start(self) -> None:
        name = shard_name(self.prefix, len(self.records))
        self._tmp = self.out_dir / f".{name}.tmp"
        self._file = open(self._tmp, "wb", buffering=0)
        self._hasher = HashingWriter(self._file.fileno(),
                                     writeback_bytes=WRITEBACK_BYTES if self.fsync else None)

    def _finish(self) -> None:
        # End of archive as tarfile writes it: two zero blocks, then zeros to a whole record.
        end = 2 * TAR_BLOCK
        self._hasher.write_parts([bytes(end + -(self._hasher.size + end) % TAR_RECORD)])
        entry = JournalEntry(ShardRecord(shard_name(self.prefix, len(self.records)),
                                         self._count, 0, "", self._first_key, self._last_key,
                                         self._steps.take(),
                                         self.buckets.take() if self.buckets else {}),
                             self._through, self._last_key, self._shard_skips,
                             {**self.meta, **({"buckets_state": self.buckets.state()}
                                              if self.buckets else {})})
        if self._slots is not None:
            self._slots.acquire()   # released once a shard ahead is published (or failed)
        self.records.append(self._committer.submit(self._commit, self._file, self._hasher,
                                                   self._tmp, entry))
        self._file = self._hasher = None
        self._shard_skips = []
        self._count = self._bytes = 0

    def _commit(self, f, hasher: HashingWriter, tmp: Path, entry: JournalEntry
                ) -> ShardRecord | None:
        """Runs on the committer thread: the shard becomes visible only once it is durable
        (and, with a publisher, published and checked there).

        After one failure no later shard is renamed or journaled: --resume trusts the journal
        to list shards 0..k-1 with nothing missing in between."""
        try:
            if self._error is not None:
                f.close()
                hasher.close()
                tmp.unlink(missing_ok=True)
                return None
            return self._commit_one(f, hasher, tmp, entry)
        finally:
            if self._slots is not None:
                self._slots.release()

    def _commit_one(self, f, hasher: HashingWriter, tmp: Path, entry: JournalEntry
                    ) -> ShardRecord:
        path = tmp
        try:
            if self.fsync:
                os.fsync(f.fileno())
            f.close()
            path = self.out_dir / entry.shard.name
            os.replace(tmp, path)
            if self.fsync:
                fsync_dir(self.out_dir)
            entry.shard.bytes, entry.shard.sha256 = hasher.size, hasher.hexdigest()
            if self.publisher is not None:
                self.publisher.publish(path, entry.shard)
            staged, path = path, self.journal
            with open(self.journal, "a") as j:
                j.write(entry.line())
                j.flush()
                if self.fsync:
                    os.fsync(j.fileno())
            if self.publisher is not None:
                self.publisher.journaled(self.journal)
                staged.unlink()   # published and journaled: the staged copy has done its part
        except OSError as exc:
            f.close()
            hasher.close()
            tmp.unlink(missing_ok=True)
            if self.publisher is not None:
                (self.out_dir / entry.shard.name).unlink(missing_ok=True)
            self._error = output_error(path, exc, self.out_dir) if not isinstance(
                exc, RemoteError) else PackError(f"{exc} Then run the same command with "
                                                 "--resume; the shards uploaded so far are kept")
            raise self._error from exc
        return entry.shard

    def abort(self) -> None:
        """Drop a half-written shard (on error) so no partial file keeps a shard's name."""
        if self._file is not None:
            self._hasher.close()
            self._file.close()
            Path(self._tmp).unlink(missing_ok=True)
            self._file = self._hasher = None
        self._committer.shutdown(wait=True)   # finished shards still land, whole
