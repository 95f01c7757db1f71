"""Helpers shared by tests of more than one wing: real packs, their keys, shard rewrites,
torchrun, child processes."""
from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Callable

import webdataset as wds

from carla_wds.fileio import sha256_file
from carla_wds.pack import PackOptions, pack
from carla_wds.pack.synth import synth_dataset


def manifest_of(pack_dir: Path) -> dict:
    return json.loads((pack_dir / "manifest.json").read_text())


def shard_hashes(pack_dir: Path) -> dict[str, str]:
    """name -> sha256 of every shard file on disk (not trusting the manifest)."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(pack_dir.glob("*.tar"))}


def rewrite_shard(path: Path, edit) -> None:
    """Rewrite one shard through webdataset's TarWriter, passing each sample through edit()."""
    with tarfile.open(path) as tar:
        samples: dict[str, dict] = {}
        for m in tar:
            key, _, suffix = m.name.partition(".")
            samples.setdefault(key, {"__key__": key})[suffix] = tar.extractfile(m).read()
    with open(path, "wb") as f, wds.TarWriter(f, encoder=False) as writer:
        for i, sample in enumerate(samples.values()):
            writer.write(edit(i, sample))
    # the manifest follows, so that only the edited members are wrong, not the shard's size
    manifest = json.loads((path.parent / "manifest.json").read_text())
    entry = next(s for s in manifest["shards"] if s["name"] == path.name)
    entry.update(bytes=path.stat().st_size, sha256=sha256_file(path))
    (path.parent / "manifest.json").write_text(json.dumps(manifest))


SCRIPTS = Path(__file__).parent / "scripts"


def torchrun(*args: str, nproc: int = 2, timeout: int = 240) -> subprocess.CompletedProcess:
    """torchrun, whose processes (agent, ranks, DataLoader workers) on a timeout first print
    each thread's stack (faulthandler on SIGABRT), so that a hang says where it is, and are
    then killed: none is left behind to load the rest of the suite."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc_per_node={nproc}", *args]
    env = {**os.environ, "PYTHONFAULTHANDLER": "1"}
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=env) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            # the ranks are session leaders of their own, so not one process group: the tree
            tree = process_tree(proc.pid)
            for pid in tree:   # one at a time, so that the stacks do not interleave
                _signal_all([pid], signal.SIGABRT)
                time.sleep(0.5)
            time.sleep(2)   # a process may ignore SIGABRT, or still be writing
            _signal_all(tree + process_tree(proc.pid), signal.SIGKILL)
            out, err = proc.communicate()   # with what was read before the timeout
            raise AssertionError(f"torchrun {' '.join(args)}: no end after {timeout} s; the "
                                 f"stacks of its processes:\n{err[-20000:]}\n{out[-2000:]}")
    assert proc.returncode == 0, out[-3000:] + err[-3000:]
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def process_tree(pid: int) -> list[int]:
    """pid and all its descendants alive now, parents first."""
    tree, i = [pid], 0
    while i < len(tree):
        for task in Path(f"/proc/{tree[i]}/task").glob("*"):
            try:
                tree += [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                pass
        i += 1
    return tree


def _signal_all(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


SIZE = (24, 32)


def make_pack(root: Path, layout: str = "tcp", episodes: int = 3, frames: int = 30,
              max_samples: int = 7, **kw) -> Path:
    raw, out = root / "raw", root / "shards"
    synth_dataset(raw, layout, episodes=episodes, frames=frames, seed=5, image_size=(48, 64),
                  progress=False)
    pack(raw, out, PackOptions.of(layout=layout, max_samples=max_samples, progress=False, **kw))
    return out


class PackZoo:
    """make_pack's packs, one per arguments, shared by the session's tests that only read
    them (the `zoo` fixture); `changed()` lists the files any test altered since."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.packs: dict[tuple, Path] = {}
        self.sums: dict[tuple, dict[str, str]] = {}

    def __call__(self, layout: str = "tcp", episodes: int = 3, frames: int = 30,
                 max_samples: int = 7, **kw) -> Path:
        key = (layout, episodes, frames, max_samples, tuple(sorted(kw.items())))
        if key not in self.packs:
            self.packs[key] = make_pack(self.root / f"{layout}_{len(self.packs)}", layout,
                                        episodes, frames, max_samples, **kw)
            self.sums[key] = _sums(self.packs[key].parent)
        return self.packs[key]

    def changed(self) -> list[str]:
        out = []
        for k, before in self.sums.items():
            now = _sums(self.packs[k].parent)
            out += [f"{self.packs[k].parent}/{name}" for name in sorted(set(before) | set(now))
                    if before.get(name) != now.get(name)]
        return out


_BUILT: dict[tuple, tuple[Path, dict[str, str]]] = {}


def built_once(key: tuple, build: Callable[[], Path], what: str) -> Path:
    """build()'s folder, made once per session and key and shared read-only by the modules
    that ask for the same; every call checks that no file in it changed since it was made
    (a test that changes it copies it first, with copy_tree)."""
    if key not in _BUILT:
        out = build()
        _BUILT[key] = (out, _sums(out))
    out, sums = _BUILT[key]
    now = _sums(out)
    changed = sorted(n for n in set(sums) | set(now) if sums.get(n) != now.get(n))
    assert not changed, f"a test changed the shared {what} {out}: {changed[:5]}; copy it first"
    return out


def shared_raw(tmp_path_factory, layout: str, *, episodes: int, frames: int, seed: int,
               image_size: tuple[int, int]) -> Path:
    """synth_dataset's folder for these arguments, written once per session and shared by
    the test modules that ask for the same (their module fixtures call this); read-only."""
    def build() -> Path:
        out = tmp_path_factory.mktemp(f"shared_raw_{layout}")
        synth_dataset(out, layout, episodes=episodes, frames=frames, seed=seed,
                      image_size=tuple(image_size), progress=False)
        return out
    return built_once(("raw", str(tmp_path_factory.getbasetemp()), layout, episodes, frames,
                       seed, tuple(image_size)), build, "raw folder")


def _sums(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): sha256_file(p) for p in sorted(root.rglob("*"))
            if p.is_file()}


def all_keys(shards: Path) -> list[str]:
    manifest = json.loads((shards / "manifest.json").read_text())
    import tarfile
    keys = []
    for s in manifest["shards"]:
        with tarfile.open(shards / s["name"]) as tar:
            keys += sorted({m.name.split(".")[0] for m in tar})
    return keys


def child_pids() -> list[int]:
    pids = []
    for task in Path("/proc/self/task").iterdir():
        try:
            pids += [int(p) for p in (task / "children").read_text().split()]
        except FileNotFoundError:   # a thread (a queue's feeder) ended meanwhile
            pass
    return pids


def mapped_rss_kb(path) -> int:
    """Resident kB of this process's mappings of `path` (/proc/self/smaps)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            if "-" in line.split(" ", 1)[0]:          # a mapping's first line
                inside = line.rstrip().endswith(str(path))
            elif inside and line.startswith("Rss:"):
                total += int(line.split()[1])
    return total
