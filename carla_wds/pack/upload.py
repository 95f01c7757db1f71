"""OUTPUT_DIR as an s3:// (or other fsspec) prefix: `carla-wds pack RAW s3://bucket/prefix`.

Each shard is written to a local staging folder exactly as a local pack writes it (a temporary
name, fsync, rename), uploaded, checked where it landed (its size and the sha256 of its bytes
read back, objwrite.py), journaled in the staging folder's journal, which is then copied to
the store, and only then deleted locally. The manifest is uploaded last, after every shard,
in one PUT, and the journal's copy is deleted. So the staging folder holds at most
shards.PUBLISH_AHEAD + 1 = 3 shards (one being written, two finished and waiting for their
upload), the journal and the pack's lock (output.OutputLock), whatever the size of the pack.

--resume reads the journal in the staging folder, or the store's copy where that lists more
shards (a pack resumed on another machine, whose staging folder is empty): the shards it
lists must be in the store with their journaled size; objects of later shards (uploaded, but
not journaled before a kill) are deleted and packed again, to the same bytes.
"""
from __future__ import annotations

import hashlib
import logging
import os
import re
from pathlib import Path
from typing import Any

from ..fileio import atomic_write_bytes
from ..manifest import MANIFEST
from ..objwrite import StoreWriter, json_bytes
from ..remote import RemoteError
from .journal import committed_shards, read_journal, write_header
from .options import PackOptions
from .output import PACK_LOCK, OutputLock, write_or_explain
from .routes import PackError
from .shards import JOURNAL, JournalEntry, ShardRecord

log = logging.getLogger(__name__)
JOURNAL_LIMIT = 256 << 20   # a journal line is about 1 kB: 256 MB is 250,000 shards


