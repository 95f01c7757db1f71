"""`carla-wds plan`: a dataset's episodes split into P parts of nearly equal bytes, written once
as OUT/plan.json, so every array task (and every retry) of a cluster pack reads the same split.

Episodes are found by the dataset's own discovery (`dataset_for(layout).open`, the list that
`--part i/N` slices); their sizes come from the file system (a route folder's files, a clip's
archive or folder) or, for an s3:// INPUT_DIR, from the store's listing (one paginated request
per folder, no object is read). Parts are filled greedily, largest episode first, each into the
part holding the fewest bytes so far (Graham's LPT rule), so the largest part holds at most the
mean plus one episode (`mean + max_episode`), where `--part i/N`'s contiguous slices by count
carry whatever sizes happen to sit side by side.

The plan records the input's fingerprint: sha256 over the sorted (episode, bytes) pairs, not the
input's path (nodes mount one file system under different paths). A pack checks the names of
all episodes and the sizes of its own part against the plan (`check_input`), which costs one
listing plus the part's own stats, not a walk of the whole dataset per array task.
"""
from __future__ import annotations

import hashlib
import heapq
import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..codecs import json_loads
from ..fileio import atomic_write_bytes
from ..objstore import is_objstore, read_object
from ..objwrite import StoreWriter
from ..remote import RemoteError, RemoteOptions
from .datasets import open_input
from .errors import PackError
from .options import PackOptions

PLAN = "plan.json"
FORMAT = "carla-wds-plan/1"
MAX_PLAN_BYTES = 1 << 28   # 13,638 clips x ~100 bytes is ~2 MB; far above any real plan


def episode_name(episode: Any) -> str:
    """The name a plan lists an episode under: a route folder's relative path, a clip's name."""
    return episode if isinstance(episode, str) else str(episode.name)


def under(prefix: str, rel: str) -> str:
    """rel under a folder or an s3:// prefix (objstore.join takes a manifest's URL instead)."""
    return f"{prefix.rstrip('/')}/{rel}"


def part_dir(i: int, parts: int) -> str:
    """parts/00017: zero-padded so that a listing sorts in part order."""
    return f"parts/{i:0{max(5, len(str(parts - 1)))}d}"


def discover(input_dir: str, opts: PackOptions) -> list[Any]:
    """Every episode of input_dir as `pack` would find it (no part, no selection)."""
    src, _ = open_input(input_dir, replace(opts, part=None, select=None))
    return list(src.episodes)


def _tree_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum((Path(d) / f).stat().st_size
               for d, _, files in os.walk(path, followlinks=True) for f in files)


def episode_sizes(input_dir: str, episodes: list[Any], opts: PackOptions) -> dict[str, int]:
    """name -> bytes of each episode: its own `size` where it knows it (a route in an
    archive: its members' bytes), else the store's listing for s3:// inputs, else the files."""
    if all(getattr(e, "size", None) is not None for e in episodes):
        return {episode_name(e): e.size for e in episodes}
    if is_objstore(input_dir):
        listing = StoreWriter(input_dir, opts.remote(), "INPUT_DIR").listing()
        root = input_dir.rstrip("/") + "/"
        out = {}
        for e in episodes:
            rel = str(e.path)[len(root):] if str(e.path).startswith(root) else str(e.path)
            out[episode_name(e)] = listing.get(rel, 0)
        return out
    out = {}
    for e in episodes:
        path = Path(input_dir) / e if isinstance(e, str) else Path(e.path)
        out[episode_name(e)] = _tree_bytes(path)
    return out


def fingerprint(sizes: dict[str, int]) -> str:
    text = "\n".join(f"{name}\t{size}" for name, size in sorted(sizes.items()))
    return hashlib.sha256(text.encode()).hexdigest()


def names_digest(names: list[str]) -> str:
    return hashlib.sha256("\n".join(sorted(names)).encode()).hexdigest()


def greedy_parts(sizes: dict[str, int], parts: int) -> list[list[str]]:
    """Largest first, each into the part with the fewest bytes (ties: the lower part), and
    each part's episodes back in discovery (name) order, as a single pack would meet them."""
    heap = [(0, i) for i in range(parts)]
    out: list[list[str]] = [[] for _ in range(parts)]
    for name in sorted(sizes, key=lambda n: (-sizes[n], n)):
        held, i = heapq.heappop(heap)
        out[i].append(name)
        heapq.heappush(heap, (held + sizes[name], i))
    return [sorted(p) for p in out]


