"""Regenerate tests/golden/bench2drive_tcp_batches.npz: Bench2DriveZoo's TCP port's own
DataLoader(CARLA_Data) batches (Thinklab-SJTU/Bench2DriveZoo@31278ff, branch tcp/admlp,
TCP/data.py, img_aug=False, torch's default collate, batch 3, no shuffle) on small synth
bench2drive clips at B2D's 1600x900 cameras: the golden of CARLAWebData(adapter="b2d_tcp")
(issue 26; tests/load/adapters/test_b2d_tcp_model.py).

    /tmp/golden_venv/bin/python -m tools.golden.b2d_tcp_batches --repo-dir /tmp/golden_src/b2dzoo_tcp

Not run in CI: it needs their code at the pinned commit (blob ids checked, tools/golden/b2d_tcp.py)
and their loader's packages (PIL, torchvision, imgaug, matplotlib, tqdm). Their data is made as
tools/golden/b2d_tcp.py makes it (gen_single_route per clip folder, gen_sub_folder into a
temporary working folder); the npz is laid out as tools/golden/batches.py writes it (`b{b}/{key}`,
front_img as `b{b}/front_img#sha256` + `#mean`, lists item by item, `b{b}/#ids`, `#meta`).
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
from pathlib import Path

from tools.golden import b2d_tcp, batches, common

BATCH_SIZE = 3
# B2D's camera size (their stitch crops columns 200:1400 of 1600); 28 frames a clip: the port
# serves range(0, (28 - 1) - 20 - 5) = frames 0 and 1, so 2 clips give 4 samples: batches of 3
# and 1 (the tail batch, which carla-wds's eval mode pads). The synth's quirks (NaN compass,
# `speed: null`) sit at frame 5, outside the served frames: their collate cannot take None.
SYNTH = {"layout": "bench2drive", "episodes": 2, "frames": 28, "seed": 26,
         "image_size": [900, 1600]}
LARGE = ("front_img",)


def _their_loader(repo_dir: Path, raw: Path, work: Path):
    """Their CARLA_Data over the clip folders under raw/v1 and each index's "clip/frame"."""
    gen, routes = b2d_tcp.clip_routes(repo_dir, raw)
    from TCP.data import CARLA_Data   # noqa: E402 - their package, from repo_dir
    cwd = os.getcwd()
    os.chdir(work)                    # gen_sub_folder saves into the working folder
    try:
        gen.gen_sub_folder(routes)
    finally:
        os.chdir(cwd)
    data = CARLA_Data(root=str(raw), data_path=str(work / "tcp_bench2drive-train.npy"),
                      img_aug=False)
    ids = []
    for i in range(len(data)):
        parts = Path(data.front_img[i][0]).parts   # .../v1/<clip>/camera/rgb_front/00003.jpg
        ids.append(f"{parts[-4]}/{int(parts[-1].split('.')[0])}")
    return data, ids


def make(repo_dir: Path, out_path: Path) -> Path:
    with tempfile.TemporaryDirectory(prefix="golden_batches_b2d_tcp_") as tmp:
        raw, work = Path(tmp) / "raw", Path(tmp) / "work"
        work.mkdir()
        raw_sha = common.synth_routes(raw, SYNTH)
        data, ids = _their_loader(repo_dir.resolve(), raw, work)
        out, structure = batches.collect(data, ids, BATCH_SIZE, LARGE)
    meta = {"project": "bench2drive_tcp", "repo": b2d_tcp.REPO, "commit": b2d_tcp.COMMIT,
            "files": b2d_tcp.BLOBS, "synth": SYNTH, "raw_sha256": raw_sha,
            "batch_size": BATCH_SIZE, "keys": list(structure[0]), "structure": structure,
            "large": list(LARGE),
            "regenerate": "python -m tools.golden.b2d_tcp_batches --repo-dir "
                          f"PATH_AT_{b2d_tcp.COMMIT[:7]}"}
    return batches.save(out, meta, out_path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo-dir", required=True, type=Path,
                    help="a `git archive` export of Bench2DriveZoo at 31278ff (TCP, tools)")
    ap.add_argument("--out", type=Path, default=Path("tests/golden/bench2drive_tcp_batches.npz"))
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    make(args.repo_dir, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
