"""`carla-wds pack`: raw CARLA route folders -> verified, reproducible WebDataset shards.

Stages: find routes (sorted) -> plan each route from its measurements (main process, cheap) ->
read and check camera files, re-encode if asked (worker processes, in order) -> cut into shards
(main process) -> manifest, written last. A pack killed at any point resumes with --resume to
byte-identical shards, because shard boundaries depend only on the ordered sample stream: the
journal says where in that stream each committed shard ended, so a resume re-plans the routes
(measurements only) and reads no image that went into a committed shard. Where the shards go
is output.LocalOutput (a folder) or upload.StoreOutput (an s3:// prefix, staged locally).
"""
from __future__ import annotations

import logging
import os
import queue
import threading
from dataclasses import dataclass, field, replace
from multiprocessing import get_context
from pathlib import Path
from typing import Any, Callable, Iterator

from tqdm import tqdm

from .. import __version__, limits
from ..objstore import is_objstore
from ..schema import SampleSpec, SchemaError, make_key
from .layout_spec import layout_spec, readers
from .frames import Encoded, FrameEncoder, ImageSizes, encode_chunk
from .layouts import Layout, load_layout
from .options import PackOptions
from .output import LocalOutput, Output
from .report import PackReport, build_manifest, nothing_packed
from .routes import FrameTask, PackError, RoutePlan, Skip, find_routes, plan_route
from .shards import ShardSink

log = logging.getLogger(__name__)
CHUNK = 16   # frames per worker task: large enough to amortise IPC, small enough to stream
AHEAD = 64   # chunks a pool may hold before their results are taken (bounds clip bytes held)
CLIP_LAYOUT = "bench2drive"


def _chunks(plans: Iterator[RoutePlan], encoder: FrameEncoder, seen: queue.SimpleQueue,
            start: tuple[int, str], ahead: threading.BoundedSemaphore | None = None
            ) -> Iterator[tuple[list[FrameTask], FrameEncoder]]:
    """Worker tasks of the stream, after the first `start[0]` (those of committed shards, the
    last of which was the sample `start[1]`): their images are neither read nor encoded.

    A pool consumes this generator in its feeder thread, so it writes nothing shared: each
    plan goes into `seen` with its frames that never become tasks (tails, head, skipped,
    committed), and the main thread files them (`_file_plans`)."""
    skip, last_key = start
    for plan in plans:
        done_already = plan.unsampled
        tasks = plan.tasks
        if skip:
            n = min(skip, len(tasks))
            skip -= n
            if skip == 0 and tasks[n - 1].key != last_key:
                raise _changed(f"frame task {start[0]} is {tasks[n - 1].key}, not {last_key}")
            done_already += n
            tasks = tasks[n:]
        # The report gets the plan without its tasks: a clip's tasks hold their files' bytes,
        # which must go once encoded, or a pack's memory would grow with the dataset.
        seen.put((replace(plan, tasks=[]), done_already))
        for i in range(0, len(tasks), CHUNK):
            if ahead is not None:
                ahead.acquire()
            yield tasks[i:i + CHUNK], encoder
    if skip:
        raise _changed(f"it gives {start[0] - skip} frame tasks, the committed shards "
                       f"took {start[0]}")


def _file_plans(seen: queue.SimpleQueue, report: PackReport, bar: tqdm) -> None:
    """On the main thread: move the plans the feeder has handed over into the report."""
    while not seen.empty():
        plan, done_already = seen.get()
        report.plans.append(plan)
        bar.update(done_already)


