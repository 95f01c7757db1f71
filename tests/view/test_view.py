"""`carla-wds view`: the HTML report of a pack, on real packs of the synth layouts (tcp,
garage, bench2drive with boxes, LiDAR and calibration). What the report holds is checked
against the shards read here with tarfile and numpy, and against each layout's axes written
out here from docs/coordinates.md, not through carla_wds."""
from __future__ import annotations

import base64
import html
import io
import json
import re
import tarfile
from collections import Counter
from pathlib import Path

import cv2
import numpy as np
import pytest

from carla_wds.pack.synth import synth_dataset
from carla_wds.view import choose, view
from carla_wds.view.scan import scan
from carla_wds.manifest import read_manifest
from tests.conftest import run_pack

# labels (x, y) -> (right, forward) metres, per layout (docs/coordinates.md): TCP's ego frame
# is x right, y backward (forward is -y); garage and Bench2Drive's is x forward, y right
TO_RIGHT_FORWARD = {"tcp": lambda p: np.stack([p[..., 0], -p[..., 1]], -1),
                    "garage": lambda p: np.stack([p[..., 1], p[..., 0]], -1),
                    "bench2drive": lambda p: np.stack([p[..., 1], p[..., 0]], -1)}
COMMANDS = ("left", "right", "straight", "follow lane", "change lane left", "change lane right")


def members(shards: Path) -> dict[str, dict[str, bytes]]:
    """key -> member suffix -> bytes, of every shard (tarfile, not carla_wds)."""
    out: dict[str, dict[str, bytes]] = {}
    for tar in sorted(shards.glob("*.tar")):
        with tarfile.open(tar) as t:
            for m in t:
                key, _, suffix = m.name.partition(".")
                out.setdefault(key, {})[suffix] = t.extractfile(m).read()
    return out


def labels(shards: Path) -> dict[str, dict]:
    """key -> route, command name, speed, raw waypoints and target point."""
    out = {}
    for key, m in members(shards).items():
        meta = json.loads(m["meta.json"])
        out[key] = {"route": meta["episode"], "speed": float(json.loads(m["speed.json"])),
                    "command": COMMANDS[int(np.load(io.BytesIO(m["target_command.npy"])).argmax())],
                    "waypoints": np.load(io.BytesIO(m["waypoints.npy"])).astype(np.float64),
                    "target": np.load(io.BytesIO(m["target_point.npy"])).astype(np.float64)}
    return out


def report_data(page: Path) -> dict:
    text = page.read_text()
    found = re.search(r'<script type="application/json" id="report-data">(.*?)</script>',
                      text, re.S)
    assert found, "the page embeds no report-data"
    return json.loads(found.group(1).replace("<\\/", "</"))


@pytest.fixture(scope="module")
def page(packs, tmp_path_factory):
    """page(layout, n=12) -> view's report of that pack, written once for the module: the
    tests that only read a report share it (the choice's own test writes its two)."""
    root, made = tmp_path_factory.mktemp("pages"), {}

    def get(layout: str, n: int = 12) -> Path:
        if (layout, n) not in made:
            made[layout, n] = view(packs[layout], root / f"{layout}_{n}.html", n=n,
                                   progress=False)
        return made[layout, n]
    return get


def test_the_choice_spans_routes_commands_and_speeds(packs, tmp_path):
    shards = packs["tcp"]
    held = labels(shards)
    routes, commands = {v["route"] for v in held.values()}, {v["command"] for v in held.values()}
    assert len(routes) == 3 and len(commands) >= 3   # the pack has something to spread over
    page = view(shards, tmp_path / "r.html", n=6, progress=False)
    keys = report_data(page)["samples"]
    assert len(keys) == len(set(keys)) == 6
    assert {held[k]["route"] for k in keys} == routes
    assert {held[k]["command"] for k in keys} == commands
    assert len({held[k]["speed"] < 0.1 for k in keys}) == 2   # stopped and moving samples
    # a card per chosen sample, in the page, and the same choice every time
    cards = re.findall(r'class="card" data-key="([^"]+)"', page.read_text())
    assert cards == keys
    assert report_data(view(shards, tmp_path / "again.html", n=6, progress=False))["samples"] \
        == keys
    rows = scan(read_manifest(str(shards)))
    assert [r.key for r in choose(rows, 100)] and len(choose(rows, 100)) == len(held)


