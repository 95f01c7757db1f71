"""Regenerate tests/golden/<project>.json: each project's own loader, at a pinned commit, run on
small raw routes written by carla-wds's synth (see tools/golden/README.md).

    python -m tools.golden.make_golden --project tcp --repo-dir /tmp/golden_src/TCP

Each project runs in its own process (their packages share names such as `config` and `TCP`).
The routes are synthesised twice and must be byte-identical; their hash goes into the golden
file so that tests/test_golden.py knows it re-creates the same routes.
"""
from __future__ import annotations

import argparse
import importlib
import logging
import sys
import tempfile
from pathlib import Path

from tools.golden import common

PROJECTS = {"tcp": "tools.golden.tcp", "garage": "tools.golden.garage",
            "transfuser2022": "tools.golden.tf2022", "bench2drive_tcp": "tools.golden.b2d_tcp",
            "bench2drive_prepare": "tools.golden.b2d_prepare",
            "bench2drive_maps": "tools.golden.b2d_maps",
            "garage_lb2": "tools.golden.garage_lb2"}


def make(project: str, repo_dir: Path, out_dir: Path) -> Path:
    module = importlib.import_module(PROJECTS[project])
    with tempfile.TemporaryDirectory(prefix=f"golden_{project}_") as tmp:
        raw = Path(tmp) / "raw"
        raw_sha = common.synth_routes(raw, module.SYNTH)
        samples = module.run(repo_dir.resolve(), raw)
    samples.sort(key=lambda s: (s["route"], s["frame"]))
    doc = {"schema": common.SCHEMA, "project": project, "repo": module.REPO,
           "commit": module.COMMIT, "files": module.BLOBS, "synth": module.SYNTH,
           "raw_sha256": raw_sha, "loader": (module.__doc__ or "").strip().splitlines()[0],
           "regenerate": f"python -m tools.golden.make_golden --project {project} "
                         f"--repo-dir PATH_TO_{module.REPO.split('/')[1]}_AT_{module.COMMIT[:7]}",
           "samples": samples}
    doc.update(getattr(module, "EXTRA", {}))
    out = out_dir / f"{project}.json"
    common.write_golden(out, doc)
    logging.info("%s: %d samples -> %s", project, len(samples), out)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--project", required=True, choices=sorted(PROJECTS))
    ap.add_argument("--repo-dir", required=True, type=Path,
                    help="a checkout or `git archive` export of the project at the pinned commit")
    ap.add_argument("--out-dir", type=Path, default=Path("tests/golden"))
    ap.add_argument("--batches", action="store_true",
                    help="the collated batches for a model-ready adapter (tools/golden/batches.py)"
                         ": <project>_batches.npz")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    if args.batches:
        from tools.golden import batches
        batches.make(args.project, args.repo_dir, args.out_dir / f"{args.project}_batches.npz")
    else:
        make(args.project, args.repo_dir, args.out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
