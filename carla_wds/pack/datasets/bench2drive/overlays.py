"""Bench2Drive-VL's VQA as an overlay on bench2drive packs (`carla-wds pack-overlay --kind
b2d_vl`, pack/overlay.py).

Thinklab-SJTU/Bench2Drive-VL @ b5128ed, B2DVL_Adapter/b2dvl_dataset.py: the VQA folder holds
one folder per clip (a name with `_`, the Bench2Drive clip's own: `<Scenario>_<Town>_Route
<id>_Weather<id>`), each with one `<frame>.json` per annotated frame, the frame number in
five digits (`f"{frame_number:05d}.json"`, load_vqa_data); the loader keeps the parsed file
as the sample's `content` and pairs it with the clip's `camera/rgb_*/<frame>.jpg` and
`anno/<frame>.json.gz` of the same number. The content is DriveCommenter's VQA for that
frame, served here as parsed: a JSON object (its keys are not read here).

Bench2Drive-Speed (MeteorCollector/Bench2Drive-Speed-official @ 64dc5f2,
tools/append_virtual_target_speed.py process_scene): for each clip folder it writes
`<clip>/appended_anno/<frame>.json.gz`, a copy of the frame's `anno/<frame>.json.gz` with
`fut_speed` (the next 40 frames' speeds), `tendency_speed` and `virtual_target_speed` added
(m/s). The copy repeats the base's own labels, so only those three keys are stored.
"""
from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

from ...overlay_kinds import Located, OverlayKind, route_and_frame


def _clip_frame(rel: PurePosixPath, value: Any) -> Located | str:
    parts = rel.parts
    if len(parts) < 2 or "_" not in parts[-2]:
        return f"file {rel}: not in a clip folder (<Scenario>_<Town>_Route<id>_Weather<id>)"
    return route_and_frame(parts[:-1], parts[-1][:-len(".json")], str(rel))


def _vqa(value: Any) -> str | None:
    return None if isinstance(value, dict) else "expected a JSON object (a frame's VQA)"


def _speeds(value: Any) -> str | None:
    if not isinstance(value, dict) or not isinstance(value.get("virtual_target_speed"),
                                                     (int, float)):
        return "expected a frame's anno JSON object with a 'virtual_target_speed' number"
    return None


def _appended_frame(rel: PurePosixPath, value: Any) -> Located | str:
    parts = rel.parts
    if len(parts) < 3:
        return f"file {rel}: not in <clip>/appended_anno/"
    return route_and_frame(parts[:-2], parts[-1][:-len(".json.gz")], str(rel))


KINDS = {
    "b2d_vl": OverlayKind("b2d_vl", "Thinklab-SJTU/Bench2Drive-VL B2DVL_Adapter/"
                          "b2dvl_dataset.py (B2DVLDataset.__init__, load_vqa_data)",
                          (".json",), _clip_frame, _vqa),
    "b2d_speed": OverlayKind("b2d_speed", "MeteorCollector/Bench2Drive-Speed-official "
                             "tools/append_virtual_target_speed.py (process_scene)",
                             (".json.gz",), _appended_frame, _speeds, folder="appended_anno",
                             keep=("virtual_target_speed", "tendency_speed", "fut_speed")),
}
