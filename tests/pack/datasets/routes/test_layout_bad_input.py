"""Bad input in the garage layout's formats, each made for real in a copy of a synthetic garage
dataset (carla_wds.pack.synth, layout "garage"): truncated gzip JSON, corrupt and truncated
LAZ, LiDAR arrays of the wrong shape or with NaN points (through a layout YAML whose LiDAR is
.npy), a sensor folder with fewer frames than measurements/, a depth PNG of the wrong channel
count, a boxes file that is not a list, a route without the results file its filter reads.

In fail mode (the default) the pack stops with a PackError naming route, frame, file, what was
expected and a fix, and leaves no output; in skip mode the manifest lists each skipped frame
with its reason and every frame is a sample, a route tail or skipped. (Pickled input without
--allow-pickle-input: tests/pack/datasets/routes/test_layout_tcp_roach.py.)
"""
from __future__ import annotations

import gzip
import io
import json
import shutil
from pathlib import Path
from typing import Callable

import cv2
import numpy as np
import pytest
import yaml

from carla_wds.pack.errors import PackError
from carla_wds.pack.datasets.routes.layouts import LAYOUT_DIR
from tests.conftest import make_raw, read_pack
# every frame with a full future: short garage routes hold none of garage's own range
from tests.conftest import run_pack_all_frames as run_pack

FRAMES = 14                       # garage: pred_len 8 at 4 Hz -> frames 0..5 are samples
PRED_LEN = 8
EP = ("s1_dataset_2023_05_10/Routes_routes_synth_town01_Repetition0/"
      "routes_synth_town01_route0_01_01_00_00_00")


@pytest.fixture(scope="module")
def raw_garage(tmp_path_factory) -> Path:
    raw = make_raw(tmp_path_factory.mktemp("raw_garage"), "garage", episodes=2, frames=FRAMES)
    assert (raw / EP / "measurements" / "0000.json.gz").is_file()
    return raw


# ---------------------------------------------------------------- accounting from the manifest

def _found(raw: Path) -> dict[str, list[int]]:
    """episode -> frame numbers of its measurement files on disk (json.gz)."""
    return {d.parent.relative_to(raw).as_posix():
            sorted(int(p.name.partition(".")[0]) for p in d.glob("*.json.gz"))
            for d in sorted(raw.rglob("measurements"))}


def check_accounting(raw: Path, out: Path) -> dict:
    """Every frame of a kept route is in one sample, its route's tail or manifest['skipped'];
    a filtered route's frames are in none of them."""
    manifest = json.loads((out / "manifest.json").read_text())
    filtered = {f["episode"] for f in manifest["filtered_routes"]}
    found = {ep: ts for ep, ts in _found(raw).items() if ep not in filtered}
    samples = [(m["episode"], m["frame"]) for m in
               (json.loads(s["meta.json"]) for s in read_pack(out).values())]
    skipped = [(s["episode"], s["frame"]) for s in manifest["skipped"]]
    assert all(s["reason"] and s["file"] for s in manifest["skipped"])
    assert len(set(samples)) == len(samples) and len(set(skipped)) == len(skipped)
    assert not set(samples) & set(skipped)
    tail = {(ep, t) for ep, ts in found.items() for t in ts if t > max(ts) - PRED_LEN}
    tail -= set(skipped)
    assert not tail & set(samples)
    everything = {(ep, t) for ep, ts in found.items() for t in ts}
    assert set(samples) | set(skipped) | tail == everything
    counts = manifest["counts"]
    assert counts["frames"] == len(everything) == len(samples) + len(tail) + len(skipped)
    assert counts["samples"] == manifest["total_samples"] == len(samples)
    assert counts["tail_frames"] == len(tail) and counts["skipped"] == len(skipped)
    assert counts["filtered_routes"] == len(filtered)
    return manifest


# ---------------------------------------------------------------- corruptions

def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])


def _flip_laz_body(path: Path) -> None:
    """Flip bytes inside the compressed points; the LAS header and chunk table stay intact."""
    data = bytearray(path.read_bytes())
    start = int.from_bytes(data[96:100], "little") + 8
    for i in range(start + 100, min(start + 400, len(data) - 100)):
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))


def _gz_json(path: Path, value: object) -> None:
    path.write_bytes(gzip.compress(json.dumps(value).encode()))


def _png3(path: Path) -> None:
    h, w = cv2.imread(str(path), cv2.IMREAD_UNCHANGED).shape[:2]
    path.write_bytes(cv2.imencode(".png", np.full((h, w, 3), 9, np.uint8))[1].tobytes())


def _drop_from(folder: str, first: int) -> Callable[[Path], None]:
    def drop(route: Path) -> None:
        for t in range(first, FRAMES):
            (route / folder / f"{t:04d}.png").unlink()
    return drop


