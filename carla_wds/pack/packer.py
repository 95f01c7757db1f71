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
import queue
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator

from ..progress import bar as progress_bar   # a terminal's bar, or a few log lines
from ..words import counted

from .. import __version__, limits
from ..objstore import is_objstore
from .datasets import PackInput, open_input
from .frames import Encoded, FrameEncoder, ImageSizes, encode_chunk
from .options import PackOptions
from .buckets import BucketCounter, key_rate_hz
from .output import LocalOutput, Output
from .pool import WorkerPool
from .report import PackReport, build_manifest, nothing_packed
from .routes import FrameTask, PackError, RoutePlan, Skip
from .shards import ShardSink

log = logging.getLogger(__name__)
CHUNK = 16   # frames per worker task: large enough to amortise IPC, small enough to stream
AHEAD = 64   # chunks a pool may hold before their results are taken (bounds clip bytes held)


def _chunks(plans: Iterator[RoutePlan], encoder: FrameEncoder, seen: queue.SimpleQueue,
            start: tuple[int, str]) -> Iterator[tuple[list[FrameTask], FrameEncoder]]:
    """Worker tasks of the stream, after the first `start[0]` (those of committed shards, the
    last of which was the sample `start[1]`): their images are neither read nor encoded.

    A pool takes chunks ahead of the results taken, so each plan goes into `seen` with its
    frames that never become tasks (tails, head, skipped, committed), and is filed into the
    report when the results reach it (`_file_plans`)."""
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
            yield tasks[i:i + CHUNK], encoder
    if skip:
        raise _changed(f"it gives {start[0] - skip} frame tasks, the committed shards "
                       f"took {start[0]}")


def _file_plans(seen: queue.SimpleQueue, report: PackReport, bar: Any) -> None:
    """On the main thread: move the plans the feeder has handed over into the report."""
    while not seen.empty():
        plan, done_already = seen.get()
        report.plans.append(plan)
        bar.update(done_already)


def _changed(detail: str) -> PackError:
    return PackError(f"--resume: the input no longer matches the interrupted pack's journal "
                     f"({detail}); the input changed. Fix: pack again with --overwrite")


def pack(input_dir: str | Path, output_dir: str | Path, opts: PackOptions) -> dict[str, Any]:
    """Pack input_dir into output_dir (a folder, or an `s3://` prefix); returns the manifest
    that was written.

    Options and input are checked before OUTPUT_DIR is touched; a pack that fails before its
    first shard is committed leaves OUTPUT_DIR as it found it (or absent)."""
    opts.validate()
    src, opts = open_input(input_dir, opts)
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


def _pack_into(target: Output, src: PackInput, opts: PackOptions) -> dict[str, Any]:
    done = target.prepare(opts)
    if not done:
        target.start_journal(opts)
    sink = ShardSink(target.out, opts.prefix, opts.max_samples, opts.max_bytes, done, opts.fsync,
                     target.publisher, opts.route_shards)
    sizes = ImageSizes(done[-1].meta if done else {})
    sink.meta = sizes.meta()
    # the bucket values go on from where the committed shards left the route (buckets.py)
    sink.buckets = BucketCounter(key_rate_hz(src.layout),
                                 done[-1].meta.get("buckets_state") if done else None)
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
    log.info("packed %s into %s in %s (%d skipped)", counted(manifest["total_samples"], "sample"),
             counted(len(records), "shard"), target.label, len(manifest["skipped"]))
    return manifest


def _run(src: PackInput, opts: PackOptions, sink: ShardSink, report: PackReport,
         sizes: ImageSizes, start: tuple[int, str]) -> None:
    plans = (src.plan(e) for e in src.episodes)
    bar = progress_bar(desc="pack", unit="frame", total=src.total, disable=not opts.progress)
    seen: queue.SimpleQueue = queue.SimpleQueue()
    pool = _pool(opts, src.encoder)
    chunks = _chunks(plans, src.encoder, seen, start)
    try:
        # clip tasks carry their files' bytes: at most AHEAD chunks out ahead of the results
        results = pool.imap(chunks, AHEAD) if pool else map(encode_chunk, chunks)
        for chunk in results:
            _file_plans(seen, report, bar)
            for item in chunk:
                _take(item, opts, sink, report, sizes)
            bar.update(len(chunk))
        _file_plans(seen, report, bar)   # routes after the last chunk (all skipped or tails)
    finally:
        bar.close()
        if pool:
            pool.close()


def _pool(opts: PackOptions, encoder: FrameEncoder) -> WorkerPool | None:
    """Worker processes, only when images are decoded or re-encoded. Copying PNG bytes verbatim
    is I/O, not CPU: workers would only add a pickle and a pipe per image (3x slower on 2
    cores), and a thread reading ahead gained nothing (the second core already hashes); both
    measured, see docs/benchmarks.md. A worker that dies fails the pack naming its chunk
    (pool.py), where multiprocessing.Pool waited forever."""
    if opts.workers > 1 and encoder.decodes:
        # spawned workers start from the default limits: hand them this process's own
        return WorkerPool(opts.workers, encode_chunk, _chunk_name, initializer=limits.set_active,
                          initargs=(limits.active(),))
    if opts.workers > 1:
        log.info("PNG passthrough without --check-images: one reader, --workers %d not needed",
                 opts.workers)
    return None


def _chunk_name(chunk: tuple[list[FrameTask], FrameEncoder]) -> str:
    """A chunk as an error names it: its route and frames (a chunk is one route's)."""
    tasks = chunk[0]
    return f"route {tasks[0].episode} frames {tasks[0].frame}-{tasks[-1].frame}"


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


def _skip(item: Skip, opts: PackOptions, report: PackReport) -> None:
    if opts.on_error == "fail":
        raise PackError(item.message())
    log.warning("skipped %s", item.message())
    report.skipped.append(item)
