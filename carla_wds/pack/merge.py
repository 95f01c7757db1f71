"""`carla-wds merge`: the outputs of `pack --part i/N` as one pack, each part a local folder or
an s3:// (fsspec) prefix, into a local folder or an s3:// prefix.

Shards go under consecutive names, in part order, and each one is checked where it lands
against the part manifest's size and sha256 before the next; the manifest comes last. Between
objects of one store a shard is copied server-side (no byte passes through this machine),
then read back to be hashed. A refused merge leaves the output as it found it.
"""
from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path
from typing import Any

from ..fileio import atomic_write_json, sha256_file
from ..manifest import MANIFEST, is_url, read_manifest, shard_url
from ..manifest_schema import ManifestError
from ..objstore import is_objstore
from ..objwrite import StoreWriter, fetch_checked, json_bytes
from ..remote import RemoteError, RemoteOptions
from ..schema import SchemaError
from ..sequence import sequence_doc
from .buckets import bucket_doc
from .shards import shard_name


def merge(part_dirs: list[str | Path], out_dir: str | Path, prefix: str = "shard",
          remote: RemoteOptions | None = None) -> dict:
    """Combine the outputs of `pack --part i/N` into one folder (or s3:// prefix) and one
    manifest. Parts and output may be local or on an object store (credentials from the AWS
    environment, or `remote.storage_options`)."""
    out = str(out_dir)
    dest: _LocalDest | _StoreDest = _StoreDest(out, remote) if is_objstore(out) else \
        _LocalDest(Path(out), remote)
    dest.refuse_busy()
    # merge writes a new document from the parts' documents as written
    manifests = [(m.doc, m.where) for m in (read_manifest(p, remote)
                                            for p in part_dirs)]
    other = [w for _, w in manifests if is_url(w) and not is_objstore(w)]
    if other:
        raise ManifestError(f"merge reads local and object-store (s3://) parts only, got "
                            f"{other[0]}. Fix: download the part first")
    check_parts(manifests)
    dest.begin()
    try:
        return _merge_into(dest, manifests, prefix)
    except BaseException:
        dest.undo()
        raise


def _merge_into(dest: Any, manifests: list[tuple[dict, str]], prefix: str) -> dict:
    shards = []
    for m, where in manifests:
        for shard in m["shards"]:
            name = shard_name(prefix, len(shards))
            dest.put_shard(shard_url(where, shard["name"]), name, shard, where)
            shards.append({**shard, "name": name})
    merged = merged_doc(manifests, shards)
    dest.put_manifest(merged)
    return merged


def merged_doc(manifests: list[tuple[dict, str]], shards: list[dict]) -> dict:
    """The merged manifest of parts (in order) whose shards are now `shards` (renamed or, for
    an in-place merge, named where they are): counts summed, skips kept, sequence redone."""
    skipped, counts = [], {}
    for m, _ in manifests:
        skipped += m.get("skipped", [])
        for k, v in m.get("counts", {}).items():
            counts[k] = counts.get(k, 0) + v
    first = manifests[0][0]
    merged = {**first, "shards": shards, "skipped": skipped, "counts": counts,
              "total_samples": sum(s["samples"] for s in shards),
              "sequence": sequence_doc(shards), "buckets": bucket_doc(shards),
              # each part lists the clips its own filter left out: the merge lists them all
              "filtered_routes": [f for m, _ in manifests for f in m.get("filtered_routes", [])],
              "merged_from": [where for _, where in manifests]}
    merged["pack_args"] = {**first.get("pack_args", {}), "part": None}
    return merged


def check_parts(manifests: list[tuple[dict, str]]) -> None:
    """Parts must come from one pack command (same options) and be exactly parts 0..N-1."""
    first = manifests[0][0]
    for m, where in manifests[1:]:
        for k in ("schema_version", "layout", "cameras", "pred_len", "image_format",
                  "image_sizes", "extra_sizes", "members", "sample_rule"):
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


def _refused(where: str, src: str, detail: str) -> ManifestError:
    return ManifestError(f"part {where}: shard {src} {detail}; refused. Fix: re-pack that part "
                         f"(`carla-wds verify {where}` names what is wrong)")


class _LocalDest:
    """A local output folder: local shards hard-linked (copied across file systems), object
    store shards downloaded, each hashed where it lands."""

    def __init__(self, out: Path, remote: RemoteOptions | None) -> None:
        self.out, self.remote, self.created = out, remote, not out.exists()

    def refuse_busy(self) -> None:
        if not self.created and any(self.out.iterdir()):
            raise FileExistsError(f"merge output {self.out} is not empty; choose an empty folder")

    def begin(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)

    def put_shard(self, src: str, name: str, shard: dict, where: str) -> None:
        if not is_objstore(src):
            _link_checked(Path(src), self.out / name, shard, where)
            return
        try:
            fetch_checked(src, self.out / name, shard["bytes"], shard["sha256"], self.remote)
        except RemoteError as exc:
            raise _refused(where, src, f"could not be fetched as the part's manifest declares "
                           f"it ({exc})") from None

    def put_manifest(self, doc: dict) -> None:
        atomic_write_json(self.out / MANIFEST, doc)

    def undo(self) -> None:
        if self.created:
            shutil.rmtree(self.out, ignore_errors=True)
        elif self.out.is_dir():
            for p in self.out.iterdir():
                p.unlink()


class _StoreDest:
    """An s3:// output prefix: store shards copied server-side, local ones uploaded; each is
    read back and hashed where it landed (objwrite.StoreWriter)."""

    def __init__(self, url: str, remote: RemoteOptions | None) -> None:
        self.store = StoreWriter(url, remote, "merge output")
        self.written: list[str] = []

    def refuse_busy(self) -> None:
        held = self.store.listing()
        if held:
            raise FileExistsError(f"merge output {self.store.url} is not empty ({len(held)} "
                                  f"objects, e.g. {min(held)}); choose an empty prefix")

    def begin(self) -> None:
        pass

    def put_shard(self, src: str, name: str, shard: dict, where: str) -> None:
        self.written.append(name)
        size, sha256 = shard["bytes"], shard["sha256"]
        try:
            if is_objstore(src) and src.split("://")[0] == self.store.url.split("://")[0]:
                self.store.copy_from(src, name, size, sha256)
                return
            if is_objstore(src):
                raise _refused(where, src, f"is on another kind of store than "
                               f"{self.store.url}; merge copies within one")
            if not os.path.isfile(src) or os.path.getsize(src) != size or \
                    sha256_file(src) != sha256:
                raise _refused(where, src, f"is missing or not the {size} bytes of sha256 "
                               f"{sha256} the part's manifest declares")
            self.store.put_file(src, name, size, sha256)
        except RemoteError as exc:
            raise _refused(where, src, f"did not land as the part's manifest declares it "
                           f"({size} bytes, sha256 {sha256}): {exc}") from None

    def put_manifest(self, doc: dict) -> None:
        self.written.append(MANIFEST)
        self.store.put_bytes(MANIFEST, json_bytes(doc))

    def undo(self) -> None:
        with contextlib.suppress(RemoteError):
            self.store.remove(self.written)


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
