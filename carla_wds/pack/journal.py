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

from ..codecs import json_loads
from ..fileio import atomic_write_bytes
from .routes import PackError
from .shards import JOURNAL, JournalEntry, ShardRecord, shard_name

OVERWRITE = "Fix: pack again with --overwrite"


def write_header(out: Path, identity: dict[str, Any], output: str | None = None) -> None:
    """`output`: where the shards go when that is not `out` (an s3:// prefix; `out` stages)."""
    header = {"options": identity, **({"output": output} if output else {})}
    atomic_write_bytes(out / JOURNAL, (json.dumps(header) + "\n").encode())


def committed_shards(out: Path) -> int:
    """Shards the journal in `out` lists (0 when there is no journal)."""
    try:
        return max(0, len((out / JOURNAL).read_text().splitlines()) - 1)
    except FileNotFoundError:
        return 0


def read_journal(out: Path, identity: dict[str, Any], prefix: str, output: str | None = None,
                 held: dict[str, int] | None = None) -> list[JournalEntry]:
    """The committed shards of an interrupted pack in `out`, checked against the disk, or,
    for a pack to `output` (an s3:// prefix), against `held`: the sizes of its objects."""
    journal = out / JOURNAL
    lines, cut = [], False
    for line in journal.read_text().splitlines():
        try:
            lines.append(json_loads(line.encode("utf-8"), str(journal)))
        except json.JSONDecodeError:
            cut = True   # the last line was cut short by the kill; its shard is redone
            break
    if not lines or not isinstance(lines[0], dict):
        raise PackError(f"--resume: {journal} is not a pack journal: its first line is not "
                        f"the JSON header carla-wds writes. {OVERWRITE}")
    saved = lines[0].get("options")
    if saved != json.loads(json.dumps(identity)):
        raise PackError(f"--resume: {journal} was written with options {saved}, now "
                        f"{identity}. Fix: resume with the same options, or --overwrite")
    if lines[0].get("output") != output:
        raise PackError(f"--resume: {journal} is the journal of a pack to "
                        f"{lines[0].get('output') or out}, not to {output or out}. Fix: pass the "
                        "--stage folder of the pack to resume, or --overwrite")
    done = [_entry(line, journal, i, prefix) for i, line in enumerate(lines[1:])]
    _check_counts(done, journal)
    for entry in done:
        # The size, not the sha256: the entry was written after its shard was fsynced and
        # renamed (or uploaded and read back), so only a later outside change can make them
        # differ, and re-hashing every committed byte would cost a resume what re-packing
        # costs; `verify` hashes them.
        where, size = _held(out, output, held, entry.shard.name)
        if size != entry.shard.bytes:
            raise PackError(f"--resume: shard {where} is missing or differs in size from the "
                            f"journal ({entry.shard.bytes} bytes). {OVERWRITE}")
    if cut:   # drop the cut line, or the lines a resumed pack appends would follow garbage
        atomic_write_bytes(journal, "".join([json.dumps(lines[0]) + "\n"]
                                            + [e.line() for e in done]).encode())
    return done


def _held(out: Path, output: str | None, held: dict[str, int] | None, name: str
          ) -> tuple[str, int | None]:
    """(where a committed shard is, its size there or None when it is absent)."""
    if output is not None:
        return f"{output}/{name}", (held or {}).get(name)
    path = out / name
    return str(path), path.stat().st_size if path.is_file() else None


# Each field of a journal line and the type it must have (bool is no count): a resume builds
# the manifest's counts from them, so a wrong one would surface far later as a broken total.
_COUNT = (int,)
_FIELDS = {"tasks": _COUNT, "last_key": (str,), "skipped": (list,), "meta": (dict,)}
_SHARD = {"name": (str,), "samples": _COUNT, "bytes": _COUNT, "sha256": (str,),
          "first_key": (str,), "last_key": (str,), "steps": (dict,), "buckets": (dict,)}