def _changed(detail: str) -> PackError:
    return PackError(f"--resume: the input no longer matches the interrupted pack's journal "
                     f"({detail}); the input changed. Fix: pack again with --overwrite")


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
    # Contiguous slices keep the merged parts in the same order as a single pack.
    return routes[i * len(routes) // n:(i + 1) * len(routes) // n]


@dataclass
class _Input:
    """What one pack reads, whatever the dataset's structure: the episodes (route folders, or
    clips), how each is planned, the encoder of its tasks, and what the manifest says of it."""
    layout: Any                           # .name, .rate_hz (and .spec_doc) for the manifest
    spec: SampleSpec
    episodes: list[Any]
    plan: Callable[[Any], RoutePlan]
    encoder: FrameEncoder
    total: int | None                     # frames, for the progress bar (None: unknown)
    split_missing: list[str] = field(default_factory=list)


def pack(input_dir: str | Path, output_dir: str | Path, opts: PackOptions) -> dict[str, Any]:
    """Pack input_dir into output_dir (a folder, or an s3:// prefix: see upload.py); returns
    the manifest that was written.

    Options and input are checked before OUTPUT_DIR is touched; a pack that fails before its
    first shard is committed leaves OUTPUT_DIR as it found it (or absent)."""
    opts.validate()
    src, opts = _clip_input(input_dir, opts) if opts.layout == CLIP_LAYOUT else \
        _route_input(input_dir, opts)
    if is_objstore(str(output_dir)):
        from .upload import StoreOutput
        target: Output = StoreOutput(str(output_dir), opts)
    else:
        target = LocalOutput(Path(output_dir))
    try:
        return _pack_into(target, src, opts)
    except BaseException:
        target.discard()
        raise


def _route_input(input_dir: str | Path, opts: PackOptions) -> tuple[_Input, PackOptions]:
    """Route folders of a layout YAML (tcp, transfuser4, tcp_roach, transfuser2022, garage)."""
    try:
        layout = load_layout(opts.layout)
    except (ValueError, OSError) as exc:   # unknown name, missing file, invalid YAML content
        raise PackError(f"--layout {opts.layout}: {exc}") from None
    pred_len = opts.pred_len if opts.pred_len is not None else layout.pred_len
    spec = layout_spec(layout, pred_len, opts.image_format or layout.image_ext)
    all_routes = find_routes(input_dir, layout)
    _check_key_collisions(all_routes, opts.dot_replacement)
    routes = _select_part(all_routes, opts.part)
    opts = replace(opts, pred_len=pred_len)
    encoder = FrameEncoder(spec, layout.image_ext, opts.quality, opts.resize, opts.check_images,
                           readers(layout, spec), opts.allow_pickle_input)
    ext = "." + layout.measurements_ext
    total = sum(n.endswith(ext) for r in routes
                for n in os.listdir(Path(input_dir) / r / layout.measurements))
    return _Input(layout, spec, routes, lambda r: _checked_plan(input_dir, r, layout, opts),
                  encoder, total), opts


def _clip_input(input_dir: str | Path, opts: PackOptions) -> tuple[_Input, PackOptions]:
    """Bench2Drive clips, extracted or as their .tar.gz archives (pack/b2d.py)."""
    from .b2d import CLIP_LAYOUT_INFO, ClipEncoder, b2d_settings, b2d_spec
    from .clips import find_clips, split_clips
    settings = b2d_settings(opts)
    opts = replace(opts, pred_len=settings.pred_len)
    spec = b2d_spec(settings, opts.image_format or "jpg")
    remote = opts.remote()   # an s3:// INPUT_DIR's credentials, timeouts and retries
    clips = find_clips(input_dir, remote=remote)
    missing: list[str] = []
    if opts.split is not None:
        clips, missing = split_clips(clips, opts.split, opts.subset, remote=remote)
        if missing and opts.on_error == "fail":
            raise PackError(f"--split {opts.split} lists {len(missing)} {opts.subset} clip(s) "
                            f"that INPUT_DIR {input_dir} lacks, e.g. {missing[0]}. Fix: point "
                            "INPUT_DIR at the folder holding every clip, or pack with "
                            "--on-error skip to list them in the manifest and go on")
    clips = _select_part(clips, opts.part)
    encoder = ClipEncoder(spec, "jpg", opts.quality, opts.resize, opts.check_images,
                          mirror_y=settings.handedness == "right")
    return _Input(CLIP_LAYOUT_INFO(settings), spec, clips,
                  lambda ref: _checked_clip(ref, settings, opts), encoder, None, missing), opts


def _pack_into(target: Output, src: _Input, opts: PackOptions) -> dict[str, Any]:
    done = target.prepare(opts)
    if not done:
        target.start_journal(opts)
    sink = ShardSink(target.out, opts.prefix, opts.max_samples, opts.max_bytes, done, opts.fsync,
                     target.publisher)
    sizes = ImageSizes(done[-1].meta if done else {})
    sink.meta = sizes.meta()
    # Frames the committed shards skipped (bad images in skip mode) are not seen again.
    report = PackReport(skipped=[Skip(**r) for e in done for r in e.skipped])
    start = (done[-1].tasks, done[-1].last_key) if done else (0, "")
    try:
        _run(src, opts, sink, report, sizes, start)
        records = sink.close()
        if not any(r.samples for r in records):
            raise nothing_packed(report, target.label)
    except BaseException:
        sink.abort()
        raise
    manifest = build_manifest(src.spec, src.layout, records, report, opts, __version__,
                              len(src.episodes), sizes.stored)
    if src.split_missing:
        manifest["split_missing"] = src.split_missing
    # each extra image member's (H, W): the loader and verify hold headers to it (None: none)
    manifest["extra_sizes"] = {m: list(hw) for m, hw in sorted(sizes.extras.items())} or None
    # the limits this pack needed raised (--limit), so a reader knows to raise them too
    default = limits.DEFAULT.doc()
    manifest["limits"] = {k: v for k, v in limits.active().doc().items()
                          if v != default[k]} or None
    target.write_manifest(manifest)
    log.info("packed %d samples into %d shards in %s (%d skipped)", manifest["total_samples"],
             len(records), target.label, len(manifest["skipped"]))
    return manifest


def _run(src: _Input, opts: PackOptions, sink: ShardSink, report: PackReport,
         sizes: ImageSizes, start: tuple[int, str]) -> None:
    plans = (src.plan(e) for e in src.episodes)
    bar = tqdm(desc="pack", unit="frame", total=src.total, disable=not opts.progress)
    seen: queue.SimpleQueue = queue.SimpleQueue()
    pool = _pool(opts, src.encoder)
    # A pool's feeder thread reads tasks as fast as it can; clip tasks carry their files'
    # bytes, so it may run at most AHEAD chunks ahead of the results taken here.
    ahead = threading.BoundedSemaphore(AHEAD) if pool else None
    chunks = _chunks(plans, src.encoder, seen, start, ahead)
    try:
        results = pool.imap(encode_chunk, chunks) if pool else map(encode_chunk, chunks)
        for chunk in results:
            if ahead is not None:
                ahead.release()
            _file_plans(seen, report, bar)
            for item in chunk:
                _take(item, opts, sink, report, sizes)
            bar.update(len(chunk))
        _file_plans(seen, report, bar)   # routes after the last chunk (all skipped or tails)
    finally:
        bar.close()
        if pool:
            pool.terminate()


def _pool(opts: PackOptions, encoder: FrameEncoder):
    """Worker processes, only when images are decoded or re-encoded. Copying PNG bytes verbatim
    is I/O, not CPU: workers would only add a pickle and a pipe per image (3x slower on 2
    cores), and a thread reading ahead gained nothing (the second core already hashes); both
    measured, see docs/benchmarks.md."""
    if opts.workers > 1 and encoder.decodes:
        # spawned workers start from the default limits: hand them this process's own
        return get_context("spawn").Pool(opts.workers, initializer=limits.set_active,
                                         initargs=(limits.active(),))
    if opts.workers > 1:
        log.info("PNG passthrough without --check-images: one reader, --workers %d not needed",
                 opts.workers)
    return None


def _take(item: Encoded | Skip, opts: PackOptions, sink: ShardSink, report: PackReport,
          sizes: ImageSizes) -> None:
    """One encoded frame of the ordered stream into the sink, or its skip into the report."""
    if isinstance(item, Encoded):
        item = sizes.check(item)
        if not sink.meta["image_sizes"]:   # the first sample set them
            sink.meta = sizes.meta()
    if isinstance(item, Skip):
        _skip(item, opts, report)
        sink.skip(item.record())
    else:
        sink.add(item)


def _checked_plan(input_dir, route: str, layout: Layout, opts: PackOptions) -> RoutePlan:
    plan = plan_route(input_dir, route, layout, opts.pred_len, opts.dot_replacement,
                      opts.allow_pickle_input, opts.all_frames)
    if plan.filtered:
        log.info("route %s left out by the layout's route filter: %s", route, plan.filtered)
    if plan.skipped and opts.on_error == "fail":
        # Name the bad file's own frame rather than an earlier frame it makes unusable.
        cause = [s for s in plan.skipped if not s.derived] or plan.skipped
        raise PackError(cause[0].message())
    return plan


def _skip(item: Skip, opts: PackOptions, report: PackReport) -> None:
    if opts.on_error == "fail":
        raise PackError(item.message())
    log.warning("skipped %s", item.message())
    report.skipped.append(item)


def _checked_clip(ref, settings, opts: PackOptions) -> RoutePlan:
    """plan_clip, with an unreadable clip (a truncated archive) an error in fail mode and a
    listed, left-out clip in skip mode."""
    from .b2d import plan_clip
    plan = plan_clip(ref, settings, opts.dot_replacement)
    if plan.filtered and opts.on_error == "fail":
        fix = "" if "--limit " in plan.filtered else (   # a limit's message has its own fix
            ". Fix: re-download it (compare its sha256 with Bench2Drive's file list), or pack "
            "with --on-error skip to list it in the manifest and go on")
        raise PackError(f"clip {ref.path}: {plan.filtered}{fix}")
    if plan.filtered:
        log.warning("clip %s left out: %s", ref.name, plan.filtered)
    if plan.skipped and opts.on_error == "fail":
        cause = [s for s in plan.skipped if not s.derived] or plan.skipped
        raise PackError(cause[0].message())
    return plan