# (case, corrupt(route), file named, reason part, fix part, frames skipped in skip mode)
CASES = [
    ("measurements_truncated_gz", lambda r: _truncate(r / "measurements" / "0003.json.gz"),
     "measurements/0003.json.gz", "truncated or corrupt gzip", "Fix: fix or remove the file",
     [0, 1, 2, 3]),   # frames 0-2 need frame 3 for their waypoints
    ("boxes_truncated_gz", lambda r: _truncate(r / "boxes" / "0003.json.gz"),
     "boxes/0003.json.gz", "truncated or corrupt gzip", "Fix: fix or remove the file", [3]),
    ("laz_corrupt_body", lambda r: _flip_laz_body(r / "lidar" / "0003.laz"),
     "lidar/0003.laz", "LAZ does not decode", "Fix: fix or remove the file", [3]),
    ("laz_truncated", lambda r: _truncate(r / "lidar" / "0003.laz"),
     "lidar/0003.laz", "LAZ truncated", "Fix: fix or remove the file", [3]),
    ("sensor_folder_short", _drop_from("semantics", 4),
     "semantics/0004.png", "missing semantics file (semantics/ has 4 files); expected one for "
     "every frame of measurements/", "Fix: restore the file", [4, 5]),
    ("depth_three_channels", lambda r: _png3(r / "depth" / "0003.png"),
     "depth/0003.png", "depth PNG has 3 channels; expected 1-channel 8-bit garage depth",
     "Fix: fix or remove the file", [3]),
    ("depth_twin_three_channels", lambda r: _png3(r / "depth_augmented" / "0002.png"),
     "depth_augmented/0002.png", "depth PNG has 3 channels", "Fix:", [2]),
    ("boxes_not_a_list", lambda r: _gz_json(r / "boxes" / "0003.json.gz", {"class": "car"}),
     "boxes/0003.json.gz", "boxes file holds a dict; expected a list of box objects",
     "Fix: fix or remove the file", [3]),
    ("boxes_entry_without_position",
     lambda r: _gz_json(r / "boxes" / "0001.json.gz", [{"class": "car", "extent": [1, 1, 1],
                                                         "yaw": 0.0}]),
     "boxes/0001.json.gz", "box entry 0 has no 'position'", "Fix:", [1]),
]


def _fail_then_skip(raw: Path, tmp_path: Path, frame: int, file: str, reason: str, fix: str,
                    **opts) -> dict:
    """The fail-mode error and the skip-mode manifest of one corrupted dataset."""
    with pytest.raises(PackError) as err:
        run_pack(raw, tmp_path / "fail", **opts)
    msg = str(err.value)
    assert msg.startswith(f"{EP} frame {frame:04d}: {file}: "), msg
    assert reason in msg and fix in msg and "expected" in msg, msg
    assert msg.count("Fix:") == 1, msg   # a codec's own fix is not stacked on the pack's
    assert not (tmp_path / "fail").exists()
    run_pack(raw, tmp_path / "skip", on_error="skip", **opts)
    return check_accounting(raw, tmp_path / "skip")


@pytest.mark.parametrize("case, corrupt, file, reason, fix, frames", CASES,
                         ids=[c[0] for c in CASES])
def test_garage_bad_input(case, corrupt, file, reason, fix, frames, raw_garage, tmp_path):
    raw = tmp_path / "raw"
    shutil.copytree(raw_garage, raw)
    corrupt(raw / EP)
    manifest = _fail_then_skip(raw, tmp_path, frames[-1] if case.startswith("meas") else
                               frames[0], file, reason, fix, layout="garage")
    skipped = manifest["skipped"]
    assert [(s["episode"], s["frame"]) for s in skipped] == [(EP, t) for t in frames]
    # every record names the real file (json.gz, not a made-up .json), derived ones too
    assert {s["file"] for s in skipped} == {file} or case == "sensor_folder_short"
    assert reason.split(";")[0] in skipped[-1]["reason"] or reason in skipped[0]["reason"]


def test_clean_garage_packs_without_skips(raw_garage, tmp_path):
    run_pack(raw_garage, tmp_path / "out", layout="garage")
    manifest = check_accounting(raw_garage, tmp_path / "out")
    assert manifest["skipped"] == [] and manifest["total_samples"] == 2 * (FRAMES - PRED_LEN)


# ---------------------------------------------------------------- route filter

def test_route_without_results_file_is_left_out_and_listed(raw_garage, tmp_path):
    raw = tmp_path / "raw"
    shutil.copytree(raw_garage, raw)
    (raw / EP / "results.json.gz").unlink()
    for mode in ("fail", "skip"):   # a filtered route is no error in either mode
        run_pack(raw, tmp_path / mode, layout="garage", on_error=mode)
        manifest = check_accounting(raw, tmp_path / mode)
        assert manifest["filtered_routes"] == [
            {"episode": EP, "reason": "no results.json.gz; the layout keeps only routes whose "
                                      "scores.score_composed >= 100"}]
        assert manifest["skipped"] == []
        assert all(not k.startswith(EP.replace("/", "__")) for k in read_pack(tmp_path / mode))
        assert manifest["total_samples"] == FRAMES - PRED_LEN


