"""`carla-wds merge`: the outputs of `pack --part i/N` as one pack, each part a local folder or
an s3:// (fsspec) prefix, into a local folder or an s3:// prefix.

Shards go under consecutive names, in part order, and each one is checked where it lands
against the part manifest's size and sha256 before the next; the manifest comes last. Between
objects of one store a shard is copied server-side (no byte passes through this machine),
then read back to be hashed. A refused merge leaves the output as it found it.

No sample may come out twice (`check_unique`, `KeyLedger`): a copied part or shard, a shard
linked into two parts, or an episode packed in two parts would each serve samples twice (and,
with the counts summed, lose others from an epoch), so a merge refuses them naming both parts.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
from array import array
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np

from ..fileio import atomic_write_json, sha256_file
from ..manifest import MANIFEST, is_url, read_manifest, shard_url
from ..manifest_schema import ManifestError
from ..objstore import is_objstore
from ..objwrite import StoreWriter, fetch_checked, json_bytes
from ..remote import RemoteError, RemoteOptions
from ..schema import SchemaError
from ..sequence import sequence_doc
from ..tario import ShardError, group_samples, iterate_tar
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
    sources = [(where, [(s["name"], shard_url(where, s["name"])) for s in m["shards"]])
               for m, where in manifests]
    check_unique([(where, m["shards"]) for m, where in manifests])
    check_distinct_files([(where, name, Path(url)) for where, named in sources
                          for name, url in named if not is_objstore(url)])
    dest.begin()
    try:
        return _merge_into(dest, manifests, prefix)
    except BaseException:
        dest.undo()
        raise


def _merge_into(dest: Any, manifests: list[tuple[dict, str]], prefix: str) -> dict:
    shards, ledger = [], KeyLedger()
    for m, where in manifests:
        for shard in m["shards"]:
            name, src = shard_name(prefix, len(shards)), shard_url(where, shard["name"])
            dest.put_shard(src, name, shard, where)
            if not is_objstore(src):   # a store's shards: their sha256 and boundary keys only
                ledger.add(where, shard["name"], shard_keys(Path(src), shard["bytes"]))
            shards.append({**shard, "name": name})
    ledger.check()
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


def _twice(what: str, first: tuple[str, str], second: tuple[str, str]) -> ManifestError:
    (p1, s1), (p2, s2) = first, second
    where = f"shard {s1} of part {p1}" + (" twice" if first == second else
                                          f" and in shard {s2} of part {p2}")
    return ManifestError(f"merge: {what} is in {where}, so the merged pack would serve those "
                         "samples twice (a copied part or shard, a shard linked into two "
                         "parts, or an episode packed in two parts); refused. Fix: re-pack "
                         f"the later part ({p2}) from its own episodes")


def check_unique(parts: list[tuple[str, list[dict[str, Any]]]]) -> None:
    """From the parts' manifests alone: no two shards (of any parts) with one sha256, or
    with one first or last sample key. `parts`: (part, its manifest's shard records)."""
    sums: dict[str, tuple[str, str]] = {}
    keys: dict[str, tuple[str, str]] = {}
    for part, shards in parts:
        for s in shards:
            here = (part, str(s["name"]))
            if s.get("samples"):   # two empty tars are equal bytes and hold nothing twice
                if sums.setdefault(s["sha256"], here) != here:
                    raise _twice(f"one content (sha256 {s['sha256']})", sums[s["sha256"]],
                                 here)
            for key in {s.get("first_key"), s.get("last_key")} - {None, ""}:
                if keys.setdefault(key, here) != here:
                    raise _twice(f"the sample {key!r}", keys[key], here)


def check_distinct_files(files: list[tuple[str, str, Path]]) -> None:
    """No one file (a hard or symbolic link of another shard) listed twice; (part, shard
    name, path) of each local shard, missing ones left to the size check."""
    held: dict[tuple[int, int], tuple[str, str]] = {}
    for part, name, path in files:
        try:
            st = path.stat()
        except OSError:
            continue
        here = (part, name)
        if held.setdefault((st.st_dev, st.st_ino), here) != here:
            raise _twice(f"one file ({path}, a link of the other)", held[(st.st_dev,
                                                                          st.st_ino)], here)


def shard_keys(path: Path, size: int) -> Iterator[str]:
    """The sample keys of a local shard, read as the loader reads them (bounded: `size`)."""
    with open(path, "rb") as f:
        for sample in group_samples(iterate_tar(f, str(path), size)):
            yield sample["__key__"]


class KeyLedger:
    """Every sample key of a merge, as 8 bytes of its blake2b and the shard that holds it
    (16 bytes a sample, not a dict of strings), checked once all are in."""

    def __init__(self) -> None:
        self.sums, self.owners = array("Q"), array("I")
        self.shards: list[tuple[str, str]] = []

    def add(self, part: str, shard: str, keys: Iterable[str]) -> None:
        self.shards.append((part, shard))
        try:
            for key in keys:
                digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
                self.sums.append(int.from_bytes(digest, "little"))
                self.owners.append(len(self.shards) - 1)
        except (ShardError, OSError) as exc:
            raise ManifestError(f"part {part}: shard {shard} cannot be read as a tar of "
                                f"samples ({exc}); refused. Fix: re-pack that part") from None

    def repeat(self) -> tuple[tuple[str, str], tuple[str, str]] | None:
        """The (part, shard) of two samples with one key, in the order added; None if none."""
        sums = np.frombuffer(self.sums, dtype=np.uint64) if self.sums else np.zeros(0, np.uint64)
        order = np.argsort(sums, kind="stable")
        same = np.nonzero(sums[order][1:] == sums[order][:-1])[0]
        if not same.size:
            return None
        first, second = (self.owners[int(order[i])] for i in (same[0], same[0] + 1))
        return self.shards[first], self.shards[second]

    def check(self) -> None:
        """A one-line ManifestError naming both parts when a key was added twice."""
        if pair := self.repeat():
            raise _twice("a sample key", *pair)
