"""What a source without a manifest is, when it is recognisably something else: raw route
folders (or their archives) that still need `carla-wds pack`, one shard file or a brace pattern
of shards, or a folder of shards with no manifest yet. The one message the loader, `inspect`,
`verify` and `view` give (manifest.read_manifest raises it)."""
from __future__ import annotations

import os
import re
from pathlib import Path

MANIFEST = "manifest.json"   # a pack's index; carla_wds.manifest re-exports it
PROBE_DEPTH = 4      # raw datasets nest their frame files 2-4 folders down
PROBE_FOLDERS = 200  # folders looked into at most: the message stays cheap on a large tree
_FRAME_FILE = re.compile(r"^\d{3,}\.(json|json\.gz|png|jpg|jpeg|npy|npz|laz|pkl|h5)$")
_RAW_ARCHIVE = re.compile(r"\.(tar\.gz|tgz|zip)$")
_PATTERN = re.compile(r"\{[^}]*(\.\.|,)[^}]*\}|[*?\[]")


def _pack_folder(folder: Path) -> str:
    """Where the pack's manifest is, said as a fix."""
    if (folder / MANIFEST).is_file():
        return f"pass the folder with {MANIFEST} ({folder}), which names every shard"
    return f"pass the folder with {MANIFEST} (the OUTPUT_DIR `carla-wds pack` wrote)"


def _raw_example(root: Path) -> str | None:
    """A frame-numbered file (or a raw archive) under root, relative, or None."""
    looked = 0
    for dirpath, dirnames, files in os.walk(root):
        rel = Path(dirpath).relative_to(root)
        dirnames.sort()
        if len(rel.parts) >= PROBE_DEPTH:
            dirnames.clear()
        for name in sorted(files):
            if _FRAME_FILE.match(name) or _RAW_ARCHIVE.search(name):
                return (rel / name).as_posix()
        looked += 1
        if looked >= PROBE_FOLDERS:
            return None
    return None


def no_manifest(source: str | Path, where: str) -> FileNotFoundError:
    """The error of a local source with no manifest: what it looks like, and the fix."""
    text, path = str(source), Path(source)
    expected = (f"expected a folder written by `carla-wds pack` (or a path/URL to its "
                f"{MANIFEST})")
    if _PATTERN.search(path.name):
        return FileNotFoundError(f"{text} is a pattern of shard names; carla-wds reads a pack "
                                 f"through its manifest, not a pattern. Fix: "
                                 f"{_pack_folder(path.parent)}")
    if path.name.endswith(".tar") or path.is_file() and not text.endswith(".json"):
        return FileNotFoundError(f"{text} is a file (one shard?), not a pack; {expected}. Fix: "
                                 f"{_pack_folder(path.parent)}")
    if path.is_dir():
        shards = sorted(p.name for p in path.glob("*.tar"))
        if shards:
            return FileNotFoundError(
                f"no manifest at {where}: {text} holds {len(shards)} shard file"
                f"{'' if len(shards) == 1 else 's'} (e.g. {shards[0]}) but no {MANIFEST}, as an "
                "unfinished pack leaves it. Fix: finish the pack (carla-wds pack ... --resume), "
                "or pass the folder the pack wrote its manifest to")
        raw = _raw_example(path)
        if raw:
            return FileNotFoundError(
                f"no manifest at {where}: {text} looks like raw route folders or archives of "
                f"them (e.g. {raw}), not a pack. Fix: run `carla-wds pack {text} OUT --layout "
                "LAYOUT` first, then pass OUT")
    return FileNotFoundError(f"no manifest at {where}; {expected}")


__all__ = ["MANIFEST", "no_manifest"]
