"""The manifest that travels with the shards: counts, checksums, schema, and what was skipped.

`manifest.json` plays the part of Mosaic Streaming's `index.json`: the loader takes its exact
sample counts from here, so `len()` is O(1) and never iterates data.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import tarfile
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

from tqdm import tqdm

from .fileio import atomic_write_json, sha256_file
from .schema import SCHEMA_VERSION, SampleSpec, SchemaError, validate_sample
from .shards import shard_name

log = logging.getLogger(__name__)
MANIFEST = "manifest.json"


def build_manifest(spec: SampleSpec, layout, records, report: dict, opts, version: str,
                   n_routes: int, image_sizes: dict[str, tuple[int, int]] | None = None
                   ) -> dict[str, Any]:
    """The manifest of a finished pack. `image_sizes` holds each camera's (H, W) as stored in
    the shards (after --resize); the loader refuses a member whose header says otherwise."""
    plans = report["plans"]
    skipped = [s for p in plans for s in p.skipped] + report["skipped"]
    skipped.sort(key=lambda s: (s.episode, -1 if s.frame is None else s.frame, s.file))
    total = sum(r.samples for r in records)
    counts = {"routes": n_routes, "frames": sum(p.n_frames for p in plans),
              "samples": total, "tail_frames": sum(p.tail for p in plans),
              "skipped": len(skipped), "nan_theta": sum(p.nan_theta for p in plans),
              "void_command": sum(p.void_command for p in plans)}
    if counts["frames"] != total + counts["tail_frames"] + len(skipped):
        raise AssertionError(f"frame accounting broke: {counts}; this is a carla-wds bug")
    return {
        "schema_version": SCHEMA_VERSION, "tool": "carla-wds", "tool_version": version,
        "layout": layout.name, "cameras": list(spec.cameras), "pred_len": spec.pred_len,
        "image_format": spec.image_format, "total_samples": total,
        "shards": [r.__dict__ for r in records], "counts": counts,
        "skipped": [s.record() for s in skipped], "pack_args": opts.identity(),
        "image_sizes": {c: list(image_sizes[c]) for c in spec.cameras if c in image_sizes}
        if image_sizes else {},
    }


def is_url(source: str) -> bool:
    return "://" in source or source.startswith("pipe:")


def manifest_location(source: str | Path) -> str:
    """A shard folder, a manifest path, or a manifest URL -> the manifest's path or URL."""
    source = str(source)
    if is_url(source) or source.endswith(".json"):
        return source
    return str(Path(source) / MANIFEST)


def read_manifest(source: str | Path) -> tuple[dict[str, Any], str]:
    """Load and check a manifest; returns it and its location (for resolving shard names)."""
    where = manifest_location(source)
    if is_url(where):
        import webdataset as wds
        with wds.gopen(where, "rb") as f:
            text = f.read().decode("utf-8")
    else:
        if not Path(where).is_file():
            raise FileNotFoundError(f"no manifest at {where}; expected a folder written by "
                                    "`carla-wds pack` (or a path/URL to its manifest.json)")
        text = Path(where).read_text()
    try:
        manifest = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SchemaError(f"{where}: manifest is not valid JSON ({exc}); re-run the pack") from None
    version = manifest.get("schema_version")
    if version != SCHEMA_VERSION:
        raise SchemaError(f"{where}: schema_version {version}, this carla-wds reads "
                          f"{SCHEMA_VERSION}. Fix: re-pack with this version")
    return manifest, where


def spec_of(manifest: dict[str, Any]) -> SampleSpec:
    return SampleSpec(tuple(manifest["cameras"]), int(manifest["pred_len"]),
                      manifest.get("image_format", "png"))


def shard_url(where: str, name: str) -> str:
    """Shard names resolve relative to the manifest: local path, http(s) URL, or pipe:."""
    if is_url(name) or os.path.isabs(name):
        return name
    if where.startswith("pipe:"):
        raise SchemaError(f"manifest read through {where!r} must list absolute shard URLs")
    if is_url(where):
        return urljoin(where, name)
    return os.path.normpath(os.path.join(os.path.dirname(where), name))   # pathlib: 3x slower


def _read_tar_samples(path: Path) -> dict[str, dict[str, bytes]]:
    samples: dict[str, dict[str, bytes]] = {}
    with tarfile.open(path) as tar:
        for member in tar:
            key, _, suffix = member.name.partition(".")
            samples.setdefault(key, {})[suffix] = tar.extractfile(member).read()
    return samples