def make_plan(input_dir: str, opts: PackOptions, parts: int) -> dict[str, Any]:
    """The plan document of input_dir in `parts` parts (see the module's docstring)."""
    if not isinstance(parts, int) or parts < 1:
        raise PackError(f"--parts {parts}: expected a whole number >= 1. Fix: pass e.g. "
                        "--parts 64 (several times the number of processes)")
    episodes = discover(input_dir, opts)
    if parts > len(episodes):
        raise PackError(f"--parts {parts}: INPUT_DIR {input_dir} has only {len(episodes)} "
                        f"episodes, and a part holds at least one. Fix: pass --parts "
                        f"{len(episodes)} or fewer")
    sizes = episode_sizes(input_dir, episodes, opts)
    split = greedy_parts(sizes, parts)
    return {"format": FORMAT, "layout": opts.layout, "input": str(input_dir),
            "dataset_options": opts.dataset_options or {}, "parts": parts,
            "episodes": len(sizes), "bytes": sum(sizes.values()),
            "fingerprint": fingerprint(sizes), "names": names_digest(list(sizes)),
            "part_list": [{"part": i, "dir": part_dir(i, parts),
                           "bytes": sum(sizes[n] for n in names),
                           "episodes": {n: sizes[n] for n in names}}
                          for i, names in enumerate(split)]}


def write_plan(out: str, doc: dict[str, Any]) -> str:
    """OUT/plan.json, a local file written atomically or an object; returns where. An OUT that
    holds another plan is refused: its parts were (or are being) packed from that one."""
    data = (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()
    try:
        held = read_plan(out)
    except PackError:
        held = None   # none yet (or not a plan: written over, as a fresh OUT would be)
    if held is not None and held != json.loads(data):
        raise PackError(f"{under(out, PLAN)} holds another plan ({held['parts']} parts of input "
                        f"fingerprint {held['fingerprint'][:12]}); its parts may be packed "
                        f"already. Fix: plan into a fresh OUT, or remove {out} first")
    if is_objstore(out):
        StoreWriter(out, None, "plan output").put_bytes(PLAN, data)
        return under(out, PLAN)
    Path(out).mkdir(parents=True, exist_ok=True)
    return str(atomic_write_bytes(Path(out) / PLAN, data))


def read_plan(where: str, remote: RemoteOptions | None = None) -> dict[str, Any]:
    """A plan.json (or the folder holding one), checked for the fields the tools use."""
    path = where if where.endswith(".json") else (under(where, PLAN) if is_objstore(where)
                                                   else str(Path(where) / PLAN))
    try:
        raw = read_object(path, MAX_PLAN_BYTES, remote, "plan") \
            if is_objstore(path) else Path(path).read_bytes()
        doc = json_loads(raw)   # bounded: json_bytes, json_depth (no RecursionError), json_values
    except (FileNotFoundError, RemoteError) as exc:
        cause = f" ({exc})" if isinstance(exc, RemoteError) else ""
        raise PackError(f"no plan at {path}{cause}. Fix: write one first: carla-wds plan "
                        "INPUT_DIR OUT --layout L --parts P") from None
    except ValueError as exc:
        raise PackError(f"{path} is not a plan carla-wds writes ({exc}). Fix: write it again "
                        "with carla-wds plan") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(
            doc.get("part_list"), list) or len(doc["part_list"]) != doc.get("parts"):
        raise PackError(f"{path} is not a {FORMAT} plan. Fix: write it again with "
                        "carla-wds plan")
    return doc


def check_input(plan: dict[str, Any], input_dir: str, episodes: list[Any], part: int,
                opts: PackOptions) -> list[str]:
    """The names of `part`'s episodes, once the input is shown to be the planned one: the same
    episode names, and this part's episodes of the planned sizes. One-line PackError else."""
    fix = (f"Fix: plan again (carla-wds plan {input_dir} OUT --layout {plan['layout']} "
           f"--parts {plan['parts']}) and pack every part of the new plan into a fresh OUT")
    names = [episode_name(e) for e in episodes]
    if names_digest(names) != plan["names"]:
        planned = set().union(*(p["episodes"] for p in plan["part_list"]))
        extra, gone = sorted(set(names) - planned), sorted(planned - set(names))
        what = (f"{len(extra)} episode(s) not in the plan, e.g. {extra[0]}" if extra else
                f"{len(gone)} planned episode(s) missing, e.g. {gone[0]}")
        raise PackError(f"--plan: INPUT_DIR {input_dir} does not match the plan's fingerprint "
                        f"{plan['fingerprint'][:12]}: {what}. {fix}")
    want = plan["part_list"][part]["episodes"]
    mine = [e for e in episodes if episode_name(e) in want]
    got = episode_sizes(input_dir, mine, opts)
    for name in sorted(want):
        if got.get(name) != want[name]:
            raise PackError(f"--plan: INPUT_DIR {input_dir} does not match the plan's "
                            f"fingerprint {plan['fingerprint'][:12]}: episode {name} has "
                            f"{got.get(name)} bytes, the plan says {want[name]}. {fix}")
    return sorted(want)
