"""`carla-wds pack`: raw CARLA route folders -> verified, reproducible WebDataset shards.

Stages: find routes (sorted) -> plan each route from its measurements (main process, cheap) ->
read and check camera files, re-encode if asked (worker processes, in order) -> cut into shards
(main process) -> manifest, written last. A pack killed at any point resumes with --resume to
byte-identical shards, because shard boundaries depend only on the ordered sample stream.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import asdict, dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any, Iterator

import cv2
import numpy as np
from tqdm import tqdm

from . import __version__
from .fileio import atomic_write_bytes, atomic_write_json, sha256_file
from .layouts import Layout, load_layout
from .manifest import MANIFEST, build_manifest
from .routes import FrameTask, PackError, RoutePlan, Skip, find_routes, plan_route
from .schema import (SampleSpec, SchemaError, decode_rgb, encode_sample, image_encoder,
                     make_key)
from .shards import JOURNAL, ShardRecord, ShardSink

log = logging.getLogger(__name__)
CHUNK = 16   # frames per worker task: large enough to amortise IPC, small enough to stream
PNG_SIG = b"\x89PNG\r\n\x1a\n"
PNG_END = b"\x00\x00\x00\x00IEND\xaeB`\x82"


@dataclass
class PackOptions:
    layout: str = "tcp"
    pred_len: int = 4
    max_samples: int = 1000
    max_bytes: int | None = None
    prefix: str = "shard"
    image_format: str | None = None        # None: keep the source format, bytes copied verbatim
    quality: int = 95
    resize: tuple[int, int] | None = None  # (H, W)
    workers: int = 1
    part: tuple[int, int] | None = None    # (i, N): this machine packs part i of N
    on_error: str = "fail"
    check_images: bool = False
    dot_replacement: str | None = None
    resume: bool = False
    overwrite: bool = False
    progress: bool = True
    # fsync each shard before its rename: durable against power loss, not only against a killed
    # process. Off, a pack runs at page-cache speed; the kernel writes the shards out later.
    fsync: bool = True

    def identity(self) -> dict[str, Any]:
        """The options that change the output bytes; a resume must match them exactly."""
        skip = {"workers", "resume", "overwrite", "progress", "fsync"}
        return {k: v for k, v in asdict(self).items() if k not in skip}


@dataclass
class _Codec:
    """What a worker needs to turn a FrameTask into an encoded sample."""
    spec: SampleSpec
    source_ext: str
    quality: int
    resize: tuple[int, int] | None
    check_images: bool
    cameras: list[str] = field(default_factory=list)

    @property
    def passthrough(self) -> bool:
        return self.resize is None and self.spec.image_format == self.source_ext


def _structure_problem(data: bytes, ext: str) -> str | None:
    """A cheap check that catches truncation without decoding."""
    if ext == "png":
        if not data.startswith(PNG_SIG) or data[12:16] != b"IHDR":
            return "not a PNG (bad signature or IHDR); expected a PNG file"
        if not data.endswith(PNG_END):
            return "truncated PNG (no IEND chunk at the end); expected a complete PNG file"
    elif not (data.startswith(b"\xff\xd8") and data.rstrip(b"\x00").endswith(b"\xff\xd9")):
        return "truncated or non-JPEG data; expected a complete JPEG file"
    return None


def _encode_frame(task: FrameTask, codec: _Codec) -> dict[str, Any] | Skip:
    images = {}
    for cam in codec.cameras:
        path = task.image_paths[cam]
        with open(path, "rb") as f:
            data = f.read()
        problem = _structure_problem(data, codec.source_ext)
        rgb = None
        if problem is None and (codec.check_images or not codec.passthrough):
            try:
                rgb = decode_rgb(data)
            except SchemaError:
                problem = "image does not decode; expected a valid image file"
        if problem:
            return Skip(task.episode, task.frame, "/".join(Path(path).parts[-2:]), problem)
        images[cam] = data if codec.passthrough else _reencode(rgb, codec)
    return encode_sample(codec.spec, task.key, images, task.labels)


def _reencode(rgb: np.ndarray, codec: _Codec) -> bytes:
    if codec.resize is not None:
        h, w = codec.resize
        rgb = cv2.resize(rgb, (w, h), interpolation=cv2.INTER_AREA)
    return image_encoder(codec.spec.image_format, quality=codec.quality)(rgb)


def _encode_chunk(args: tuple[list[FrameTask], _Codec]) -> list[dict[str, Any] | Skip]:
    tasks, codec = args
    return [_encode_frame(t, codec) for t in tasks]


def _chunks(plans: Iterator[RoutePlan], codec: _Codec, report: dict, bar: tqdm) -> Iterator[tuple]:
    for plan in plans:
        report["plans"].append(plan)
        bar.update(plan.tail + len(plan.skipped))   # frames that never become tasks
        for i in range(0, len(plan.tasks), CHUNK):
            yield plan.tasks[i:i + CHUNK], codec


def _prepare_output(out: Path, opts: PackOptions) -> list[ShardRecord]:
    """Refuse to clobber, clear for --overwrite, or load the journal for --resume."""
    out.mkdir(parents=True, exist_ok=True)
    existing = [p for p in out.iterdir()]
    if existing and not (opts.resume or opts.overwrite):
        raise PackError(f"OUTPUT_DIR {out} is not empty ({len(existing)} entries). Fix: pass "
                        "--resume to continue an interrupted pack, --overwrite to replace it, "
                        "or choose an empty folder")
    if opts.overwrite:
        for p in existing:
            shutil.rmtree(p) if p.is_dir() else p.unlink()
        existing = []
    for p in out.glob(".*.tmp"):
        p.unlink()   # a half-written shard from a killed pack
    return _read_journal(out, opts) if opts.resume else []


def _read_journal(out: Path, opts: PackOptions) -> list[ShardRecord]:
    journal = out / JOURNAL
    if not journal.exists():
        if (out / MANIFEST).exists():
            raise PackError(f"{out} holds a finished pack (manifest.json); nothing to resume. "
                            "Use --overwrite to pack again")
        return []
    lines = []
    for line in journal.read_text().splitlines():
        try:
            lines.append(json.loads(line))
        except json.JSONDecodeError:
            break   # the last line was cut short by the kill; its shard is redone
    saved = lines[0].get("options") if lines else None
    if saved != json.loads(json.dumps(opts.identity())):
        raise PackError(f"--resume: {journal} was written with options {saved}, now "
                        f"{opts.identity()}. Fix: resume with the same options, or --overwrite")
    done = [ShardRecord(**line["shard"]) for line in lines[1:]]
    for rec in done:
        path = out / rec.name
        if not path.exists() or sha256_file(path) != rec.sha256:
            raise PackError(f"--resume: shard {path} is missing or differs from the journal. "
                            "Fix: pack again with --overwrite")
    return done


def _check_key_collisions(routes: list[str], dot_replacement: str | None) -> None:
    """Two routes whose keys coincide (a.b and a_b with --dot-replacement _) would interleave."""
    seen: dict[str, str] = {}
    for route in routes:
        try:
            key = make_key(route, 0, dot_replacement)
        except SchemaError:
            continue   # reported per frame by plan_route
        if key in seen:
            raise PackError(f"routes {seen[key]!r} and {route!r} give the same sample keys "
                            f"({key[:-6]}__NNNN). Fix: rename one folder or choose another "
                            "--dot-replacement")
        seen[key] = route


def _select_part(routes: list[str], part: tuple[int, int] | None) -> list[str]:
    if part is None:
        return routes
    i, n = part
    if not 0 <= i < n:
        raise PackError(f"--part {i}/{n}: expected 0 <= i < N")
    # Contiguous slices keep the merged parts in the same order as a single pack.
    return routes[i * len(routes) // n:(i + 1) * len(routes) // n]


def pack(input_dir: str | Path, output_dir: str | Path, opts: PackOptions) -> dict[str, Any]:
    """Pack input_dir into output_dir; returns the manifest that was written."""
    if opts.on_error not in ("fail", "skip"):
        raise PackError(f"--on-error {opts.on_error!r}; expected fail or skip")
    try:
        layout = load_layout(opts.layout)
    except (ValueError, OSError) as exc:   # unknown name, missing file, invalid YAML content
        raise PackError(f"--layout {opts.layout}: {exc}") from None
    spec = SampleSpec(layout.camera_names, opts.pred_len, opts.image_format or layout.image_ext)
    all_routes = find_routes(input_dir, layout)
    _check_key_collisions(all_routes, opts.dot_replacement)
    routes = _select_part(all_routes, opts.part)
    out = Path(output_dir)
    done = _prepare_output(out, opts)
    if not done:
        atomic_write_bytes(out / JOURNAL, (json.dumps({"options": opts.identity()}) + "\n").encode())
    codec = _Codec(spec, layout.image_ext, opts.quality, opts.resize, opts.check_images,
                   list(layout.camera_names))
    sink = ShardSink(out, opts.prefix, opts.max_samples, opts.max_bytes, done, opts.fsync)
    report: dict[str, Any] = {"plans": [], "skipped": []}
    try:
        _run(input_dir, routes, layout, opts, codec, sink, report)
        records = sink.close()
    except BaseException:
        sink.abort()
        raise
    manifest = build_manifest(spec, layout, records, report, opts, __version__, len(routes))
    atomic_write_json(out / MANIFEST, manifest)
    (out / JOURNAL).unlink(missing_ok=True)
    log.info("packed %d samples into %d shards in %s (%d skipped)", manifest["total_samples"],
             len(records), out, len(manifest["skipped"]))
    return manifest


def _run(input_dir, routes: list[str], layout: Layout, opts: PackOptions, codec: _Codec,
         sink: ShardSink, report: dict) -> None:
    plans = (_checked_plan(input_dir, r, layout, opts) for r in routes)
    total = sum(n.endswith(".json") for r in routes
                for n in os.listdir(Path(input_dir) / r / layout.measurements))
    bar = tqdm(desc="pack", unit="frame", total=total, disable=not opts.progress)
    chunks = _chunks(plans, codec, report, bar)
    # Copying PNG bytes verbatim is I/O, not CPU: worker processes would only add a pickle and
    # a pipe per image (3x slower on 2 cores), and a thread reading ahead gained nothing (the
    # second core already hashes); both measured, see docs/benchmarks.md. Worker processes
    # are used when images are decoded or re-encoded.
    pool = None
    if opts.workers > 1 and (codec.check_images or not codec.passthrough):
        pool = get_context("spawn").Pool(opts.workers)
    elif opts.workers > 1:
        log.info("PNG passthrough without --check-images: one reader, --workers %d not needed",
                 opts.workers)
    try:
        results = pool.imap(_encode_chunk, chunks) if pool else map(_encode_chunk, chunks)
        for chunk in results:
            for item in chunk:
                if isinstance(item, Skip):
                    _skip(item, opts, report)
                else:
                    sink.add(item)
            bar.update(len(chunk))
    finally:
        bar.close()
        if pool:
            pool.terminate()


def _checked_plan(input_dir, route: str, layout: Layout, opts: PackOptions) -> RoutePlan:
    plan = plan_route(input_dir, route, layout, opts.pred_len, opts.dot_replacement)
    if plan.skipped and opts.on_error == "fail":
        # Name the bad file's own frame rather than an earlier frame it makes unusable.
        cause = [s for s in plan.skipped if not s.derived] or plan.skipped
        raise PackError(cause[0].message())
    return plan


def _skip(item: Skip, opts: PackOptions, report: dict) -> None:
    if opts.on_error == "fail":
        raise PackError(item.message())
    log.warning("skipped %s", item.message())
    report["skipped"].append(item)
