"""`verify`, `inspect` and `merge`: reading a whole pack, local or over http(s)://.

Shards are read through the loader's own reader (shardread): the same name rule, the same byte
bounds, one sample in memory at a time, sha256 computed while streaming. Nothing is trusted from
the manifest but what validate_manifest accepted.
"""
from __future__ import annotations

import contextlib
import os
import re
import shutil
from pathlib import Path
from typing import Any

from tqdm import tqdm

from ..fileio import atomic_write_json, sha256_file
from ..manifest import (
    MANIFEST,
    Manifest,
    is_url,
    read_manifest,
    shard_name_problem,
    shard_url,
)
from ..manifest_schema import ManifestError
from ..remote import RemoteError, RemoteOptions
from ..schema import COMMANDS, SchemaError, decode_member, validate_sample
from ..shardread import ShardRef, open_shard, samples_of
from ..tario import ShardError
from .shards import shard_name

_SEQUENCE = re.compile(r"^(.*)-(\d{6})\.tar$")


def _sequence_problems(manifest: Manifest) -> list[str]:
    """Shards named <prefix>-NNNNNN.tar must be numbered 0..n-1 for each prefix: a gap is a
    shard that a failed commit or a bad merge lost. Locally, such files that the manifest does
    not list are reported too."""
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
    if not is_url(where):
        listed = {s.name for s in manifest.shards}
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
    problems = _sequence_problems(manifest)
    total = 0
    for shard in tqdm(manifest.shards, desc="verify", unit="shard", disable=not progress):
        try:
            url = shard_url(manifest.where, shard.name)
        except ManifestError as exc:
            problems.append(str(exc))
            continue
        ref = ShardRef(url, shard.samples, shard.bytes, shard.sha256)
        n, found = _verify_shard(ref, spec, sizes, deep, remote)
        total += n
        problems += found
    if total != manifest.total_samples:
        problems.append(f"{total} samples in shards, manifest says {manifest.total_samples}")
    return problems


def _verify_shard(ref, spec, sizes, deep: bool, remote: RemoteOptions | None
                  ) -> tuple[int, list[str]]:
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
                    problems += _deep_problems(raw, spec, sizes, ref)
        finally:
            stream.close()
    except (ShardError, RemoteError, OSError, ValueError) as exc:
        problems.append(f"{ref.url}: not a readable tar as the manifest declares it ({exc}); "
                        "re-pack or re-download it")
    problems += [f"{ref.url}: holds {o}; carla-wds shards hold regular files only" for o in others]
    if n != ref.samples and not problems:
        problems.append(f"{ref.url}: {n} samples, manifest says {ref.samples}")
    return n, problems


def _deep_problems(raw: dict, spec, sizes, ref) -> list[str]:
    """validate_sample's finding, if any: every member through its codec's check and decode,
    images against the manifest's recorded sizes before they are decoded."""
    try:
        validate_sample(spec, raw, f"{ref.url}:{raw['__key__']}", sizes)
    except (SchemaError, ValueError) as exc:
        return [str(exc)]
    return []


def summary(directory: str | Path, remote: RemoteOptions | None = None) -> dict[str, Any]:
    """Samples, shards, sizes, samples per command and speed statistics of a pack."""
    import numpy as np

    from .labels import command_index
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
                    speeds.append(decode_member(spec, raw, "speed.json", where))
                    meta = decode_member(spec, raw, "meta.json", where)
                    name = COMMANDS[command_index(meta["command"])].name
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
            "commands": dict(sorted(commands.items())),
            "speed": {"mean": float(s.mean()), "std": float(s.std()), "min": float(s.min()),
                      "max": float(s.max()), "stopped_share": float((s < 0.1).mean())}}


