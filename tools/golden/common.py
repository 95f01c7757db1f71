"""Shared pieces of the golden-output generators (tools/golden/make_golden.py).

The golden files hold what each project's OWN loader, run at a pinned commit, serves on small
raw routes written by carla-wds's synth. Nothing here copies their code: their files are
imported at run time from a folder given on the command line (--repo-dir), after checking that
each file is byte-identical to the pinned commit (git blob ids, so a `git archive` export with
no .git folder is checked as well as a worktree).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
import types
from pathlib import Path
from typing import Any, Iterable

import numpy as np

SCHEMA = 1


def git_blob_id(data: bytes) -> str:
    """The id git gives a file's content (sha1 of 'blob <len>\\0' + bytes)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def check_pinned(repo_dir: Path, blobs: dict[str, str], commit: str) -> None:
    """Refuse a checkout whose loader files differ from the pinned commit's."""
    for rel, want in blobs.items():
        path = repo_dir / rel
        if not path.is_file():
            raise SystemExit(f"{path}: missing; export the pinned commit {commit} there, e.g. "
                             f"git --git-dir=MIRROR archive {commit} | tar -x -C {repo_dir}")
        got = git_blob_id(path.read_bytes())
        if got != want:
            raise SystemExit(f"{path}: blob {got} is not {want} of commit {commit}; "
                             "check out the pinned commit")


def tree_sha256(root: Path) -> str:
    """One hash over every file's relative path and bytes (the synth determinism check)."""
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(root)).encode() + b"\0")
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def synth_routes(dest: Path, synth: dict) -> str:
    """Write the routes with carla-wds's synth twice and insist on identical bytes."""
    from carla_wds.pack.synth import synth_dataset
    hashes = []
    for attempt in ("a", "b"):
        out = dest if attempt == "a" else Path(tempfile.mkdtemp(prefix="golden_twice_"))
        synth_dataset(out, synth["layout"], episodes=synth["episodes"], frames=synth["frames"],
                      seed=synth["seed"], image_size=tuple(synth["image_size"]), progress=False)
        hashes.append(tree_sha256(out))
        if attempt == "b":
            shutil.rmtree(out)
    if hashes[0] != hashes[1]:
        raise SystemExit(f"synth {synth} is not deterministic: {hashes}")
    return hashes[0]


def f32(value: Any) -> Any:
    """A label as nested lists of float32-rounded numbers (exact in JSON's float64)."""
    arr = np.asarray(value, dtype=np.float64).astype(np.float32)
    return arr.tolist() if arr.ndim else float(arr)


def f32_digest(value: Any) -> str:
    """sha256 of the little-endian float32 bytes: for long pass-through vectors (features)."""
    return hashlib.sha256(np.asarray(value, dtype="<f4").tobytes()).hexdigest()


def stub_modules(names: Iterable[str]) -> None:
    """Empty modules for imports their loader files make but the data path never uses
    (e.g. the CARLA client library); a use would raise AttributeError, not pass silently."""
    for name in names:
        if name not in sys.modules:
            sys.modules[name] = types.ModuleType(name)


class _Attrs:
    """Any attribute is its own name: enough for config constants built from a library the
    data path never calls (carla.WeatherParameters.ClearNoon in a config's weather table)."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> "_Attrs":
        return _Attrs(f"{self._name}.{attr}")


def stub_attr_module(name: str) -> None:
    """A stub module whose attributes are _Attrs placeholders (module __getattr__, PEP 562)."""
    module = types.ModuleType(name)

    def attrs(attr: str) -> _Attrs:
        if attr.startswith("__"):      # inspect and importlib probe __file__, __path__, ...
            raise AttributeError(attr)
        return _Attrs(f"{name}.{attr}")
    module.__getattr__ = attrs
    sys.modules.setdefault(name, module)


def numpy2_aliases() -> None:
    """np.float / np.int / np.bool (removed in numpy 1.24) and np.string_ (numpy 2.0), used by
    2021-2023 loaders; each alias is what numpy's own deprecation message names."""
    for alias, real in (("float", float), ("int", int), ("bool", bool), ("object", object),
                        ("string_", np.bytes_)):
        if alias not in np.__dict__:
            setattr(np, alias, real)


def write_golden(path: Path, doc: dict) -> None:
    text = json.dumps(doc, indent=None, separators=(",", ":"), sort_keys=True)
    path.write_text(text + "\n")
    size = os.path.getsize(path)
    if size > 200_000:
        raise SystemExit(f"{path}: {size} bytes, over 200 KB; use fewer routes or frames")
