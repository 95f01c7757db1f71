"""The manifest that travels with the shards: counts, checksums, schema, and what was skipped.

`manifest.json` plays the part of Mosaic Streaming's `index.json`: the loader takes its exact
sample counts from here, so `len()` is O(1) and never iterates data.
"""
from __future__ import annotations

import io
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

from .codecs import json_loads
from .manifest_hint import MANIFEST, no_manifest
from .manifest_schema import MAX_MANIFEST_BYTES, ManifestError, validate_manifest
from .objstore import is_objstore, join, read_object
from .remote import RemoteOptions, is_http, read_url, with_storage
from .extras import extras_from_doc
from .schema import SampleSpec

log = logging.getLogger(__name__)


def is_url(source: str) -> bool:
    return "://" in source or source.startswith("pipe:")


def manifest_location(source: str | Path) -> str:
    """A shard folder, a manifest path, or a manifest URL -> the manifest's path or URL. An
    s3:// (fsspec) prefix stands for its manifest.json, as a folder does; an http(s):// URL
    is taken as the manifest's own (a server has no folders to list)."""
    source = str(source)
    if is_objstore(source) and not source.endswith(".json"):
        return f"{source.rstrip('/')}/{MANIFEST}"
    if is_url(source) or source.endswith(".json"):
        return source
    return str(Path(source) / MANIFEST)


def read_manifest(source: str | Path, remote: RemoteOptions | None = None,
                  storage_options: dict[str, Any] | None = None) -> Manifest:
    """Load and validate a manifest; its `where` is the location shard names resolve against.

    `source` is the caller's: a folder, a path, an http(s):// URL, an s3:// (or other fsspec)
    URL read with `storage_options`, or a `pipe:` command."""
    where = manifest_location(source)
    if where.startswith("file://"):
        where = where[len("file://"):]
    if is_http(where):
        text = read_url(where, MAX_MANIFEST_BYTES, remote).decode("utf-8", "replace")
    elif is_objstore(where):
        text = read_object(where, MAX_MANIFEST_BYTES, with_storage(remote, storage_options)
                           ).decode("utf-8", "replace")
    elif where.startswith("pipe:"):   # a command the caller chose; read with a cap
        from .shardread import PipeStream
        with io.BufferedReader(PipeStream(where[len("pipe:"):])) as f:
            raw = f.read(MAX_MANIFEST_BYTES + 1)
        if len(raw) > MAX_MANIFEST_BYTES:
            raise ManifestError(f"{where}: over {MAX_MANIFEST_BYTES} bytes; not a manifest")
        text = raw.decode("utf-8", "replace")
    else:
        path = Path(where)
        if not path.is_file():   # say what it is instead, when it is recognisable
            raise no_manifest(source, where)
        if path.stat().st_size > MAX_MANIFEST_BYTES:
            raise ManifestError(f"{where}: {path.stat().st_size} bytes, over "
                                f"{MAX_MANIFEST_BYTES}; not a manifest")
        text = path.read_text("utf-8", "replace")
    try:   # bounded: a manifest nested 200,000 deep is one line, not a RecursionError
        manifest = json_loads(text.encode("utf-8"))
    except ValueError as exc:   # malformed JSON, or over json_depth or json_values
        raise ManifestError(f"{where}: manifest is not valid JSON ({exc}); re-pack") from None
    validate_manifest(manifest, where)
    return Manifest.of(manifest, where)


@dataclass(frozen=True)
class ShardEntry:
    """One shard as the manifest lists it; `name` is still unresolved (see shard_url)."""
    name: str
    samples: int
    bytes: int
    sha256: str | None


@dataclass(frozen=True)
class Manifest:
    """A validated manifest.json: typed views of what the tools use, and the document as it
    was written (`doc`), which merge and the resume identity keep verbatim."""
    where: str
    doc: dict[str, Any] = field(repr=False)
    shards: tuple[ShardEntry, ...]
    spec: SampleSpec
    image_sizes: dict[str, tuple[int, int]] | None
    total_samples: int

    @classmethod
    def of(cls, doc: dict[str, Any], where: str) -> "Manifest":
        """From a document validate_manifest accepted."""
        shards = tuple(ShardEntry(s["name"], s["samples"], s["bytes"], s.get("sha256"))
                       for s in doc["shards"])
        # packs made before codecs were recorded ("members") decode each member by suffix
        extra = doc.get("spec") or {}
        spec = SampleSpec(tuple(doc["cameras"]), doc["pred_len"], doc.get("image_format", "png"),
                          tuple(sorted((doc.get("members") or {}).items())),
                          extras_from_doc(extra.get("extras", []), where),
                          tuple(sorted(extra.get("frames", {}).items())),
                          tuple(extra.get("transforms", [])))
        sizes = doc.get("image_sizes")
        return cls(where, doc, shards, spec,
                   {c: tuple(hw) for c, hw in sizes.items()} if sizes else None,
                   doc["total_samples"])

    def sizes_of(self, cameras: tuple[str, ...]) -> tuple[tuple[int, int] | None, ...]:
        """Each camera's (H, W) as the pack recorded it; None for packs made before it did."""
        return tuple((self.image_sizes or {}).get(c) for c in cameras)

    def shard_urls(self) -> tuple[str, ...]:
        """Every shard name resolved under NAME_RULE (refusing a name outside it)."""
        return tuple(shard_url(self.where, s.name) for s in self.shards)


# A shard name is a relative path of plain parts inside the manifest's own location.
_NAME_PART = re.compile(r"^[A-Za-z0-9_\-+=,@~][A-Za-z0-9._\-+=,@~]*$")
NAME_RULE = ("a manifest may name its shards only as relative paths inside its own folder: "
             "parts of letters, digits and ._-+=,@~, no '..', no absolute path, no scheme such "
             "as pipe: or http://")


def shard_name_problem(name: Any) -> str | None:
    """Why a shard name from a file breaks NAME_RULE, or None when it keeps to it."""
    if not isinstance(name, str) or not name:
        return "is not a non-empty string"
    if len(name) > 4096:
        return "is over 4096 characters"
    parts = name.split("/")
    bad = next((p for p in parts if not _NAME_PART.match(p)), None)
    if bad is not None:
        return f"has the part {bad!r}"
    return None


def shard_url(where: str, name: str, manifest: str | None = None) -> str:
    """Resolve a shard name from a manifest against the manifest's folder or URL, refusing
    names outside NAME_RULE and local shards that lead out of the folder through a link."""
    label = manifest or where
    problem = shard_name_problem(name)
    if problem:
        raise ManifestError(f"manifest {label}: shard name {name!r} {problem}; refused, since "
                            f"{NAME_RULE}. Fix: re-pack or re-merge it, or pass the shard "
                            "locations yourself with shard_urls=[...]")
    if where.startswith("pipe:"):
        raise ManifestError(f"manifest {label} was read through {where.split(':', 1)[0]}:, "
                            "against which shard names cannot be resolved. Fix: pass "
                            "shard_urls=[...] (one per shard, in manifest order)")
    if is_http(where):
        return urljoin(where, name)
    if is_objstore(where):
        return join(where, name)
    folder = os.path.dirname(os.path.abspath(where))
    path = os.path.join(folder, name)
    real, inside = os.path.realpath(path), os.path.realpath(folder)
    if os.path.commonpath([real, inside]) != inside:
        raise ManifestError(f"manifest {label}: shard {name!r} is a link to {real}, outside "
                            f"the manifest's folder {inside}; refused. Fix: copy the shard in, "
                            "or pass shard_urls=[...] yourself")
    return path
