"""`verify` and `inspect`: reading a whole pack, local, over http(s):// or on s3:// (any
fsspec URL; credentials from the AWS environment, AWS_ENDPOINT_URL included). `merge` is in
merge.py and re-exported here.

Shards are read through the loader's own reader (shardread): the same name rule, the same byte
bounds, one sample in memory at a time, sha256 computed while streaming. Nothing is trusted from
the manifest but what validate_manifest accepted.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from ..progress import bar as progress_bar   # a terminal's bar, or a few log lines

from ..manifest import (
    Manifest,
    is_url,
    read_manifest,
    shard_name_problem,
    shard_url,
)
from ..manifest_schema import ManifestError
from ..remote import RemoteError, RemoteOptions
from ..objstore import is_objstore
from ..schema import COMMANDS, SchemaError, decode_member, validate_sample
from ..shardread import ShardRef, open_shard, samples_of
from ..tario import ShardError
from .finite import nonfinite_labels
from .merge import KeyLedger, merge  # noqa: F401  (merge re-exported)
from .shards import shard_name

_SEQUENCE = re.compile(r"^(.*)-(\d{6})\.tar$")


def _sequence_problems(manifest: Manifest, remote: RemoteOptions | None = None) -> list[str]:
    """Shards named <prefix>-NNNNNN.tar must be numbered 0..n-1 for each prefix: a gap is a
    shard that a failed commit or a bad merge lost. Locally and on an object store, such files
    that the manifest does not list are reported too."""
    numbers: dict[str, list[int]] = {}
    where = manifest.where
    for s in manifest.shards:
        if shard_name_problem(s.name) is None and (m := _SEQUENCE.match(s.name)):
            numbers.setdefault(m.group(1), []).append(int(m.group(2)))
    problems = []
    for prefix, got in numbers.items():
        if sorted(got) != list(range(len(got))):
            gaps = sorted(set(range(max(got) + 1)) - set(got))[:5]
            problems.append(f"manifest {where}: shards {prefix}-NNNNNN.tar are not numbered "
                            f"0..{len(got) - 1} (missing: {[shard_name(prefix, i) for i in gaps]}"
                            "); shards were lost. Fix: re-pack")
    listed = {s.name for s in manifest.shards}
    if is_objstore(where):
        from ..objwrite import StoreWriter
        store = StoreWriter(where.rsplit("/", 1)[0], remote, "pack")
        for name in sorted(store.listing()):
            m = _SEQUENCE.match(name)
            if m and m.group(1) in numbers and name not in listed:
                problems.append(f"{store.url_of(name)}: in the store but not in the manifest")
    elif not is_url(where):
        folder = Path(where).parent
        for prefix in numbers:
            for path in sorted(folder.glob(f"{prefix}-[0-9]*.tar")):
                if path.relative_to(folder).as_posix() not in listed:
                    problems.append(f"{path}: on disk but not in the manifest")
    return problems


def verify(directory: str | Path, deep: bool = False, progress: bool = True,
           remote: RemoteOptions | None = None) -> list[str]:
    """Recompute counts and sha256 against the manifest; `deep` validates every sample.

    Returns the list of problems found (empty when the shards match the manifest).
    """
    manifest = read_manifest(directory, remote)
    spec = manifest.spec
    sizes = manifest.sizes_of(spec.cameras)
    problems = _sequence_problems(manifest, remote)
    total, ledger = 0, KeyLedger()   # deep: no key in two places (a bad merge's repeat)
    for shard in progress_bar(manifest.shards, desc="verify", unit="shard", disable=not progress):
        try:
            url = shard_url(manifest.where, shard.name)
        except ManifestError as exc:
            problems.append(str(exc))
            continue
        ref, keys = ShardRef(url, shard.samples, shard.bytes, shard.sha256), []
        n, found = _verify_shard(ref, spec, sizes, deep, remote,
                                 manifest.doc.get("extra_sizes"), keys)
        ledger.add(manifest.where, url, keys)
        total += n
        problems += found
    if pair := ledger.repeat():
        problems.append(f"a sample key is in both {pair[0][1]} and {pair[1][1]}: the pack "
                        "serves it twice. Fix: re-pack, or merge its parts again")
    if total != manifest.total_samples:
        problems.append(f"{total} samples in shards, manifest says {manifest.total_samples}")
    return problems


def _verify_shard(ref, spec, sizes, deep: bool, remote: RemoteOptions | None,
                  extra_sizes: dict[str, list[int]] | None = None,
                  keys: list[str] | None = None) -> tuple[int, list[str]]:
    local = not is_url(ref.url)
    if local and not os.path.isfile(ref.url):
        return 0, [f"{ref.url}: missing" if not os.path.lexists(ref.url)
                   else f"{ref.url}: not a regular file"]
    problems, others, n = [], [], 0
    try:
        stream = open_shard(ref.url, None, ref.sha256, ref.bytes, verify=local, remote=remote)
        try:
            for raw in samples_of(stream, ref, others):
                n += 1
                if deep:
                    problems += _deep_problems(raw, spec, sizes, ref, extra_sizes)
                    if keys is not None:
                        keys.append(raw["__key__"])
        finally:
            stream.close()
    except (ShardError, RemoteError, OSError, ValueError) as exc:
        problems.append(f"{ref.url}: not a readable tar as the manifest declares it ({exc}); "
                        "re-pack or re-download it")
    problems += [f"{ref.url}: holds {o}; carla-wds shards hold regular files only" for o in others]
    if n != ref.samples and not problems:
        problems.append(f"{ref.url}: {n} samples, manifest says {ref.samples}")
    return n, problems


def _deep_problems(raw: dict, spec, sizes, ref, extra_sizes=None) -> list[str]:
    """validate_sample's finding, if any: every member through its codec's check and decode,
    images against the manifest's recorded sizes before they are decoded."""
    try:
        validate_sample(spec, raw, f"{ref.url}:{raw['__key__']}", sizes, extra_sizes)
        return nonfinite_labels(spec, raw, f"{ref.url}:{raw['__key__']}")
    except (SchemaError, ValueError) as exc:
        return [str(exc)]


