"""Label overlays joined by key, without repacking (issue 30): `carla-wds pack-overlay
OVERLAY_DIR BASE_PACK OUT --kind KIND`.

An overlay pack holds one shard per base shard, with the base shard's keys in the same order:
sample n of overlay shard s is sample n of base shard s, so the loader reads both with one
plan and zips them (load/stream/overlay.py). Each sample has one member `<key>.<kind>.json`: the
entry's JSON (UTF-8, as parsed from the kind's file; never pickled), or `null` for a base
sample without an entry. Which samples have one is recorded per shard as runs in pack order
(`"entries": [[1, 12], [0, 30], ...]`, as the buckets' runs: pack/buckets.py), so the loader
can leave out samples without an entry (exact len()) without reading a shard.

The manifest names its base by the sha256 of the base manifest's bytes and gives the
coverage: the base's samples, those with an entry, the entries read, and the entries whose
route or frame the base does not hold, which are counted and listed (unmatched.json), never
silently dropped. An entry that two files claim, or whose route several base routes could
be, is an error. Everything is written into a temporary folder renamed to OUT at the end:
a refused or failed run leaves nothing behind.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import tarfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..fileio import atomic_write_bytes, atomic_write_json, fsync_dir, sha256_file
from ..manifest import read_manifest
from ..sequence import split_key
from .datasets.overlays import overlay_kind
from .errors import PackError
from .overlay_kinds import Entry, OverlayKind, entry_files, read_entry

OVERLAY_FORMAT = "carla-wds-overlay"
OVERLAY_VERSION = 1
UNMATCHED = "unmatched.json"
_KEY = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")   # webdataset's key rule (tario.py)


@dataclass
class OverlayReport:
    """What pack_overlay wrote: the coverage its manifest records."""
    out: Path
    kind: str
    base_samples: int
    with_entry: int
    entries: int
    unmatched: list[dict[str, Any]] = field(default_factory=list)

    def line(self) -> str:
        share = self.with_entry / max(1, self.base_samples)
        head = (f"wrote {self.out}: {self.with_entry} of {self.base_samples} base samples "
                f"({share:.1%}) have a {self.kind} entry; {self.entries} entries read")
        if not self.unmatched:
            return head
        first = "; ".join(f"{u['file']} ({u['why']})" for u in self.unmatched[:3])
        return (f"{head}; {len(self.unmatched)} entries match no base sample, listed in "
                f"{self.out / UNMATCHED}: {first}{' ...' if len(self.unmatched) > 3 else ''}")


def base_keys(shard: Path, samples: int) -> list[str]:
    """The sample keys of one base shard, in order, from its tar headers (tarfile seeks over
    the members' data); the manifest's count must hold."""
    keys: list[str] = []
    try:
        with tarfile.open(shard, "r:") as tar:
            for member in tar:
                match = _KEY.match(member.name)
                if match and (not keys or keys[-1] != match.group(1)):
                    keys.append(match.group(1))
    except (tarfile.TarError, OSError) as exc:
        raise PackError(f"base shard {shard}: not a readable tar ({exc}). Fix: `carla-wds "
                        "verify` the base pack, re-pack or re-download it") from None
    if len(keys) != samples:
        raise PackError(f"base shard {shard}: holds {len(keys)} samples, its manifest says "
                        f"{samples}. Fix: `carla-wds verify` the base pack, re-pack it")
    return keys


class RouteIndex:
    """The base's routes by their folder name (a key's route part, `/` written as `__`), to
    find the one an overlay entry's route path names (its longest common tail of parts)."""

    def __init__(self, keys: list[list[str]], dot_replacement: str | None = None) -> None:
        # the base's --dot-replacement: its keys name a route `a.b` as `a_b` (schema.make_key)
        self.dots = dot_replacement
        self.frames: dict[str, set[int]] = defaultdict(set)
        for shard in keys:
            for key in shard:
                route_frame = split_key(key)
                if route_frame is not None:
                    self.frames[route_frame[0]].add(route_frame[1])
        self.by_name: dict[str, list[tuple[str, ...]]] = defaultdict(list)
        for route in self.frames:
            parts = tuple(route.split("__"))
            self.by_name[parts[-1]].append(parts)

    def route_of(self, entry: Entry) -> str | None:
        """The base route an entry names, None if none; a PackError if several could be."""
        route = tuple(p.replace(".", self.dots) for p in entry.route) if self.dots \
            else entry.route
        found = self.by_name.get(route[-1], [])
        if len(found) <= 1:
            return "__".join(found[0]) if found else None
        tail = [_common_tail(route, parts) for parts in found]
        best = [parts for parts, n in zip(found, tail) if n == max(tail)]
        if len(best) > 1:
            raise PackError(f"overlay file {entry.file}: its route {'/'.join(entry.route)} "
                            f"could be any of the base routes {['/'.join(b) for b in best]}. "
                            "Fix: pass an OVERLAY_DIR whose paths name the route's parent "
                            "folders as the base pack's keys do")
        return "__".join(best[0])


