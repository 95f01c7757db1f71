"""Regenerate tests/golden/<project>_batches.npz: a codebase's own DataLoader, with torch's default
collate, on small synth routes, batch by batch (the model-ready adapters' goldens, issue 26).

    /tmp/golden_venv/bin/python -m tools.golden.make_golden --batches --project tcp \
        --repo-dir /tmp/golden_src/TCP

Not run in CI: it needs their code at the pinned commit (checked by git blob id, as
make_golden.py does) and their loader's packages (PIL, torchvision). The npz holds, per batch b
and key k: `b{b}/{k}` (a collated tensor, its dtype kept; a list's items as `b{b}/{k}/{i}`),
images as the sha256 of each row's float32 bytes (`b{b}/{k}#sha256`, with the per-channel means
as `#mean` for a diagnosis), `b{b}/#ids` (each row's "route/frame") and `#structure`, a JSON
string of each key's kind (tensor or list), dtype and shape, plus the synth settings, the routes'
hash and the pinned files. No pickles: the test loads it with allow_pickle=False.
"""
from __future__ import annotations

import hashlib
import json
import logging
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from tools.golden import common

IMAGE_KEYS = {"tcp": ("front_img",)}
BATCH_SIZE = 4
# 256x900 as TCP's data is stored (their loader never resizes); 2 Hz: 10 frames give 6 samples
SYNTH = {"tcp": {"layout": "tcp_roach", "episodes": 2, "frames": 10, "seed": 26,
                 "image_size": [256, 900]}}


def _their_loader(project: str, repo_dir: Path, raw: Path):
    """Their Dataset and each index's (route, frame) id, made as tools/golden/<project>.py does."""
    if project != "tcp":
        raise SystemExit(f"no batch golden for {project!r} yet")
    from tools.golden import tcp
    tcp.run(repo_dir, raw)   # writes packed_data.npy (their gen_data.py), checks the pins
    from TCP.data import CARLA_Data   # noqa: E402 - their package, from repo_dir
    towns = sorted(p for p in raw.iterdir() if p.is_dir())
    data = CARLA_Data(root=str(raw), data_folders=[str(t) for t in towns], img_aug=False)
    ids = []
    for i in range(len(data)):
        parts = data.front_img[i][0].strip("/").split("/")
        ids.append(f"{'/'.join(parts[:-2])}/{int(parts[-1].split('.')[0])}")
    return data, ids, tcp


def _record(out: dict[str, np.ndarray], name: str, value: Any, images: bool) -> dict:
    """One collated value into `out`; its structure entry."""
    import torch
    if isinstance(value, list):
        return {"kind": "list", "items": [_record(out, f"{name}/{i}", v, images)
                                          for i, v in enumerate(value)]}
    if not isinstance(value, torch.Tensor):
        raise SystemExit(f"{name}: {type(value).__name__}, not a tensor or list")
    arr = value.numpy()
    if images:
        rows = [hashlib.sha256(np.ascontiguousarray(r, "<f4").tobytes()).hexdigest() for r in arr]
        out[f"{name}#sha256"] = np.array(rows, dtype="U64")
        out[f"{name}#mean"] = arr.reshape(arr.shape[0], arr.shape[1], -1).mean(-1)
    else:
        out[name] = arr
    return {"kind": "tensor", "dtype": str(value.dtype).replace("torch.", ""),
            "shape": list(arr.shape)}


def collect(data, ids: list[str], batch_size: int, large) -> tuple[dict[str, np.ndarray], list]:
    """Their Dataset through torch's DataLoader (default collate, no shuffle), batch by batch
    into the npz's arrays (`b{b}/{key}`, the keys in large by row hashes, `b{b}/#ids`) and the
    per-batch structure (module docstring). Shared by every batch golden's generator."""
    import torch
    loader = torch.utils.data.DataLoader(data, batch_size=batch_size, shuffle=False)
    out: dict[str, np.ndarray] = {}
    structure = []
    for b, batch in enumerate(loader):
        structure.append({k: _record(out, f"b{b}/{k}", v, k in large)
                          for k, v in batch.items()})
        out[f"b{b}/#ids"] = np.array(ids[b * batch_size:(b + 1) * batch_size], dtype="U200")
    return out, structure


def save(out: dict[str, np.ndarray], meta: dict, out_path: Path) -> Path:
    """meta as the `#meta` JSON string, then the npz (compressed, no pickles) at out_path."""
    out["#meta"] = np.array(json.dumps(meta))
    np.savez_compressed(out_path, **out)
    logging.info("%s: %d batches -> %s (%d bytes)", meta["project"], len(meta["structure"]),
                 out_path, out_path.stat().st_size)
    return out_path


def make(project: str, repo_dir: Path, out_path: Path) -> Path:
    with tempfile.TemporaryDirectory(prefix=f"golden_batches_{project}_") as tmp:
        raw = Path(tmp) / "raw"
        raw_sha = common.synth_routes(raw, SYNTH[project])
        sys.path.insert(0, str(repo_dir))
        data, ids, module = _their_loader(project, repo_dir.resolve(), raw)
        out, structure = collect(data, ids, BATCH_SIZE, IMAGE_KEYS[project])
    meta = {"project": project, "repo": module.REPO, "commit": module.COMMIT,
            "files": module.BLOBS, "synth": SYNTH[project], "raw_sha256": raw_sha,
            "batch_size": BATCH_SIZE, "keys": list(structure[0]), "structure": structure,
            "regenerate": f"python -m tools.golden.make_golden --batches --project {project} "
                          f"--repo-dir PATH_AT_{module.COMMIT[:7]}"}
    return save(out, meta, out_path)