def test_truncated_results_file_stops_fail_mode_and_is_counted_in_skip_mode(raw_garage, tmp_path):
    """An unreadable results.json.gz is bad input, not a score below 100: fail mode stops
    naming it (it dropped the route with exit 0), skip mode counts each frame it costs."""
    raw = tmp_path / "raw"
    shutil.copytree(raw_garage, raw)
    _truncate(raw / EP / "results.json.gz")
    with pytest.raises(PackError, match=rf"^{EP} frame 0000: results.json.gz: unreadable "
                                        r"\(.*truncated or corrupt gzip"):
        run_pack(raw, tmp_path / "fail", layout="garage")
    run_pack(raw, tmp_path / "out", layout="garage", on_error="skip")
    manifest = check_accounting(raw, tmp_path / "out")
    assert not manifest["filtered_routes"]
    assert {s["file"] for s in manifest["skipped"] if s["episode"] == EP} == {"results.json.gz"}


# ---------------------------------------------------------------- LiDAR as .npy (points codec)

@pytest.fixture(scope="module")
def npy_layout(tmp_path_factory) -> Path:
    """The garage layout with its LiDAR as float32 .npy (N, 4) in lidar_npy/."""
    spec = yaml.safe_load((LAYOUT_DIR / "garage.yaml").read_text())
    spec["name"] = "garage_npy"
    spec["sensors"]["lidar"] = {"folder": "lidar_npy", "ext": "npy", "codec": "points"}
    path = tmp_path_factory.mktemp("layout") / "garage_npy.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _npy(path: Path, arr: np.ndarray) -> None:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    path.write_bytes(buf.getvalue())


@pytest.fixture(scope="module")
def raw_npy(raw_garage, tmp_path_factory) -> Path:
    raw = tmp_path_factory.mktemp("raw_npy") / "raw"
    shutil.copytree(raw_garage, raw)
    rng = np.random.default_rng(3)
    for route in {m.parent for m in raw.rglob("measurements")}:
        (route / "lidar_npy").mkdir()
        for t in range(FRAMES):
            _npy(route / "lidar_npy" / f"{t:04d}.npy",
                 rng.normal(0, 10, (200 + t, 4)).astype(np.float32))
    return raw


def _nan_points(path: Path) -> None:
    pts = np.load(path)
    pts[7, 2] = np.nan
    _npy(path, pts)


NPY_CASES = [
    ("nan_points", _nan_points, "1 of 203 points are NaN or infinite; expected finite"),
    ("five_columns", lambda p: _npy(p, np.zeros((50, 5), np.float32)),
     "expected float32 (N,3) or (N,4)"),
    ("flat", lambda p: _npy(p, np.zeros(40, np.float32)), "expected float32 (N,3) or (N,4)"),
    ("float64", lambda p: _npy(p, np.zeros((50, 4))), "expected float32 (N,3) or (N,4)"),
    ("three_columns_declared_four", lambda p: _npy(p, np.zeros((50, 3), np.float32)),
     "3 columns; expected (N,4) xyzi, as the layout declares"),
    ("truncated", _truncate, "expected"),
]


@pytest.mark.parametrize("case, corrupt, reason", NPY_CASES, ids=[c[0] for c in NPY_CASES])
def test_npy_lidar_bad_input(case, corrupt, reason, raw_npy, npy_layout, tmp_path):
    raw = tmp_path / "raw"
    shutil.copytree(raw_npy, raw)
    corrupt(raw / EP / "lidar_npy" / "0003.npy")
    manifest = _fail_then_skip(raw, tmp_path, 3, "lidar_npy/0003.npy", reason, "Fix:",
                               layout=str(npy_layout))
    assert [(s["frame"], s["file"]) for s in manifest["skipped"]] == [(3, "lidar_npy/0003.npy")]
    assert reason in manifest["skipped"][0]["reason"]


def test_npy_lidar_clean_pack_stores_the_points(raw_npy, npy_layout, tmp_path):
    run_pack(raw_npy, tmp_path / "out", layout=str(npy_layout))
    check_accounting(raw_npy, tmp_path / "out")
    key = f"{EP.replace('/', '__')}__0003"
    sample = read_pack(tmp_path / "out")[key]
    stored = np.load(io.BytesIO(sample["lidar.npy"]), allow_pickle=False)
    np.testing.assert_array_equal(stored, np.load(raw_npy / EP / "lidar_npy" / "0003.npy"))