def verify(directory: str | Path, deep: bool = False, progress: bool = True) -> list[str]:
    """Recompute counts and sha256 against the manifest; `deep` validates every sample.

    Returns the list of problems found (empty when the shards match the manifest).
    """
    manifest, where = read_manifest(directory)
    spec = spec_of(manifest)
    problems = []
    total = 0
    for shard in tqdm(manifest["shards"], desc="verify", unit="shard", disable=not progress):
        path = Path(shard_url(where, shard["name"]))
        if not path.is_file():
            problems.append(f"{path}: missing")
            continue
        if sha256_file(path) != shard["sha256"] or path.stat().st_size != shard["bytes"]:
            problems.append(f"{path}: sha256/size differ from the manifest")
        try:
            samples = _read_tar_samples(path)
        except (tarfile.TarError, OSError) as exc:
            problems.append(f"{path}: not a readable tar ({exc}); re-pack or re-download it")
            continue
        total += len(samples)
        if len(samples) != shard["samples"]:
            problems.append(f"{path}: {len(samples)} samples, manifest says {shard['samples']}")
        if deep:
            for key, raw in samples.items():
                try:
                    validate_sample(spec, raw, f"{shard['name']}:{key}")
                except (SchemaError, ValueError) as exc:
                    problems.append(str(exc))
    if total != manifest["total_samples"]:
        problems.append(f"{total} samples in shards, manifest says {manifest['total_samples']}")
    return problems


def summary(directory: str | Path) -> dict[str, Any]:
    """Samples, shards, sizes, samples per command and speed statistics of a pack."""
    import numpy as np
    from .labels import command_index
    from .schema import ROAD_OPTIONS
    manifest, where = read_manifest(directory)
    speeds, commands = [], {}
    for shard in manifest["shards"]:
        for raw in _read_tar_samples(Path(shard_url(where, shard["name"]))).values():
            speeds.append(json.loads(raw["speed.json"]))
            name = ROAD_OPTIONS[command_index(json.loads(raw["meta.json"])["command"]) + 1]
            commands[name] = commands.get(name, 0) + 1
    sizes = [s["bytes"] for s in manifest["shards"]]
    s = np.asarray(speeds or [0.0])
    return {"samples": manifest["total_samples"], "shards": len(sizes), "bytes": sum(sizes),
            "shard_bytes_min": min(sizes, default=0), "shard_bytes_max": max(sizes, default=0),
            "layout": manifest["layout"], "cameras": manifest["cameras"],
            "pred_len": manifest["pred_len"], "skipped": len(manifest["skipped"]),
            "commands": dict(sorted(commands.items())),
            "speed": {"mean": float(s.mean()), "std": float(s.std()), "min": float(s.min()),
                      "max": float(s.max()), "stopped_share": float((s < 0.1).mean())}}


def merge(part_dirs: list[str | Path], out_dir: str | Path, prefix: str = "shard") -> dict:
    """Combine the outputs of `pack --part i/N` into one folder and one manifest.

    Shards are hard-linked (copied across file systems) under consecutive names, in part order.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if any(out.iterdir()):
        raise FileExistsError(f"merge output {out} is not empty; choose an empty folder")
    manifests = [read_manifest(d) for d in part_dirs]
    first = manifests[0][0]
    keys = ("schema_version", "layout", "cameras", "pred_len", "image_format")
    for m, where in manifests[1:]:
        for k in keys:
            if m.get(k) != first.get(k):
                raise SchemaError(f"{where}: {k}={m.get(k)!r} but the first part has "
                                  f"{first.get(k)!r}; parts must be packed with the same options")
    _check_parts(manifests)
    shards, skipped, counts = [], [], {}
    for m, where in manifests:
        for shard in m["shards"]:
            name = shard_name(prefix, len(shards))
            _link_or_copy(Path(shard_url(where, shard["name"])), out / name)
            shards.append({**shard, "name": name})
        skipped += m["skipped"]
        for k, v in m["counts"].items():
            counts[k] = counts.get(k, 0) + v
    merged = {**first, "shards": shards, "skipped": skipped, "counts": counts,
              "total_samples": sum(s["samples"] for s in shards),
              "merged_from": [where for _, where in manifests]}
    merged["pack_args"] = {**first["pack_args"], "part": None}
    atomic_write_json(out / MANIFEST, merged)
    return merged


def _check_parts(manifests: list[tuple[dict, str]]) -> None:
    """Parts must come from one pack command (same options) and be exactly parts 0..N-1."""
    args = [{k: v for k, v in m["pack_args"].items() if k != "part"} for m, _ in manifests]
    for (m, where), a in zip(manifests[1:], args[1:]):
        if a != args[0]:
            diff = sorted(k for k in set(a) | set(args[0]) if a.get(k) != args[0].get(k))
            raise SchemaError(f"{where}: packed with different options {diff} than "
                              f"{manifests[0][1]}; merge parts of one pack command only")
    parts = [m["pack_args"].get("part") for m, _ in manifests]
    if any(p is not None for p in parts):
        n = parts[0][1] if parts[0] else None
        if any(p is None or p[1] != n for p in parts) or sorted(p[0] for p in parts) != list(
                range(n)):
            raise SchemaError(f"merge needs exactly the parts 0..N-1 of one --part i/N pack, got "
                              f"{parts}; add the missing parts or remove the repeated ones")


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)
