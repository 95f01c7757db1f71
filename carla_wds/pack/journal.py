"""The pack journal (`.pack-journal.jsonl`): what --resume needs to finish an interrupted pack.

Line 1 holds the options that decide the output bytes; each later line one committed shard, in
order (shards.JournalEntry), written only after the shard is durable under its name. A resume
keeps those shards and starts the sample stream after the last one's `tasks` items, so nothing
that went into them is read or encoded again.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..fileio import atomic_write_bytes
from .routes import PackError
from .shards import JOURNAL, JournalEntry, ShardRecord, shard_name

OVERWRITE = "Fix: pack again with --overwrite"


def write_header(out: Path, identity: dict[str, Any]) -> None:
    atomic_write_bytes(out / JOURNAL, (json.dumps({"options": identity}) + "\n").encode())


def committed_shards(out: Path) -> int:
    """Shards the journal in `out` lists (0 when there is no journal)."""
    try:
        return max(0, len((out / JOURNAL).read_text().splitlines()) - 1)
    except FileNotFoundError:
        return 0


def read_journal(out: Path, identity: dict[str, Any], prefix: str) -> list[JournalEntry]:
    """The committed shards of an interrupted pack in `out`, checked against the disk."""
    journal = out / JOURNAL
    lines, cut = [], False
    for line in journal.read_text().splitlines():
        try:
            lines.append(json.loads(line))
        except json.JSONDecodeError:
            cut = True   # the last line was cut short by the kill; its shard is redone
            break
    saved = lines[0].get("options") if lines else None
    if saved != json.loads(json.dumps(identity)):
        raise PackError(f"--resume: {journal} was written with options {saved}, now "
                        f"{identity}. Fix: resume with the same options, or --overwrite")
    done = [_entry(line, journal, i, prefix) for i, line in enumerate(lines[1:])]
    for entry in done:
        path = out / entry.shard.name
        # The size, not the sha256: the entry was written after its shard was fsynced and
        # renamed, so only a later outside change can make them differ, and re-hashing every
        # committed byte would cost a resume what re-packing costs; `verify` hashes them.
        if not path.is_file() or path.stat().st_size != entry.shard.bytes:
            raise PackError(f"--resume: shard {path} is missing or differs in size from the "
                            f"journal ({entry.shard.bytes} bytes). {OVERWRITE}")
    if cut:   # drop the cut line, or the lines a resumed pack appends would follow garbage
        atomic_write_bytes(journal, "".join([json.dumps(lines[0]) + "\n"]
                                            + [e.line() for e in done]).encode())
    return done


def _entry(line: dict[str, Any], journal: Path, i: int, prefix: str) -> JournalEntry:
    try:
        entry = JournalEntry(ShardRecord(**line["shard"]), int(line["tasks"]),
                             str(line["last_key"]), list(line["skipped"]), dict(line["meta"]))
    except (KeyError, TypeError, ValueError):
        raise PackError(f"--resume: line {i + 2} of {journal} is not a shard entry this "
                        f"carla-wds writes (an older version?). {OVERWRITE}") from None
    # Entries are consecutive by construction (a failed commit stops all later ones); a gap
    # or repeat would make the resumed manifest list a shard twice and lose another.
    if entry.shard.name != shard_name(prefix, i):
        raise PackError(f"--resume: entry {i} of {journal} names {entry.shard.name}, expected "
                        f"{shard_name(prefix, i)}; the journal has a gap or repeat. {OVERWRITE}")
    return entry
