"""Editing one member of a real tar shard the way a hostile or damaged copy would hold it, with
the manifest's bytes and sha256 made to match (so only checks of the content can see it)."""
from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path
from typing import Callable


def rewrite_member(pack: Path, suffix: str, change: Callable[[bytes], bytes],
                   shard: int = 0) -> str:
    """Rewrite shard `shard` of the pack with `change` applied to the bytes of its first
    member ending in `suffix`, and its manifest entry's bytes and sha256 to match; returns the
    changed sample's key."""
    m = json.loads((pack / "manifest.json").read_text())
    entry = m["shards"][shard]
    out, key = io.BytesIO(), None
    with tarfile.open(pack / entry["name"]) as src, \
            tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as dst:
        for info in src.getmembers():
            data = src.extractfile(info).read()
            if key is None and info.name.endswith(suffix):
                data, key = change(data), info.name[:-len(suffix)]
                info.size = len(data)
            dst.addfile(info, io.BytesIO(data))
    assert key is not None, f"no member ending in {suffix} in {entry['name']}"
    (pack / entry["name"]).write_bytes(out.getvalue())
    entry.update(bytes=len(out.getvalue()), sha256=hashlib.sha256(out.getvalue()).hexdigest())
    (pack / "manifest.json").write_text(json.dumps(m))
    return key
