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
from carla_wds.pack.buckets import crossing


ROAD = {1: "LEFT", 2: "RIGHT", 3: "STRAIGHT", 4: "LANEFOLLOW", 5: "CHANGELANELEFT",
        6: "CHANGELANERIGHT"}


def binned(v, edges, names):
    if v is None:
        return "unknown"
    return names[sum(v >= e for e in edges)]


def samples(pack):
    """(key, {suffix: bytes}) of each sample, in pack order."""
    for shard in json.loads((pack / "manifest.json").read_text())["shards"]:
        with tarfile.open(pack / shard["name"]) as tar:
            members = {m.name: tar.extractfile(m).read() for m in tar}
        for key in sorted({n.split(".")[0] for n in members}):
            yield key, {n.split(".", 1)[1]: v for n, v in members.items()
                        if n.split(".")[0] == key}


def expected(pack, rate_hz):
    """Each sample's bucket values from its own members, in pack order."""
    out = []
    for (key, members), (accel, turn, start) in zip(samples(pack), timed_buckets(pack, rate_hz)):
        speed = float(json.loads(members["speed.json"]))
        meta = json.loads(members["meta.json"])
        town = re.search(r"Town\d+", meta["episode"], re.I).group(0).capitalize()
        out.append({
            "command": ROAD[meta["command"]],
            "speed": binned(speed, (0.1, 2, 5, 8),
                            ("stopped", "slow", "medium", "fast", "very_fast")),
            "accel": accel, "yaw_rate": turn, "start": start,
            "town": town, "scenario": "none", "leading": "unknown",   # tcp: no boxes
            "crossing": "unknown"})
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
def pack(zoo):
    return zoo(episodes=4, frames=40, max_samples=11)   # shared, read-only (conftest.zoo)


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


@pytest.fixture(scope="module")
def boxes_packs(zoo, tmp_path_factory):
    """boxes_packs(layout) -> a small pack of a layout with boxes (2 routes or clips of 40
    frames), made once for the module; the tests only read it."""
    made = {}

    def get(layout: str):
        if layout == "garage":   # shared, read-only (conftest.zoo)
            return zoo(layout=layout, episodes=2, frames=40, max_samples=50)
        if layout not in made:
            made[layout] = b2d_boxes_pack(tmp_path_factory.mktemp(f"boxes_{layout}"), layout)
        return made[layout]
    return get


def b2d_boxes_pack(tmp_path, layout: str):
    """A small Bench2Drive pack with boxes (2 clips of 40 frames); its synth writes clips as
    folders and as archives: pack the archives."""
    from carla_wds.pack.packer import PackOptions
    from carla_wds.pack.packer import pack as run_pack
    from carla_wds.pack.synth import synth_dataset
    synth_dataset(tmp_path / "raw", layout, episodes=2, frames=40, seed=5,
                  image_size=(36, 64), progress=False)
    run_pack(tmp_path / "raw" / "archives", tmp_path / "shards",
             PackOptions.of(layout=layout, max_samples=50, progress=False))
    return tmp_path / "shards"


@pytest.mark.parametrize("layout", ["garage", "bench2drive"])
def test_the_leading_bucket_is_the_nearest_car_or_walker_ahead(boxes_packs, zoo, layout):
    pack = boxes_packs(layout)
    manifest = json.loads((pack / "manifest.json").read_text())
    got = [r["leading"] for r in decoded(manifest)]
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
    assert set(r["leading"] for r in decoded(json.loads(
        (zoo(episodes=1, frames=12) / "manifest.json").read_text()))
               ) == {"unknown"}


def crossing_by_formula(rows: np.ndarray) -> str:
    """Written apart from pack/buckets.py: columns class, x, y, ..., yaw (7), speed (8)."""
    best = None
    for row in rows:
        c, x, y, yaw, v = int(row[0]), row[1], row[2], row[7], row[8]
        if c not in (0, 1) or not (0 < x < 20 and abs(y) < 15) or v < 0.5:
            continue
        vy = v * math.sin(yaw)
        if abs(math.sin(yaw)) < 0.5:   # within 30 degrees of the ego's heading: not across
            continue
        gap = max(abs(y) - 2.0, 0.0)
        if gap > 0 and (y * vy >= 0 or gap / abs(vy) > 3.0):
            continue   # moving away from the corridor, or reaching it later than 3 s
        if best is None or x < best[0]:
            best = (x, ("car", "walker")[c])
    return "none" if best is None else best[1]