def _common_tail(a: tuple[str, ...], b: tuple[str, ...]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[-1 - n] == b[-1 - n]:
        n += 1
    return n


def join_entries(kind: OverlayKind, overlay_dir: Path, index: RouteIndex
                 ) -> tuple[dict[str, Entry], list[dict[str, Any]], int]:
    """Every entry of the tree by the base key it names; the unmatched ones; entries read."""
    joined: dict[str, Entry] = {}
    unmatched: list[dict[str, Any]] = []
    count = 0
    for found in entry_files(overlay_dir, kind):
        entry = read_entry(kind, found)
        count += 1
        if isinstance(entry, str):
            unmatched.append({"file": found[3], "why": entry})
            continue
        route = index.route_of(entry)
        key = f"{route}__{entry.frame:04d}" if route is not None else None
        if route is None or entry.frame not in index.frames[route]:
            why = "no base route of that name" if route is None else \
                f"base route {route} has no frame {entry.frame}"
            unmatched.append({"file": entry.file, "route": "/".join(entry.route),
                              "frame": entry.frame, "why": why})
            continue
        if key in joined:
            raise PackError(f"overlay files {joined[key].file} and {entry.file} are both the "
                            f"entry of base sample {key}. Fix: keep one of them")
        joined[key] = entry
    if not count:
        raise PackError(f"overlay folder {overlay_dir}: no {kind.name} files (names ending "
                        f"{' or '.join(kind.suffixes)}, {kind.source}). Fix: pass the folder "
                        "the overlay was extracted into, and the --kind it is")
    return joined, unmatched, count


def _member(key: str, kind: str, value: Any) -> tuple[tarfile.TarInfo, bytes]:
    data = b"null" if value is None else json.dumps(
        value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    info = tarfile.TarInfo(f"{key}.{kind}.json")
    info.size, info.mode, info.mtime = len(data), 0o644, 0
    return info, data


def write_shard(path: Path, keys: list[str], kind: str, joined: dict[str, Entry]
                ) -> dict[str, Any]:
    """One overlay shard for one base shard (in memory: text only); its manifest entry, with
    the runs of samples that have an entry."""
    runs: list[list[int]] = []
    with io.BytesIO() as buf:
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for key in keys:
                entry = joined.get(key)
                info, data = _member(key, kind, entry.value if entry else None)
                tar.addfile(info, io.BytesIO(data))
                has = int(entry is not None)
                if runs and runs[-1][0] == has:
                    runs[-1][1] += 1
                else:
                    runs.append([has, 1])
        data = buf.getvalue()
    atomic_write_bytes(path, data)
    return {"name": path.name, "samples": len(keys), "bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest(), "entries": runs}


def pack_overlay(overlay_dir: str | Path, base_pack: str | Path, out: str | Path,
                 kind: str) -> OverlayReport:
    """Write OUT: KIND's entries under OVERLAY_DIR as shards keyed by BASE_PACK's samples
    (module docstring). Raises PackError (one line: file, expectation, fix) and
    FileExistsError for an OUT that holds files; nothing is left behind then."""
    the_kind = overlay_kind(kind)
    base = read_manifest(base_pack)
    where = Path(base.where)
    if "://" in base.where or not where.is_file():
        raise PackError(f"base pack {base_pack}: pack-overlay reads a local pack's shards. "
                        "Fix: download the base pack (its manifest and shards) first")
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(f"{out} already holds files; pack-overlay writes a new folder. "
                              "Fix: remove it or choose another OUT")
    keys = [base_keys(Path(u), s.samples) for u, s in zip(base.shard_urls(), base.shards)]
    dots = (base.doc.get("pack_args") or {}).get("dot_replacement")
    joined, unmatched, count = join_entries(the_kind, Path(overlay_dir), RouteIndex(keys, dots))
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        shards = [write_shard(tmp / f"overlay-{i:06d}.tar", k, kind, joined)
                  for i, k in enumerate(keys)]
        atomic_write_json(tmp / UNMATCHED, unmatched)
        atomic_write_json(tmp / "manifest.json", {
            "format": OVERLAY_FORMAT, "version": OVERLAY_VERSION, "kind": kind,
            "field": kind, "source": the_kind.source,
            "base": {"manifest_sha256": sha256_file(where), "total_samples": base.total_samples,
                     "shards": len(base.shards)},
            "coverage": {"base_samples": base.total_samples, "with_entry": len(joined),
                         "entries": count, "unmatched": len(unmatched),
                         "unmatched_list": UNMATCHED},
            "total_samples": base.total_samples, "shards": shards})
        if out.exists():
            out.rmdir()   # empty (checked above)
        os.rename(tmp, out)
        fsync_dir(out.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return OverlayReport(out, kind, base.total_samples, len(joined), count, unmatched)
