"""`carla-wds merge --in-place OUT`: one manifest for the parts of a plan (plan_parts.py), naming
each part's shards where they lie (`parts/00017/shard-000003.tar`, a relative name that
manifest.NAME_RULE allows and shard_url resolves), so no shard byte is copied: the merge writes
OUT/manifest.json and nothing else.

Before that, every part's shards are checked against the part's manifest: first each name
against manifest.NAME_RULE, and on a folder that it is a regular file inside its part's folder
(no link anywhere on its path), before anything is stat-ed or read, so that a part manifest
cannot make merge report on (or name) a file elsewhere; then their size (a stat, or one listing
of an s3:// OUT), and with `deep` their sha256 (every byte read once) and every sample key. No
sample may be in two parts (merge.check_unique: shared sha256s, boundary keys or files; with
`deep` any key). A part that is missing or differs is refused in one line naming it and the
re-run that fixes it.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from ..fileio import atomic_write_json, sha256_file
from ..manifest import MANIFEST, NAME_RULE, read_manifest, shard_name_problem
from ..words import counted
from ..manifest_schema import ManifestError
from ..objstore import is_objstore
from ..objwrite import StoreWriter, json_bytes
from ..remote import RemoteOptions
from .cluster import array_spec
from .merge import (KeyLedger, check_distinct_files, check_parts, check_unique, merged_doc,
                    shard_keys)
from .plan_parts import part_dir, read_plan, under

log = logging.getLogger(__name__)


def merge_in_place(out: str, deep: bool = False, remote: RemoteOptions | None = None
                   ) -> dict[str, Any]:
    """Write OUT/manifest.json over the part shards of OUT's plan; returns the document."""
    out = str(out)
    store = StoreWriter(out, remote, "merge output") if is_objstore(out) else None
    plan = read_plan(out, remote)
    parts = plan["parts"]
    rels = [part_dir(i, parts) for i in range(parts)]
    held = store.listing() if store else None
    missing = [i for i, rel in enumerate(rels) if not _has(out, held, f"{rel}/{MANIFEST}")]
    if missing:
        raise ManifestError(f"merge --in-place {out}: {len(missing)} of {parts} parts have no "
                            f"manifest (not done), e.g. {rels[missing[0]]}. Fix: pack them "
                            f"(sbatch --array={array_spec(missing)} ...; carla-wds pack-status "
                            f"{out} lists them), then merge again")
    manifests = [(m.doc, m.where) for m in (read_manifest(under(out, r) if store else
                                                          str(Path(out) / r), remote)
                                            for r in rels)]
    check_parts(manifests)
    for rel, (doc, _) in zip(rels, manifests):   # before any stat or read
        for shard in doc["shards"]:
            _check_name(out, store, rel, shard["name"])
    check_unique([(rel, doc["shards"]) for rel, (doc, _) in zip(rels, manifests)])
    if store is None:
        check_distinct_files([(rel, s["name"], Path(out) / rel / s["name"])
                              for rel, (doc, _) in zip(rels, manifests) for s in doc["shards"]])
    shards, ledger = [], KeyLedger()
    for rel, (doc, _) in zip(rels, manifests):
        for shard in doc["shards"]:
            name = f"{rel}/{shard['name']}"
            _check_shard(out, store, held, name, shard, deep, rel)
            if deep and store is None:
                ledger.add(rel, shard["name"], shard_keys(Path(out) / name, shard["bytes"]))
            shards.append({**shard, "name": name})
    ledger.check()
    merged = merged_doc(manifests, shards)
    merged["merged_from"] = rels   # relative: the merged pack moves as one folder
    if store:
        store.put_bytes(MANIFEST, json_bytes(merged))
    else:
        atomic_write_json(Path(out) / MANIFEST, merged)
    log.info("merged %s in place: %s, %s", counted(parts, "part"), counted(len(shards), "shard"),
             counted(merged["total_samples"], "sample"))
    return merged


def _has(out: str, held: dict[str, int] | None, rel: str) -> bool:
    return rel in held if held is not None else (Path(out) / rel).is_file()


def _check_name(out: str, store: StoreWriter | None, rel: str, name: object) -> None:
    """The shard name keeps to NAME_RULE and, on a folder, is a regular file at exactly that
    path below OUT: no symbolic link to elsewhere (or to another shard) on the way."""
    problem = shard_name_problem(name)
    if problem is None and store is None:
        path = os.path.join(os.path.realpath(out), rel, str(name))
        real = os.path.realpath(path)
        if real != path:
            problem = f"is a link (to {real}); a part's shards are regular files in its folder"
    if problem:
        raise ManifestError(f"merge --in-place: part {rel}'s manifest names the shard {name!r}, "
                            f"which {problem}; refused (nothing was read), since {NAME_RULE}. "
                            f"Fix: re-pack that part (remove {rel}/ and run its task again)")


def _check_shard(out: str, store: StoreWriter | None, held: dict[str, int] | None, name: str,
                 shard: dict[str, Any], deep: bool, rel: str) -> None:
    """The shard `name` (relative to OUT) has the size (and with deep the sha256) that its
    part's manifest declares, else a one-line ManifestError naming it and the fix."""
    want, digest = shard["bytes"], shard.get("sha256")
    if store is not None:
        size = (held or {}).get(name)
        problem = None if size == want else f"the store holds {size} bytes"
        if problem is None and deep:
            problem = store.mismatch(name, want, digest)
    else:
        path = Path(out) / name
        size = path.stat().st_size if path.is_file() else None
        problem = None if size == want else f"has {size} bytes" if size is not None \
            else "is missing"
        if problem is None and deep:
            got = sha256_file(path)
            problem = None if got == digest else f"hashes to sha256 {got}"
    if problem:
        raise ManifestError(f"merge --in-place: shard {name} {problem}, its part's manifest "
                            f"declares {want} bytes and sha256 {digest}; refused. Fix: re-pack "
                            f"that part (remove {rel}/ and run its task again)")