@pytest.mark.parametrize("layout", ["tcp", "garage", "bench2drive"])
def test_birds_eye_points_are_the_layouts_own_axes(packs, page, layout):
    """The panel's points are (right, forward) by the layout's own axes; a sample driving on
    (follow lane, moving) has its last waypoint ahead, not beside."""
    held = labels(packs[layout])
    data = report_data(page(layout, 8))
    assert data["bev"]
    to_rf = TO_RIGHT_FORWARD[layout]
    for key, bev in data["bev"].items():
        np.testing.assert_allclose(bev["waypoints"], to_rf(held[key]["waypoints"]), atol=1e-3)
        np.testing.assert_allclose(bev["target"], to_rf(held[key]["target"]), atol=1e-3)
    ahead = [np.asarray(bev["waypoints"])[-1] for key, bev in data["bev"].items()
             if held[key]["command"] == "follow lane" and held[key]["speed"] > 1.0]
    if layout != "bench2drive":   # synth's Bench2Drive clips stand still
        assert ahead and all(p[1] > 2.0 * abs(p[0]) for p in ahead), ahead


def test_histograms_count_what_the_pack_holds(tmp_path):
    raw = tmp_path / "raw"
    synth_dataset(raw, "tcp", episodes=3, frames=30, seed=5, image_size=(48, 64), progress=False)
    (raw / "Town02" / "routes_town02_01" / "measurements" / "0007.json").write_text("{cut")
    shards = tmp_path / "shards"
    run_pack(raw, shards, layout="tcp", max_samples=7, on_error="skip")
    held = labels(shards)
    skipped = json.loads((shards / "manifest.json").read_text())["skipped"]
    assert skipped
    counts = report_data(view(shards, tmp_path / "r.html", progress=False))["counts"]
    assert counts["commands"] == dict(Counter(v["command"] for v in held.values()))
    assert counts["towns"] == dict(Counter(v["route"].split("/")[0] for v in held.values()))
    assert counts["scenarios"] == {"-": len(held)}
    edges = [0.1, 2.0, 5.0, 8.0]
    names = ["stopped", "< 2 m/s", "2-5 m/s", "5-8 m/s", ">= 8 m/s"]
    assert counts["speeds"] == dict(Counter(names[sum(v["speed"] >= e for e in edges)]
                                            for v in held.values()))
    assert sum(counts["skipped"].values()) == len(skipped)
    assert all("N" in reason or not re.search(r"\d", reason) for reason in counts["skipped"])


def test_scenarios_and_towns_of_clip_names(packs, page):
    held = labels(packs["bench2drive"])
    counts = report_data(page("bench2drive"))["counts"]
    assert counts["scenarios"] == dict(Counter(v["route"].split("_Town")[0] for v in held.values()))
    assert counts["towns"] == dict(Counter("Town" + v["route"].split("_Town")[1][:2]
                                           for v in held.values()))


def test_cli_writes_the_report_and_refuses_in_one_line(cli, packs, tmp_path):
    out = tmp_path / "sub" / "report.html"
    result = cli("view", str(packs["tcp"]), "--out", str(out), "-n", "3")
    assert result.exit_code == 0, result.output
    assert out.is_file() and len(report_data(out)["samples"]) == 3
    bad = cli("view", str(tmp_path / "nothing"), "--out", str(tmp_path / "x.html"))
    assert bad.exit_code != 0 and len(bad.output.strip().splitlines()) == 1, bad.output
    assert not (tmp_path / "x.html").exists()


