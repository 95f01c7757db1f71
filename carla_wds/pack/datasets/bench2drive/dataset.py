"""The Bench2Drive dataset of the pack registry: finds the clips (and the official split's),
and plans each into keyframe tasks (plan.py) with its own options (options.py)."""
from __future__ import annotations

import logging
import os
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping

from ...errors import PackError
from ...routes import RoutePlan, raise_first_skip, select_part
from ..base import Dataset, PackInput
from .clips import find_clips, split_clips
from .options import OPTIONS, Bench2DriveOptions
from .encoder import ClipEncoder
from .futures import MASKED_SAMPLES
from .plan import CLIP_LAYOUT_INFO, b2d_settings, b2d_spec, plan_clip

log = logging.getLogger(__name__)


class Bench2Drive(Dataset):
    """--layout bench2drive: clips, extracted or as their .tar.gz archives."""
    options = OPTIONS

    def check_options(self, given: Mapping[str, Any]) -> None:
        Bench2DriveOptions.of(given).check()

    def summary(self, manifest: Mapping[str, Any]) -> str | None:
        c = manifest["counts"]
        return (f"{c['between']} frames between keyframes; speed null: {c['null_speed']}, "
                f"ego class 'vehicle': {c['ego_as_vehicle']}; {c['filtered_routes']} clips "
                f"left out, {len(manifest.get('split_missing', []))} split clips missing")

    def recognises(self, input_dir: str | Path) -> bool:
        """A clip folder holding anno/ and camera/ up to 3 folders down (a .tar.gz alone
        could be any dataset's archive)."""
        root = Path(input_dir)
        for dirpath, dirnames, _ in os.walk(root) if root.is_dir() else ():
            if {"anno", "camera"} <= set(dirnames):
                return True
            if len(Path(dirpath).relative_to(root).parts) >= 3:
                dirnames.clear()
        return False

    def open(self, input_dir: str | Path, opts: Any) -> tuple[PackInput, Any]:
        own = Bench2DriveOptions.of(opts.dataset_options)
        settings = b2d_settings(opts, own)
        opts = replace(opts, pred_len=settings.pred_len)
        spec = b2d_spec(settings, opts.image_format or "jpg")
        remote = opts.remote()   # an s3:// INPUT_DIR's credentials, timeouts and retries
        clips = find_clips(input_dir, remote=remote)
        missing: list[str] = []
        if own.split is not None:
            clips, missing = split_clips(clips, own.split, own.subset, remote=remote)
            if missing and opts.on_error == "fail":
                raise PackError(f"--split {own.split} lists {len(missing)} {own.subset} "
                                f"clip(s) that INPUT_DIR {input_dir} lacks, e.g. {missing[0]}. "
                                "Fix: point INPUT_DIR at the folder holding every clip, or "
                                "pack with --on-error skip to list them in the manifest and "
                                "go on")
        clips = select_part(clips, opts.part, opts.select)
        encoder = ClipEncoder(spec, "jpg", opts.quality, opts.resize, opts.check_images,
                              mirror_y=settings.handedness == "right")
        layout = CLIP_LAYOUT_INFO(settings, samples=MASKED_SAMPLES) \
            if settings.masked_future else CLIP_LAYOUT_INFO(settings)
        return PackInput(layout, spec, clips,
                         lambda ref: _checked_clip(ref, settings, opts), encoder, None,
                         missing), opts


def _checked_clip(ref, settings, opts: Any) -> RoutePlan:
    """plan_clip, with an unreadable clip (a truncated archive) an error in fail mode and a
    listed, left-out clip in skip mode."""
    plan = plan_clip(ref, settings, opts.dot_replacement)
    if plan.filtered and opts.on_error == "fail":
        fix = "" if "--limit " in plan.filtered else (   # a limit's message has its own fix
            ". Fix: re-download it (compare its sha256 with Bench2Drive's file list), or pack "
            "with --on-error skip to list it in the manifest and go on")
        raise PackError(f"clip {ref.path}: {plan.filtered}{fix}")
    if plan.filtered:
        log.warning("clip %s left out: %s", ref.name, plan.filtered)
    raise_first_skip(plan, opts.on_error)
    return plan
