"""Buckets by sample key in the manifest (issue 29): values against formulas written here."""
from __future__ import annotations

import io
import json
import math
import re
import tarfile

import numpy as np
import pytest

from carla_wds.manifest import read_manifest
from carla_wds.manifest_schema import ManifestError

from ..helpers import make_pack

ROAD = {1: "LEFT", 2: "RIGHT", 3: "STRAIGHT", 4: "LANEFOLLOW", 5: "CHANGELANELEFT",
        6: "CHANGELANERIGHT"}


def binned(v, edges, names):
    if v is None:
        return "unknown"
    return names[sum(v >= e for e in edges)]


def expected(pack, rate_hz):
    """Each sample's bucket values from its own members, in pack order."""
    out, prev_route, history = [], None, []
    for shard in json.loads((pack / "manifest.json").read_text())["shards"]:
        with tarfile.open(pack / shard["name"]) as tar:
            members = {m.name: tar.extractfile(m).read() for m in tar}
        for key in sorted({n.split(".")[0] for n in members}):
            route, frame = key.rsplit("__", 1)
            frame = int(frame)
            speed = float(json.loads(members[f"{key}.speed.json"]))
            meta = json.loads(members[f"{key}.meta.json"])
            pose = np.load(io.BytesIO(members[f"{key}.ego2world.npy"]))
            yaw = math.atan2(pose[1, 0], pose[0, 0])
            if route != prev_route:
                history, prev_route = [], route
            accel = turn = None
            if history:
                f0, v0, y0 = history[-1]
                dt = (frame - f0) / rate_hz
                accel = (speed - v0) / dt
                d = (yaw - y0 + math.pi) % (2 * math.pi) - math.pi
                turn = d / dt
            was_stopped = any(v < 0.1 and (frame - f) / rate_hz < 2.0 for f, v, _ in history)
            town = re.search(r"Town\d+", meta["episode"], re.I).group(0).capitalize()
            out.append({
                "command": ROAD[meta["command"]],
                "speed": binned(speed, (0.1, 2, 5, 8),
                                ("stopped", "slow", "medium", "fast", "very_fast")),
                "accel": binned(accel, (-2, -0.5, 0.5, 2),
                                ("brake_hard", "brake", "steady", "accelerate", "accelerate_hard")),
                "yaw_rate": binned(turn, (-0.3, -0.05, 0.05, 0.3),
                                   ("left_sharp", "left", "straight", "right", "right_sharp")),
                "start": "from_stop" if speed >= 0.5 and was_stopped else "other",
                "town": town, "scenario": "none", "lead": "unknown"})   # tcp: no boxes
            history.append((frame, speed, yaw))
    return out


def decoded(manifest: dict) -> list[dict]:
    """The manifest's runs, expanded to one dict per sample in pack order."""
    rows = []
    for shard in manifest["shards"]:
        per = {name: [v for v, n in runs for _ in range(n)]
               for name, runs in shard["buckets"].items()}
        assert all(len(v) == shard["samples"] for v in per.values())
        rows += [{name: per[name][i] for name in per} for i in range(shard["samples"])]
    return rows


@pytest.fixture(scope="module")
def pack(tmp_path_factory):
    return make_pack(tmp_path_factory.mktemp("buckets"), episodes=4, frames=40, max_samples=11)


def test_every_samples_buckets_are_the_formula(pack):
    manifest = json.loads((pack / "manifest.json").read_text())
    rows = decoded(manifest)
    assert rows == expected(pack, manifest["spec"]["rate_hz"])
    # the synthetic routes start from a stop, turn and change speed: the bins are used
    values = {name: {r[name] for r in rows} for name in rows[0]}
    assert "from_stop" in values["start"] and len(values["town"]) == 4
    assert {"stopped", "fast"} <= values["speed"] and len(values["command"]) >= 2
    sizes = manifest["buckets"]["sizes"]
    for name in rows[0]:
        assert sum(sizes[name].values()) == manifest["total_samples"]


def test_inspect_shows_the_bucket_sizes(pack, cli):
    out = cli("inspect", pack).output
    sizes = json.loads((pack / "manifest.json").read_text())["buckets"]["sizes"]
    for name, counts in sizes.items():
        line = next(ln for ln in out.splitlines() if ln.startswith(f"bucket {name}:"))
        for value, n in counts.items():
            assert f"{value} {n}" in line


def test_a_malformed_bucket_run_is_refused(pack, tmp_path):
    doc = json.loads((pack / "manifest.json").read_text())
    doc["shards"][0]["buckets"]["speed"] = [["slow", -1]]
    (tmp_path / "manifest.json").write_text(json.dumps(doc))
    with pytest.raises(ManifestError, match="buckets"):
        read_manifest(tmp_path)


@pytest.mark.parametrize("layout", ["garage", "bench2drive"])
def test_the_lead_bucket_is_the_nearest_car_or_walker_ahead(tmp_path, layout):
    if layout == "garage":
        pack = make_pack(tmp_path, layout=layout, episodes=2, frames=40, max_samples=50)
    else:   # its synth writes clips as folders and as archives: pack the archives
        from carla_wds.pack.packer import PackOptions
        from carla_wds.pack.packer import pack as run_pack
        from carla_wds.pack.synth import synth_dataset
        synth_dataset(tmp_path / "raw", layout, episodes=2, frames=40, seed=5,
                      image_size=(64, 36), progress=False)
        pack = tmp_path / "shards"
        run_pack(tmp_path / "raw" / "archives", pack,
                 PackOptions.of(layout=layout, max_samples=50, progress=False))
    manifest = json.loads((pack / "manifest.json").read_text())
    got = [r["lead"] for r in decoded(manifest)]
    want = []
    for shard in manifest["shards"]:
        with tarfile.open(pack / shard["name"]) as tar:
            members = {m.name: tar.extractfile(m).read() for m in tar}
        for key in sorted({n.split(".")[0] for n in members}):
            rows = np.load(io.BytesIO(members[f"{key}.boxes.npy"]))
            # columns: class (0 car, 1 walker), x forward, y; a 30 m x 4 m corridor ahead
            near = [(x, int(c)) for c, x, y in rows[:, :3] if c in (0, 1) and 0 < x < 30
                    and abs(y) < 2]
            want.append("none" if not near else ("car", "walker")[min(near)[1]])
    assert got == want and set(got) - {"none"}
    # packs without boxes: unknown
    assert set(r["lead"] for r in decoded(json.loads(
        (make_pack(tmp_path / "tcp", episodes=1, frames=12) / "manifest.json").read_text()))
               ) == {"unknown"}