_LATER = {"first_key", "last_key", "steps", "buckets"}   # ShardRecord's defaults
_SKIP = {"episode", "frame", "file", "reason", "fix", "derived"}   # routes.Skip's fields
_SIZES = ("source_sizes", "image_sizes", "extra_sizes")   # frames.ImageSizes: name -> [H, W]


def _field_problem(line: Any) -> str | None:
    """Why a journal line is not a shard entry carla-wds writes, or None."""
    if not isinstance(line, dict) or not isinstance(line.get("shard"), dict):
        return "it is not an object with a `shard` object"
    for where, doc, fields in (("", line, _FIELDS), ("shard.", line["shard"], _SHARD)):
        for name, types in fields.items():
            if name in _LATER and name not in doc:   # a journal from before the field
                continue
            value = doc.get(name)
            if not isinstance(value, types) or isinstance(value, bool):
                return f"{where}{name} is {str(value)[:40]!r}, not of type {types[0].__name__}"
            if types is _COUNT and value < 0:
                return f"{where}{name} is {value}, below 0"
    extra = sorted(set(line["shard"]) - set(_SHARD))
    if extra:
        return f"shard.{extra[0]} is not a field carla-wds writes"
    bad = next((r for r in line["skipped"] if not _is_skip(r)), None)
    if bad is not None:
        return f"skipped holds {str(bad)[:60]!r}, not a skipped frame"
    sizes = [(k, v) for k in _SIZES for v in _items(line["meta"].get(k, {}))]
    bad = next((f"meta.{k} holds {str(v)[:40]!r}" for k, v in sizes if not _is_size(v)), None)
    return None if bad is None else f"{bad}, not an image size [H, W]"


def _is_skip(r: Any) -> bool:
    return isinstance(r, dict) and set(r) <= _SKIP and all(
        isinstance(r.get(k), str) for k in ("episode", "file", "reason")) and (
        r.get("frame") is None or type(r.get("frame")) is int)


def _items(sizes: Any) -> list[Any]:
    return list(sizes.values()) if isinstance(sizes, dict) else ["(not an object)"]


def _is_size(v: Any) -> bool:
    return isinstance(v, list) and len(v) == 2 and all(type(n) is int and n > 0 for n in v)


def _check_counts(done: list[JournalEntry], journal: Path) -> None:
    """Each shard's samples plus the frames skipped before it are the stream items it took
    (`tasks` grows by exactly that): the counts the resumed manifest adds up."""
    before = 0
    for i, e in enumerate(done):
        if e.shard.samples < 1 or e.tasks - before != e.shard.samples + len(e.skipped):
            raise PackError(f"--resume: entry {i} of {journal} says shard {e.shard.name} holds "
                            f"{e.shard.samples} samples and {len(e.skipped)} skipped frames, "
                            f"but its tasks grow from {before} to {e.tasks}; the journal was "
                            f"changed after carla-wds wrote it. {OVERWRITE}")
        before = e.tasks


def _entry(line: dict[str, Any], journal: Path, i: int, prefix: str) -> JournalEntry:
    problem = _field_problem(line)
    if problem:
        raise PackError(f"--resume: line {i + 2} of {journal} is not a shard entry this "
                        f"carla-wds writes ({problem}; an older version, or edited?). "
                        f"{OVERWRITE}")
    entry = JournalEntry(ShardRecord(**line["shard"]), line["tasks"], line["last_key"],
                         line["skipped"], line["meta"])
    # Entries are consecutive by construction (a failed commit stops all later ones); a gap
    # or repeat would make the resumed manifest list a shard twice and lose another.
    if entry.shard.name != shard_name(prefix, i):
        raise PackError(f"--resume: entry {i} of {journal} names {entry.shard.name}, expected "
                        f"{shard_name(prefix, i)}; the journal has a gap or repeat. {OVERWRITE}")
    return entry