def table(*rows) -> dict:
    """A sample holding a real box table: (class, x, y, yaw, speed) per row."""
    out = np.full((len(rows), 14), -1.0, np.float32)
    for i, (c, x, y, yaw, v) in enumerate(rows):
        out[i, [0, 1, 2, 7, 8]] = c, x, y, yaw, v
    buf = io.BytesIO()
    np.save(buf, out)
    return {"boxes.npy": buf.getvalue()}


@pytest.mark.parametrize("rows,want", [
    ([(1, 10, 6, -math.pi / 2, 1.5)], "walker"),            # walks towards the path, 2.7 s
    ([(1, 10, 6, math.pi / 2, 1.5)], "none"),               # walks away from it
    ([(1, 10, 6, -math.pi / 2, 1.0)], "none"),              # reaches it in 4 s: too late
    ([(0, 15, -8, 1.2, 5.0), (1, 12, 1, 0.0, 3.0)], "car"),  # a car across from the left;
    ([(0, 15, -8, 0.2, 5.0)], "none"),                      # the walker ahead goes along
    ([(0, 25, -3, 1.5, 5.0)], "none"),                      # beyond 20 m
    ([(0, 5, 0.5, 1.5, 0.2)], "none"),                      # standing still
    ([(0, 5, 0.5, 1.5, -1.0)], "none"),                     # no speed recorded
])
def test_the_crossing_bucket_on_known_tables(rows, want):
    sample = table(*rows)
    assert crossing(sample) == want == crossing_by_formula(np.load(io.BytesIO(
        sample["boxes.npy"])))
    assert crossing({}) == "unknown"


@pytest.mark.parametrize("layout", ["garage", "bench2drive"])
def test_the_crossing_bucket_of_packed_samples_follows_the_formula(boxes_packs, layout):
    pack = boxes_packs(layout)
    manifest = json.loads((pack / "manifest.json").read_text())
    want = []
    for shard in manifest["shards"]:
        with tarfile.open(pack / shard["name"]) as tar:
            members = {m.name: tar.extractfile(m).read() for m in tar}
        for key in sorted({n.split(".")[0] for n in members}):
            want.append(crossing_by_formula(np.load(io.BytesIO(members[f"{key}.boxes.npy"]))))
    assert [r["crossing"] for r in decoded(manifest)] == want
    assert manifest["buckets"]["crossing"]["horizon_s"] == 3.0


def timed_buckets(pack, frames_hz: float) -> list[tuple[str, str, str]]:
    """(accel, yaw_rate, start) of each sample, with frame numbers at frames_hz per second."""
    out, prev_route, history = [], None, []
    for key, members in samples(pack):
        route, frame = key.rsplit("__", 1)
        frame, speed = int(frame), float(json.loads(members["speed.json"]))
        pose = np.load(io.BytesIO(members["ego2world.npy"]))
        yaw = math.atan2(pose[1, 0], pose[0, 0])
        if route != prev_route:
            history, prev_route = [], route
        accel = turn = None
        if history:
            f0, v0, y0 = history[-1]
            dt = (frame - f0) / frames_hz
            accel = (speed - v0) / dt
            turn = ((yaw - y0 + math.pi) % (2 * math.pi) - math.pi) / dt
        was_stopped = any(v < 0.1 and (frame - f) / frames_hz < 2.0 for f, v, _ in history)
        out.append((binned(accel, (-2, -0.5, 0.5, 2), ("brake_hard", "brake", "steady",
                                                       "accelerate", "accelerate_hard")),
                    binned(turn, (-0.3, -0.05, 0.05, 0.3), ("left_sharp", "left", "straight",
                                                            "right", "right_sharp")),
                    "from_stop" if speed >= 0.5 and was_stopped else "other"))
        history.append((frame, speed, yaw))
    return out


def test_bench2drive_buckets_time_its_frame_numbers_at_10_hz(boxes_packs):
    """Bench2Drive's keys count 10 Hz source frames (every 5th kept, 0.5 s apart): accel,
    yaw_rate and start divide by 10 Hz, not by the 2 Hz keyframe rate (which made every rate
    5x too small and the 2 s start window 10 s)."""
    pack = boxes_packs("bench2drive")
    manifest = json.loads((pack / "manifest.json").read_text())
    assert manifest["spec"]["source_rate_hz"] == 10 and manifest["spec"]["rate_hz"] == 2
    got = [(r["accel"], r["yaw_rate"], r["start"]) for r in decoded(manifest)]
    assert got == timed_buckets(pack, 10.0)
    assert got != timed_buckets(pack, 2.0)   # the two rates differ on this data