def default_stage(url: str) -> Path:
    """$XDG_CACHE_HOME (or ~/.cache)/carla-wds/stage/<sha256 of the URL, 16 hex>: one folder
    per output, so a --resume finds the journal of the pack it continues."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "carla-wds" / "stage" / hashlib.sha256(url.encode()).hexdigest()[:16]


def _shard_names(prefix: str, names: list[str]) -> list[str]:
    rule = re.compile(rf"^{re.escape(prefix)}-\d{{6}}\.tar$")
    return sorted(n for n in names if rule.match(n))


class StoreOutput:
    """OUTPUT_DIR on an object store; `out` is the local staging folder (the sink's folder)."""

    def __init__(self, url: str, opts: PackOptions) -> None:
        self.url = self.label = url.rstrip("/")
        self.store = StoreWriter(self.url, opts.remote(),
                                 "pack output")
        self.default = opts.stage is None
        self.out = default_stage(self.url) if self.default else Path(opts.stage)
        self.publisher = self
        self.prefix = opts.prefix
        self.made: list[Path] = []   # folders this run created, deepest first
        self.wrote_journal = self.fresh = False
        self._make_stage()   # to hold the lock: one pack at a time stages for this output
        try:
            self.lock = OutputLock(self.out, f"OUTPUT_DIR {self.url} (staging folder "
                                             f"{self.out})")
        except PackError:
            self._tidy(remove_stage=False)
            raise

    def prepare(self, opts: PackOptions) -> list[JournalEntry]:
        """Refuse a busy output, clear it for --overwrite, or load the journal for --resume.
        Nothing but the staging folder and its lock is written before the store has
        answered (credentials, bucket)."""
        held = self.store.listing()
        staged = sorted(p for p in self.out.iterdir() if p.name != PACK_LOCK)
        foreign = [p for p in staged if not self._ours(p)]
        if foreign:   # --overwrite and --resume clear staged files: never a user's own
            raise PackError(f"the staging folder {self.out} holds {len(foreign)} entries a "
                            f"pack did not write, e.g. {foreign[0].name}. Fix: pass an empty "
                            "--stage folder (or none, for one under the cache folder)")
        if (held or staged) and not (opts.resume or opts.overwrite):
            raise PackError(self._busy(held, staged))
        if opts.resume or opts.overwrite:
            self.store.abort_unfinished()
        if opts.overwrite:
            self.store.remove(sorted(held))
            held = {}
            for p in staged:
                p.unlink()
        copy = self._journal_copy(held) if opts.resume else None
        journal = opts.resume and (copy is not None or (self.out / JOURNAL).exists())
        if opts.resume and not journal and held:
            raise PackError(self._no_journal(held))
        took = copy is not None and self._take_newer(copy)
        for p in self._staged_shards():
            p.unlink()   # the journal says which shards are done; these are redone
        self.fresh = not held
        if not journal:
            return []
        try:
            done = read_journal(self.out, opts.identity(), opts.prefix, self.url, held)
        except PackError:
            if took:   # a refused resume leaves no copy of the store's journal behind
                (self.out / JOURNAL).unlink()
                self._tidy(remove_stage=self.default)
            raise
        journaled = {e.shard.name for e in done}
        # uploaded before the kill but never journaled: packed again, so not kept meanwhile
        self.store.remove([n for n in _shard_names(self.prefix, list(held))
                           if n not in journaled])
        return done

    def _journal_copy(self, held: dict[str, int]) -> bytes | None:
        """The store's copy of the journal (None when there is none), read within the bound
        that a journal's size has."""
        if JOURNAL not in held:
            return None
        if held[JOURNAL] > JOURNAL_LIMIT:
            raise PackError(f"--resume: {self.store.url_of(JOURNAL)} holds {held[JOURNAL]} "
                            f"bytes, more than any journal ({JOURNAL_LIMIT} bytes); carla-wds "
                            "did not write it. Fix: --overwrite, or choose an empty prefix")
        return self.store.get_bytes(JOURNAL, held[JOURNAL])

    def _take_newer(self, copy: bytes) -> bool:
        """Keep the journal that lists more shards: the store's copy is the newer one when the
        pack went on from another staging folder (another machine). Whether it was taken."""
        local = self.out / JOURNAL
        mine = local.read_bytes() if local.exists() else b""
        if copy.count(b"\n") <= mine.count(b"\n"):
            return False
        write_or_explain(local, self.out, lambda: atomic_write_bytes(local, copy))
        log.info("--resume: the journal of %s comes from its copy in the store", self.url)
        return True

    def _busy(self, held: dict[str, int], staged: list[Path]) -> str:
        what = []
        if held:
            what.append(f"{self.url} already holds {len(held)} object(s), e.g. {min(held)}")
        if staged:
            what.append(f"its staging folder {self.out} holds {len(staged)} entries")
        return ("; ".join(what) + ". Fix: pass --resume to continue an interrupted pack, "
                "--overwrite to replace it, or choose an empty prefix (and --stage folder)")

    def _no_journal(self, held: dict[str, int]) -> str:
        if MANIFEST in held:
            return (f"{self.url} holds a finished pack (manifest.json); nothing to resume. "
                    "Fix: pass --overwrite to pack again, or choose an empty prefix")
        return (f"--resume: {self.url} holds {len(held)} object(s) but no journal of a "
                f"pack ({JOURNAL}), nor has the staging folder {self.out}. Fix: --overwrite to "
                "pack again, or choose an empty prefix")

    def _make_stage(self) -> None:
        p, missing = self.out, []
        while not p.exists():
            missing.append(p)
            p = p.parent
        self.out.mkdir(parents=True, exist_ok=True)
        self.made = missing

    def _staged_shards(self) -> list[Path]:
        return [p for p in self.out.iterdir()
                if self._ours(p) and p.name not in (JOURNAL, PACK_LOCK)]

    def _ours(self, path: Path) -> bool:
        """A file a pack writes in its staging folder: the journal, a shard of this prefix,
        or a shard's temporary name (shards.ShardSink: .<shard>.tmp), or the pack's lock."""
        name = path.name
        if name.startswith(".") and name.endswith(".tmp"):
            name = name[1:-len(".tmp")]
        return path.is_file() and (path.name in (JOURNAL, PACK_LOCK) or
                                   bool(_shard_names(self.prefix, [name])))

    def start_journal(self, opts: PackOptions) -> None:
        write_or_explain(self.out / JOURNAL, self.out,
                         lambda: write_header(self.out, opts.identity(), self.url))
        self.wrote_journal = True

    def publish(self, path: Path, record: ShardRecord) -> None:
        """On the committer thread: upload a staged shard and check what landed."""
        self.store.put_file(path, record.name, record.bytes, record.sha256)

    def journaled(self, journal: Path) -> None:
        """On the committer thread, after a shard's journal line: the store's copy of the
        journal, for a --resume whose staging folder does not hold it."""
        self.store.put_bytes(JOURNAL, journal.read_bytes())

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        """The manifest, uploaded after every shard (a reader sees it whole or not at all);
        then the journal and the staging folder have done their part."""
        self.store.put_bytes(MANIFEST, json_bytes(manifest))
        try:
            self.store.remove([JOURNAL])
        except RemoteError as exc:   # the pack is whole: its manifest landed
            log.warning("the pack is complete, but its journal's copy %s could not be "
                        "deleted (%s); delete it by hand", self.store.url_of(JOURNAL), exc)
        (self.out / JOURNAL).unlink(missing_ok=True)
        self.lock.release()
        self._tidy(remove_stage=True)

    def _tidy(self, remove_stage: bool) -> None:
        """Remove the staging folder if it is empty and ours to remove (made by this run, or
        the default one with its carla-wds/stage parents), and the empty parents this run
        made."""
        folders = list(self.made)
        if remove_stage and self.default:   # .../carla-wds/stage/<hash>: ours, when empty
            ours = [self.out, self.out.parent, self.out.parent.parent]
            folders = ours + [p for p in folders if p not in ours]
        for p in folders:
            try:
                p.rmdir()
            except OSError:
                break   # not empty (or already gone): its parents are not empty either

    def discard(self) -> None:
        """After a failure: a pack that committed no shard leaves nothing behind (no journal,
        no staging folder it made, and, for an output that was empty, no shard objects); one
        that did keeps it all for --resume."""
        self.lock.release()
        if not self.out.is_dir() or committed_shards(self.out):
            return
        if self.wrote_journal:
            (self.out / JOURNAL).unlink(missing_ok=True)
            for p in self._staged_shards():
                p.unlink()
        if self.fresh:
            try:
                self.store.remove(_shard_names(self.prefix, list(self.store.listing())))
            except RemoteError as exc:
                log.warning("could not remove the shards of the failed pack: %s", exc)
        self._tidy(remove_stage=self.wrote_journal)
