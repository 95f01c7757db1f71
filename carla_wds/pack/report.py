"""The manifest a finished pack writes: its counts, shards, skipped frames and pack options."""
from __future__ import annotations

from typing import Any

from ..schema import SCHEMA_VERSION, SampleSpec


def build_manifest(spec: SampleSpec, layout, records, report: dict, opts, version: str,
                   n_routes: int, image_sizes: dict[str, tuple[int, int]] | None = None
                   ) -> dict[str, Any]:
    """The manifest of a finished pack. `image_sizes` holds each camera's (H, W) as stored in
    the shards (after --resize); the loader refuses a member whose header says otherwise."""
    plans = report["plans"]
    skipped = [s for p in plans for s in p.skipped] + report["skipped"]
    skipped.sort(key=lambda s: (s.episode, -1 if s.frame is None else s.frame, s.file))
    total = sum(r.samples for r in records)
    counts = {"routes": n_routes, "frames": sum(p.n_frames for p in plans),
              "samples": total, "tail_frames": sum(p.tail for p in plans),
              "skipped": len(skipped), "nan_theta": sum(p.nan_theta for p in plans),
              "void_command": sum(p.void_command for p in plans)}
    if counts["frames"] != total + counts["tail_frames"] + len(skipped):
        raise AssertionError(f"frame accounting broke: {counts}; this is a carla-wds bug")
    return {
        "schema_version": SCHEMA_VERSION, "tool": "carla-wds", "tool_version": version,
        "layout": layout.name, "cameras": list(spec.cameras), "pred_len": spec.pred_len,
        "image_format": spec.image_format, "total_samples": total,
        "shards": [r.__dict__ for r in records], "counts": counts,
        "skipped": [s.record() for s in skipped], "pack_args": opts.identity(),
        # None (as in packs made before sizes were recorded) rather than a partial mapping
        "image_sizes": {c: list(image_sizes[c]) for c in spec.cameras}
        if image_sizes else None,
    }