def _speed_and_command(spec, raw: dict, where: str) -> tuple[float, str]:
    """A sample's speed and command name; ValueError when its members hold other types (a
    list for meta.json, a string for speed.json), which a shard from elsewhere may."""
    from .labels import command_index
    speed = decode_member(spec, raw, "speed.json", where)
    meta = decode_member(spec, raw, "meta.json", where)
    if not isinstance(speed, (int, float)) or isinstance(speed, bool):
        raise ValueError(f"{where}: speed.json holds a {type(speed).__name__}; expected a number")
    command = meta.get("command") if isinstance(meta, dict) else None
    if not isinstance(command, int) or isinstance(command, bool):
        raise ValueError(f"{where}: meta.json holds {str(meta)[:60]!r}; expected an object "
                         "with the sample's integer command")
    return float(speed), COMMANDS[command_index(command)].name


def _fields_of(spec) -> dict[str, str]:
    """The fields CARLAWebData(fields=[...]) can select, each with what it holds (dtype, shape,
    units; a record's value names), so a user sees them without reading the manifest."""
    out = {}
    for e in spec.extras:
        if e.twin_of is not None:
            continue   # served in its field's place by twin_p, never by its own name
        shape = "x".join("N" if d is None else str(d) for d in e.shape)
        text = " ".join(p for p in (e.modality, e.dtype, shape, e.units) if p)
        if e.classes:
            text += (f", served as {max(e.classes) + 1} training classes ({e.name}_raw: the "
                     "saved ids)")
        if e.fields:
            text = f"{e.modality}: " + ", ".join(f.name for f in e.fields)
        out[e.name] = text
    return out


def summary(directory: str | Path, remote: RemoteOptions | None = None) -> dict[str, Any]:
    """Samples, shards, sizes, samples per command and speed statistics of a pack."""
    import numpy as np

    manifest = read_manifest(directory, remote)
    spec = manifest.spec
    speeds, commands = [], {}
    for shard, url in zip(manifest.shards, manifest.shard_urls()):
        ref = ShardRef(url, shard.samples, shard.bytes, shard.sha256)
        try:
            stream = open_shard(ref.url, None, ref.sha256, ref.bytes, remote=remote)
            try:
                for raw in samples_of(stream, ref):
                    where = f"{ref.url}:{raw['__key__']}"
                    speed, name = _speed_and_command(spec, raw, where)
                    speeds.append(speed)
                    commands[name] = commands.get(name, 0) + 1
            finally:
                stream.close()
        except (ShardError, KeyError, ValueError) as exc:
            raise ManifestError(f"{ref.url}: cannot summarise it ({exc}). Fix: run "
                                "`carla-wds verify` on the pack and re-pack the shard") from None
    sizes = [s.bytes for s in manifest.shards]
    doc = manifest.doc
    s = np.asarray(speeds or [0.0])
    return {"samples": manifest.total_samples, "shards": len(sizes), "bytes": sum(sizes),
            "shard_bytes_min": min(sizes, default=0), "shard_bytes_max": max(sizes, default=0),
            "layout": doc.get("layout"), "cameras": list(spec.cameras),
            "pred_len": spec.pred_len, "skipped": len(doc.get("skipped", [])),
            "commands": dict(sorted(commands.items())), "fields": _fields_of(spec),
            # routes as sequences (history windows; None for packs made before issue 27)
            "sequence": doc.get("sequence"),
            "buckets": (doc.get("buckets") or {}).get("sizes"),   # issue 29: pack/buckets.py
            "speed": {"mean": float(s.mean()), "std": float(s.std()), "min": float(s.min()),
                      "max": float(s.max()), "stopped_share": float((s < 0.1).mean())}}