def test_a_damaged_shard_is_one_line_naming_it_and_the_fix(cli, packs, tmp_path, copy_tree):
    shards = copy_tree(packs["tcp"], "damaged")
    shard = sorted(shards.glob("*.tar"))[1]
    data = bytearray(shard.read_bytes())
    data[700:710] = b"XXXXXXXXXX"   # inside the first member's bytes: the sha256 differs
    shard.write_bytes(bytes(data))
    out = tmp_path / "r.html"
    result = cli("view", str(shards), "--out", str(out))
    assert result.exit_code != 0
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and shard.name in lines[0] and "Fix: re-" in lines[0], lines
    assert not out.exists()


BOX_NAMES = {0: "car", 1: "walker", 2: "traffic light", 3: "stop sign", 5: "traffic sign"}


def test_birds_eye_legend_names_the_box_classes_and_one_scale_serves_all(packs, page):
    """Each panel's legend names the classes of the boxes it draws (by their colours), and
    every panel has one half side, wide enough for every sample's waypoints."""
    shards = packs["bench2drive"]
    data = report_data(page("bench2drive", 8))
    held = members(shards)
    for key, bev in data["bev"].items():
        rows = np.load(io.BytesIO(held[key]["boxes.npy"]))
        classes = {BOX_NAMES[int(c)] for c in rows[:, 0] if int(c) != 4}   # 4: the ego
        assert classes and classes <= set(bev["legend"]), (classes, bev["legend"])
    half = data["bev_half_m"]
    reach = max(np.abs(np.asarray(b["waypoints"])).max() for b in data["bev"].values())
    assert 24.0 <= half <= 60.0 and reach <= half
    sizes = {img.shape for img in panels(page("bench2drive", 8))}
    assert len(sizes) == 1, sizes


def panels(page: Path) -> list[np.ndarray]:
    found = re.findall(r'alt="bird&#x27;s-eye" src="data:image/png;base64,([^"]+)"',
                       page.read_text())
    return [cv2.imdecode(np.frombuffer(base64.b64decode(b), np.uint8), 1) for b in found]


def chart_names(page: Path) -> list[str]:
    charts = page.read_text().split('<div class="charts">')[1].split("</div>")[0]
    return [html.unescape(a) for a in re.findall(r'<img alt="([^"]+)"', charts)]


def test_charts_of_the_recorded_buckets_and_no_chart_of_one_value(packs, page):
    """tcp: every sample's scenario is '-', so no scenarios chart but a line saying so; the
    manifest's buckets with several values are charted; garage's one-command pack likewise."""
    tcp = page("tcp")
    sizes = json.loads((packs["tcp"] / "manifest.json").read_text())["buckets"]["sizes"]
    names = chart_names(tcp)
    assert not [n for n in names if n.startswith("scenarios")], names
    total = sum(sizes["accel"].values())
    assert f"scenarios (clip or folder name): all {total} samples -" in tcp.read_text()
    for bucket, title in (("accel", "acceleration"), ("yaw_rate", "yaw rate"),
                          ("start", "start from a stop")):
        assert len(sizes[bucket]) > 1 and f"{title} (manifest buckets)" in names, names
    assert f"leading actor (manifest buckets): all {total} samples unknown" in tcp.read_text()
    b2d = chart_names(page("bench2drive"))
    assert "scenarios (clip or folder name)" in b2d, b2d


def test_whole_pack_charts_of_boxes_end_points_and_expert_controls(packs, page):
    """garage holds boxes and a measurements record with the expert's steer/throttle/brake:
    the boxes are counted per class over every sample, and the end points and controls are
    charted; tcp holds neither boxes nor controls, so only the end points are."""
    shards = packs["garage"]
    garage = page("garage")
    classes = Counter(BOX_NAMES[int(c)] for m in members(shards).values()
                      for c in np.load(io.BytesIO(m["boxes.npy"]))[:, 0] if int(c) != 4)
    assert classes and report_data(garage)["counts"]["box_classes"] == dict(classes)
    names = chart_names(garage)
    for chart in ("last waypoints", "expert controls", "boxes by class (all samples, not the ego)"):
        assert chart in names, names
    tcp = chart_names(page("tcp"))
    assert "last waypoints" in tcp and "expert controls" not in tcp
    assert not [n for n in tcp if n.startswith("boxes")], tcp
