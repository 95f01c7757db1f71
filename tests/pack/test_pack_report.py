"""The pack report: the same plans, skips and counts whether frames are encoded in this process
or in a worker pool (whose feeder thread runs the task generator and hands plans over)."""
from __future__ import annotations

import json

from carla_wds.pack.report import PackReport
from carla_wds.pack.routes import RoutePlan, Skip

EP = "Town01_tiny/routes_00"


def _break(raw, frames: dict[int, bytes]) -> None:
    for frame, data in frames.items():
        (raw / EP / "rgb_front" / f"{frame:04d}.png").write_bytes(data)


def test_report_is_the_same_with_and_without_a_pool(raw_tf4, copy_raw, tmp_path, packer):
    raw = copy_raw(raw_tf4)
    first = (raw / EP / "rgb_front" / "0002.png").read_bytes()
    _break(raw, {2: first[:200], 9: b"not an image", 20: first[:-1]})
    opts = dict(layout="transfuser4", max_samples=5, on_error="skip", check_images=True)
    one = packer(raw, tmp_path / "w1", workers=1, **opts)
    two = packer(raw, tmp_path / "w2", workers=2, **opts)
    assert one["counts"] == two["counts"] and one["skipped"] == two["skipped"]
    assert [s["sha256"] for s in one["shards"]] == [s["sha256"] for s in two["shards"]]
    assert [(s["frame"], s["file"]) for s in one["skipped"]] == [
        (2, "rgb_front/0002.png"), (9, "rgb_front/0009.png"), (20, "rgb_front/0020.png")]
    c = one["counts"]
    assert c["frames"] == c["samples"] + c["tail_frames"] + c["head_frames"] \
        + c["loader_tail_frames"] + 3
    json.dumps(one)   # the manifest holds plain JSON, not report objects


def test_all_skipped_is_sorted_by_episode_frame_and_file():
    late, early = Skip("b", 3, "rgb/0003.png", "bad"), Skip("a", 7, "rgb/0007.png", "bad")
    route = Skip("a", None, "a", "route refused")
    report = PackReport(plans=[RoutePlan("b", n_frames=4, skipped=[late])], skipped=[early, route])
    assert report.all_skipped() == [route, early, late]
    assert report.frames == 4
