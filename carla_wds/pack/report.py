"""What a pack reports besides its shards: the route plans, the skipped frames, the manifest."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ..schema import SCHEMA_VERSION, SampleSpec
from ..sequence import sequence_doc
from ..words import counted
from .buckets import bucket_doc
from .errors import PackError
from .routes import RoutePlan, Skip


@dataclass
class PackReport:
    """The routes planned and the frames skipped while encoding. Written by the main process's
    main thread only: the pool's feeder thread hands plans over through a queue."""
    plans: list[RoutePlan] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)   # bad images, committed shards' too

    def all_skipped(self) -> list[Skip]:
        """Frames planning refused plus frames encoding refused, in episode/frame/file order."""
        found = [s for p in self.plans for s in p.skipped] + self.skipped
        return sorted(found, key=lambda s: (s.episode, -1 if s.frame is None else s.frame,
                                            s.file))

    @property
    def frames(self) -> int:
        return sum(p.n_frames for p in self.plans)

    @property
    def tail_frames(self) -> int:
        return sum(p.tail for p in self.plans)

    @property
    def loader_left_out(self) -> tuple[int, int]:
        """Frames with a full future the project's loader does not serve: (head, tail)."""
        return sum(p.head for p in self.plans), sum(p.loader_tail for p in self.plans)


def nothing_packed(report: PackReport, out: str) -> PackError:
    """Every frame skipped, every route left out, or all tails: no manifest, since a manifest
    of 0 samples would load as a valid, empty dataset and a training run would start on
    nothing. The reasons name what was found: skipped frames' reasons, the routes (clips)
    left out and why, or the tails."""
    skipped = report.all_skipped()
    left_out = [p for p in report.plans if p.filtered]
    why = [f"{n} x {r}" for r, n in Counter(s.reason for s in skipped).most_common(3)]
    why += [f"route {p.episode} left out: {p.filtered}" for p in left_out[:3]]
    if len(left_out) > 3:
        why.append(f"{len(left_out) - 3} more routes left out")
    if report.tail_frames:
        why.append(f"{report.tail_frames} frames are route tails (the last --pred-len frames "
                   "of a route, which have no full future)")
    head, end = report.loader_left_out
    if head + end:
        why.append(f"{head + end} frames are ones the layout's own loader leaves out at a "
                   "route's start or end (pack with --all-frames to keep them)")
    first = ""
    if skipped:
        s = skipped[0]
        first = f" First: {s.episode} {'' if s.frame is None else f'frame {s.frame:04d} '}{s.file}."
    return PackError(f"no samples: all {counted(report.frames, 'frame')} of "
                     f"{counted(len(report.plans), 'route')} were skipped ({len(skipped)}) or are "
                     f"route tails "
                     f"({report.tail_frames}) or left out by the loader's rule ({head + end}), "
                     f"and {counted(len(left_out), 'route')} left out, so "
                     f"no shard and no manifest were written to {out}. Reasons: "
                     f"{'; '.join(why) or 'no frames found'}.{first} Fix: repair the input "
                     "these reasons name, or check that INPUT_DIR, --layout and --pred-len "
                     "match the data")


def build_manifest(spec: SampleSpec, layout, records, report: PackReport, opts, version: str,
                   n_routes: int, image_sizes: dict[str, tuple[int, int]] | None = None
                   ) -> dict[str, Any]:
    """The manifest of a finished pack. `image_sizes` holds each camera's (H, W) as stored in
    the shards (after --resize); the loader refuses a member whose header says otherwise.
    `members` names each member's codec, which the loader, verify and inspect decode with."""
    skipped = report.all_skipped()
    total = sum(r.samples for r in records)
    head, end = report.loader_left_out
    counts = {"routes": n_routes, "frames": report.frames,
              "samples": total, "tail_frames": report.tail_frames,
              "head_frames": head, "loader_tail_frames": end,
              "skipped": len(skipped), "nan_theta": sum(p.nan_theta for p in report.plans),
              "void_command": sum(p.void_command for p in report.plans),
              "filtered_routes": sum(bool(p.filtered) for p in report.plans)}
    counts["route_gaps"] = sequence_doc([r.__dict__ for r in records])["gaps"]
    for plan in report.plans:   # a dataset's own counts (RoutePlan.extra_counts)
        for name, n in plan.extra_counts().items():
            counts[name] = counts.get(name, 0) + n
    if counts["frames"] != total + counts["tail_frames"] + head + end + len(skipped):
        raise AssertionError(f"frame accounting broke: {counts}; this is a carla-wds bug")
    return {
        "schema_version": SCHEMA_VERSION, "tool": "carla-wds", "tool_version": version,
        "layout": layout.name, "cameras": list(spec.cameras), "pred_len": spec.pred_len,
        "image_format": spec.image_format, "members": spec.codec_names(),
        "spec": {**spec.spec_doc(), "rate_hz": layout.rate_hz,
                 **(layout.spec_doc() if hasattr(layout, "spec_doc") else {})},
        "filtered_routes": [{"episode": p.episode, "reason": p.filtered}
                            for p in report.plans if p.filtered],
        "total_samples": total,
        # new in issue 24: a manifest without it holds every frame with a full future
        "sample_rule": layout.samples.doc(opts.all_frames),
        "shards": [r.__dict__ for r in records], "counts": counts,
        # routes as sequences (sequence.py): what history windows need to know of the shards
        "sequence": sequence_doc([r.__dict__ for r in records]),
        "buckets": bucket_doc([r.__dict__ for r in records]),
        "skipped": [s.record() for s in skipped], "pack_args": opts.identity(),
        # None (as in packs made before sizes were recorded) rather than a partial mapping
        "image_sizes": {c: list(image_sizes[c]) for c in spec.cameras}
        if image_sizes else None,
    }
