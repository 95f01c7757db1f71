"""Where a pack's shards, journal and manifest go: a local folder (LocalOutput), or an s3://
prefix with a local staging folder (upload.StoreOutput). Both refuse to clobber what is
there without --resume or --overwrite, and a pack that fails before its first shard is
committed leaves the output as it found it."""
from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Any, Protocol

from ..fileio import atomic_write_json
from ..manifest import MANIFEST
from ..dirlock import try_lock
from .journal import committed_shards, read_journal, write_header
from .options import PackOptions
from .routes import PackError
from .shards import JOURNAL, JournalEntry, Publisher, output_error


class Output(Protocol):
    """Where one pack writes: `out` is the local folder of the journal and the shards (the
    output itself, or its staging folder), `label` what messages call the output."""
    out: Path
    label: str
    publisher: Publisher | None

    def prepare(self, opts: PackOptions) -> list[JournalEntry]: ...

    def start_journal(self, opts: PackOptions) -> None: ...

    def write_manifest(self, manifest: dict[str, Any]) -> None: ...

    def discard(self) -> None: ...


def write_or_explain(path: Path, out: Path, write) -> None:
    try:
        write()
    except OSError as exc:
        raise output_error(path, exc, out) from exc


log = logging.getLogger(__name__)
PACK_LOCK = ".carla-wds-pack.lock"


class OutputLock:
    """An exclusive flock on folder/PACK_LOCK for one pack; PackError while another live pack
    holds it. The file is deleted when the pack ends (runlock.try_lock retakes a lock whose
    file went away meanwhile); one left by a killed pack holds no lock and blocks nothing."""

    def __init__(self, folder: Path, label: str) -> None:
        self.path, self.fd = folder / PACK_LOCK, None
        try:
            self.fd, holder = try_lock(self.path)
        except OSError as exc:   # no flock on this file system: pack unguarded, as before
            log.warning("%s: cannot lock %s (%s); nothing stops a second pack into it",
                        label, self.path, exc)
            return
        if self.fd is None:
            pid, host = holder.get("pid", "unknown"), holder.get("host", "this host")
            since = f" since {holder['started']}" if holder.get("started") else ""
            raise PackError(f"{label} is being written by another carla-wds pack (pid {pid} "
                            f"on {host}{since}; lock {self.path}). Fix: wait for it to "
                            f"finish, stop it (kill {pid}), or choose another output")

    def release(self) -> None:
        if self.fd is not None:
            self.path.unlink(missing_ok=True)   # while still held: see try_lock
            os.close(self.fd)
            self.fd = None


class LocalOutput:
    """OUTPUT_DIR on a local file system: shards, journal and manifest in one folder."""
    publisher: Publisher | None = None

    def __init__(self, out: Path) -> None:
        self.out, self.label = out, str(out)
        self.created, self.wrote_journal = not out.exists(), False
        out.mkdir(parents=True, exist_ok=True)   # to hold the lock; discard() removes it
        try:
            self.lock = OutputLock(out, f"OUTPUT_DIR {out}")
        except PackError:
            if self.created:
                out.rmdir()
            raise

    def prepare(self, opts: PackOptions) -> list[JournalEntry]:
        """Refuse to clobber, clear for --overwrite, or load the journal for --resume."""
        out = self.out
        out.mkdir(parents=True, exist_ok=True)
        existing = [p for p in out.iterdir() if p.name != PACK_LOCK]
        if existing and not (opts.resume or opts.overwrite):
            raise PackError(f"OUTPUT_DIR {out} is not empty ({len(existing)} entries). Fix: "
                            "pass --resume to continue an interrupted pack, --overwrite to "
                            "replace it, or choose an empty folder")
        if opts.overwrite:
            for p in existing:
                shutil.rmtree(p) if p.is_dir() else p.unlink()
        for p in out.glob(".*.tmp"):
            p.unlink()   # a half-written shard from a killed pack
        if not opts.resume:
            return []
        if not (out / JOURNAL).exists():
            if (out / MANIFEST).exists():
                raise PackError(f"{out} holds a finished pack (manifest.json); nothing to "
                                "resume. Use --overwrite to pack again")
            return []
        return read_journal(out, opts.identity(), opts.prefix)

    def start_journal(self, opts: PackOptions) -> None:
        write_or_explain(self.out / JOURNAL, self.out,
                         lambda: write_header(self.out, opts.identity()))
        self.wrote_journal = True

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        """The manifest, last and atomically; then the journal has done its part."""
        out = self.out
        write_or_explain(out / MANIFEST, out, lambda: atomic_write_json(out / MANIFEST, manifest))
        (out / JOURNAL).unlink(missing_ok=True)
        self.lock.release()

    def discard(self) -> None:
        """After a failure: a pack that committed no shard leaves nothing to resume, so drop
        the journal it wrote (else the corrected rerun is told the folder is not empty) and
        the folder if it made it. A journal this run did not write is never touched."""
        out = self.out
        self.lock.release()
        if not out.is_dir() or committed_shards(out):
            return
        if self.wrote_journal:
            (out / JOURNAL).unlink(missing_ok=True)
        if self.created and not any(out.iterdir()):
            out.rmdir()