def merge(part_dirs: list[str | Path], out_dir: str | Path, prefix: str = "shard") -> dict:
    """Combine the outputs of `pack --part i/N` into one folder and one manifest.

    Shards are hard-linked (copied across file systems) under consecutive names, in part order,
    each one only after its bytes hash to the part manifest's sha256. A refused merge leaves
    the output folder as it found it.
    """
    out = Path(out_dir)
    created = not out.exists()
    if not created and any(out.iterdir()):
        raise FileExistsError(f"merge output {out} is not empty; choose an empty folder")
    # merge writes a new document from the parts' documents as written
    manifests = [(m.doc, m.where) for m in map(read_manifest, part_dirs)]
    remote = [w for _, w in manifests if is_url(w)]
    if remote:
        raise ManifestError(f"merge reads local parts only, got {remote[0]}. Fix: download "
                            "the part first")
    _check_parts(manifests)
    out.mkdir(parents=True, exist_ok=True)
    try:
        return _merge_into(out, manifests, prefix)
    except BaseException:
        if created:
            shutil.rmtree(out, ignore_errors=True)
        else:
            for p in out.iterdir():
                p.unlink()
        raise


def _merge_into(out: Path, manifests: list[tuple[dict, str]], prefix: str) -> dict:
    shards, skipped, counts = [], [], {}
    for m, where in manifests:
        for shard in m["shards"]:
            name = shard_name(prefix, len(shards))
            _link_checked(Path(shard_url(where, shard["name"])), out / name, shard, where)
            shards.append({**shard, "name": name})
        skipped += m.get("skipped", [])
        for k, v in m.get("counts", {}).items():
            counts[k] = counts.get(k, 0) + v
    first = manifests[0][0]
    merged = {**first, "shards": shards, "skipped": skipped, "counts": counts,
              "total_samples": sum(s["samples"] for s in shards),
              "merged_from": [where for _, where in manifests]}
    merged["pack_args"] = {**first.get("pack_args", {}), "part": None}
    atomic_write_json(out / MANIFEST, merged)
    return merged


def _check_parts(manifests: list[tuple[dict, str]]) -> None:
    """Parts must come from one pack command (same options) and be exactly parts 0..N-1."""
    first = manifests[0][0]
    for m, where in manifests[1:]:
        for k in ("schema_version", "layout", "cameras", "pred_len", "image_format",
                  "image_sizes", "members"):
            if m.get(k) != first.get(k):
                raise SchemaError(f"{where}: {k}={m.get(k)!r} but the first part has "
                                  f"{first.get(k)!r}; parts must be packed with the same options")
    args = [{k: v for k, v in m.get("pack_args", {}).items() if k != "part"}
            for m, _ in manifests]
    for (m, where), a in zip(manifests[1:], args[1:]):
        if a != args[0]:
            diff = sorted(k for k in set(a) | set(args[0]) if a.get(k) != args[0].get(k))
            raise SchemaError(f"{where}: packed with different options {diff} than "
                              f"{manifests[0][1]}; merge parts of one pack command only")
    parts = [m.get("pack_args", {}).get("part") for m, _ in manifests]
    if any(p is not None for p in parts):
        n = parts[0][1] if parts[0] else None
        if any(p is None or p[1] != n for p in parts) or sorted(p[0] for p in parts) != list(
                range(n)):
            raise SchemaError(f"merge needs exactly the parts 0..N-1 of one --part i/N pack, got "
                              f"{parts}; add the missing parts or remove the repeated ones")


def _link_checked(src: Path, dst: Path, shard: dict, where: str) -> None:
    """Hard-link (or copy) src to dst, then hash dst, the file that stays: a shard of the
    wrong size or sha256 is removed and refused."""
    if not src.is_file():
        raise ManifestError(f"part {where}: shard {src} is missing or not a regular file. Fix: "
                            "re-pack that part")
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)
    size = dst.stat().st_size
    digest = sha256_file(dst) if size == shard["bytes"] else "(not computed)"
    if size != shard["bytes"] or digest != shard["sha256"]:
        with contextlib.suppress(FileNotFoundError):
            dst.unlink()
        raise ManifestError(f"part {where}: shard {src} has {size} bytes and sha256 "
                            f"{digest}, the part's manifest declares "
                            f"{shard['bytes']} and {shard['sha256']}; refused. Fix: re-pack "
                            "that part")
