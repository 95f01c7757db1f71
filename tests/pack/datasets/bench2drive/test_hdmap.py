"""Bench2Drive's HD maps (issue 42): the synth writes maps/<Town>_HD_map.npz in the structure
Bench2Drive ships, and `carla-wds pack-map` packs them into typed arrays equal to what
Bench2DriveZoo's prepare_B2D.py gengrate_map builds (10a2e5d l.147-190), reading the pickle with
the opcode walker only. Bad maps are refused in one line naming the file or town, with nothing
written."""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from carla_wds import limits
from carla_wds.cli import main
from carla_wds.pack.datasets import map_packer
from carla_wds.pack.datasets.bench2drive.hdmap import read_map
from carla_wds.pack.datasets.bench2drive.hdmap_pack import MANIFEST
from carla_wds.pack.errors import PackError
from carla_wds.pack.synth.bench2drive import clip_name
from carla_wds.pack.synth.bench2drive_maps import npz_bytes
from tests.helpers import shared_raw
from tools.golden.b2d_maps import digest
from tools.golden.common import tree_sha256

pack_maps = map_packer("bench2drive")
GOLDEN = Path(__file__).parents[3] / "golden" / "bench2drive_maps.json"


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> Path:
    # the clips of test_clips_hostile and test_layout_bench2drive_faults (read only)
    return shared_raw(tmp_path_factory, "bench2drive", episodes=3, frames=30, seed=5,
                      image_size=(54, 96))


def their_map_infos(path: Path) -> dict:
    """gengrate_map's map_infos[town] for one file, by their formulas (l.151-188), read with
    numpy's own unpickler: the synth's file, trusted here."""
    pairs = dict(np.load(path, allow_pickle=True)["arr"])
    info = {"lane_points": [], "lane_types": [], "trigger_volumes_points": [],
            "trigger_volumes_types": []}
    for road in pairs.values():
        for lane_id, lane in road.items():
            if lane_id == "Trigger_Volumes":
                for volume in lane:
                    points = np.array(volume["Points"])
                    points[:, 1] *= -1
                    info["trigger_volumes_points"].append(points)
                    info["trigger_volumes_types"].append(volume["Type"])
                continue
            for single in lane:
                points = np.array([p[0] for p in single["Points"]])
                points[:, 1] *= -1
                info["lane_points"].append(points)
                info["lane_types"].append(single["Type"])
    return info


def polylines(z, prefix: str) -> list[np.ndarray]:
    pts, off = z[f"{prefix}_points"], z[f"{prefix}_offsets"]
    return [pts[a:b] for a, b in zip(off[:-1], off[1:])]


def test_synth_clips_name_towns_with_maps_in_bench2drives_structure(raw):
    towns = {clip_name(i).split("_")[1] for i in range(3)}
    assert sorted(p.name for p in (raw / "maps").iterdir()) == sorted(
        f"{t}_HD_map.npz" for t in towns)
    arr = np.load(raw / "maps" / "Town12_HD_map.npz", allow_pickle=True)["arr"]
    assert arr.dtype == object and arr.ndim == 2 and arr.shape[1] == 2
    road = arr[0, 1]
    lanes = [k for k in road if k != "Trigger_Volumes"]
    assert lanes and all(type(k) is int for k in lanes)
    centre = next(d for d in road[lanes[0]] if d["Type"] == "Center")
    (xyz, rot, junction), = centre["Points"][:1]
    assert len(xyz) == 3 and len(rot) == 3 and type(junction) is bool
    kinds = {d["Type"] for r in arr[:, 1] for k, v in r.items() if k != "Trigger_Volumes"
             for d in v}
    volumes = {v["Type"] for r in arr[:, 1] for v in r.get("Trigger_Volumes", [])}
    assert {"Center", "Broken", "Solid", "SolidSolid", "NONE"} <= kinds
    assert volumes <= {"StopSign", "TrafficLight"} and volumes
    # the clips drive on the map: every anno ego position is within a lane width of a centre
    anno = json.loads(gzip.decompress(
        (raw / "v1" / clip_name(0) / "anno" / "00010.json.gz").read_bytes()))
    centres = np.concatenate([[p[0][:2] for p in d["Points"]] for r in arr[:, 1]
                              for k, v in r.items() if k != "Trigger_Volumes" for d in v
                              if d["Type"] == "Center"])
    assert np.hypot(*(centres - [anno["x"], anno["y"]]).T).min() < 2.0


def test_pack_map_equals_their_gengrate_map(raw, tmp_path):
    report = pack_maps(raw / "maps", tmp_path / "mp", allow_pickle=True, clips=raw / "v1",
                       progress=False)
    doc = json.loads((tmp_path / "mp" / MANIFEST).read_text())
    assert sorted(doc["towns"]) == sorted(report.towns) == ["Town12", "Town13"]
    for town, entry in doc["towns"].items():
        src = raw / "maps" / entry["source"]
        assert entry["source_sha256"] == hashlib.sha256(src.read_bytes()).hexdigest()
        theirs = their_map_infos(src)
        with np.load(tmp_path / "mp" / entry["file"], allow_pickle=False) as z:
            lanes, volumes = polylines(z, "lane"), polylines(z, "trigger")
            assert [doc["lane_types"][k] for k in z["lane_type"]] == theirs["lane_types"]
            assert [doc["trigger_types"][k] for k in z["trigger_type"]] == \
                theirs["trigger_volumes_types"]
        assert len(lanes) == len(theirs["lane_points"]) == entry["lanes"]
        assert all(np.array_equal(a, b) for a, b in zip(lanes, theirs["lane_points"]))
        assert all(np.array_equal(a, b) for a, b in zip(volumes,
                                                        theirs["trigger_volumes_points"]))


def sample_points(points: np.ndarray) -> np.ndarray:
    """lane_sample_points of one polyline: every 50th point and the last (l.175-182)."""
    n = len(points)
    idx = [50 * i for i in range(n // 50 + (1 if n % 50 else 0))] + [n - 1]
    return points[idx]


def test_pack_map_equals_their_own_gengrate_map_golden(raw, tmp_path):
    """tests/golden/bench2drive_maps.json: their gengrate_map run unmodified on these maps
    (tools/golden/b2d_maps.py); every polyline's float64 points and every type equal."""
    doc = json.loads(GOLDEN.read_text())
    assert tree_sha256(raw) == doc["raw_sha256"], f"synth changed: {doc['regenerate']}"
    pack_maps(raw / "maps", tmp_path / "mp", allow_pickle=True, progress=False)
    manifest = json.loads((tmp_path / "mp" / MANIFEST).read_text())
    assert [s["route"] for s in doc["samples"]] == sorted(manifest["towns"])
    for theirs in doc["samples"]:
        with np.load(tmp_path / "mp" / f"{theirs['route']}.npz", allow_pickle=False) as z:
            lanes, volumes = polylines(z, "lane"), polylines(z, "trigger")
            ours = {"lane_types": [manifest["lane_types"][k] for k in z["lane_type"]],
                    "trigger_volumes_types": [manifest["trigger_types"][k]
                                              for k in z["trigger_type"]]}
        parts = {"lane_points": lanes, "lane_sample_points": [sample_points(p) for p in lanes],
                 "trigger_volumes_points": volumes,
                 "trigger_volumes_sample_points": [v.mean(axis=0)[None] for v in volumes]}
        for key, value in parts.items():
            ours[f"{key}_sha256"] = digest(value)
            ours[f"{key}_lengths"] = [len(v) for v in value]
        assert ours == {k: v for k, v in theirs.items() if k not in ("route", "frame")}


def run(*args: str) -> tuple[int, str]:
    """pack-map in this process; the process's limits (which --limit sets) restored after."""
    with limits.using(limits.active()):
        result = CliRunner().invoke(main, ["pack-map", *map(str, args)])
    return result.exit_code, result.output


def refused_cli(maps: Path, out: Path, *extra: str) -> str:
    """The one-line error of pack-map on `maps`; OUT and no temporary folder left behind."""
    code, output = run(maps, out, "--allow-pickle-input", *extra)
    lines = [ln for ln in output.splitlines() if ln.startswith("Error")]
    assert code == 1 and len(lines) == 1, output
    assert not out.exists() and not list(out.parent.glob(f".{out.name}*")), "left behind"
    return lines[0]


def test_cli_needs_the_flag_and_writes_nothing_without_it(raw, tmp_path):
    code, output = run(raw / "maps", tmp_path / "mp")
    assert code == 1 and "Town12_HD_map.npz" in output and "--allow-pickle-input" in output
    assert not (tmp_path / "mp").exists()
    code, output = run(raw / "maps", tmp_path / "mp", "--allow-pickle-input")
    assert code == 0 and "2 town map(s)" in output, output
    with np.load(tmp_path / "mp" / "Town13.npz", allow_pickle=False) as z:
        assert z["lane_points"].dtype == np.float64 and z["lane_type"].dtype == np.int16
    before = sorted(p.name for p in (tmp_path / "mp").iterdir())
    code, output = run(raw / "maps", tmp_path / "mp", "--allow-pickle-input")
    assert code == 1 and "exists and is not empty" in output
    assert sorted(p.name for p in (tmp_path / "mp").iterdir()) == before


def bad_maps(tmp_path: Path, raw: Path, town: dict, name: str = "Town12") -> Path:
    """A maps folder: the good Town13 map and `town` (road_id -> road) as Town12's file."""
    maps = tmp_path / "maps"
    maps.mkdir()
    shutil.copy(raw / "maps" / "Town13_HD_map.npz", maps)
    (maps / f"{name}_HD_map.npz").write_bytes(npz_bytes(town))
    return maps


def good_road() -> dict:
    point = ((1.0, 2.0, 0.0), (0.0, 0.0, 90.0), False)
    return {-1: [{"Points": [point, point], "Type": "Center", "Color": "White"}]}


class _System:
    """Pickles as os.system(command): what a crafted map file can say."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self):
        return os.system, (self.command,)


def test_a_planted_global_is_refused_and_never_runs(raw, tmp_path):
    marker = tmp_path / "pwned"
    road = good_road()
    road[-1][0]["Color"] = _System(f"touch {marker}")
    maps = bad_maps(tmp_path, raw, {7: road})
    line = refused_cli(maps, tmp_path / "mp")
    assert "Town12_HD_map.npz" in line and "system" in line and "nothing was run" in line
    assert not marker.exists()


@pytest.mark.parametrize("limit,value,why", [
    ("pickle_values", 10 ** 6, "over the limit pickle_values"),   # huge: 1M points
    ("json_depth", 150, "over the limit json_depth"),             # deeply nested
])
def test_a_huge_or_deep_map_is_refused_by_the_limits(raw, tmp_path, limit, value, why):
    road = good_road()
    if limit == "json_depth":
        deep: list = []
        for _ in range(value):
            deep = [deep]
        road[-1][0]["Topology"] = deep
    else:
        road[-1][0]["Points"] = [((0.0, 0.0, 0.0), (0.0, 0.0, 0.0), False)] * value
    maps = bad_maps(tmp_path, raw, {7: road})
    line = refused_cli(maps, tmp_path / "mp")
    assert "Town12_HD_map.npz" in line and why in line and "--limit" in line


def test_a_lane_with_a_nan_point_is_refused_naming_the_road_and_lane(raw, tmp_path):
    road = good_road()
    road[-1][0]["Points"].append(((float("nan"), 2.0, 0.0), (0.0, 0.0, 0.0), False))
    maps = bad_maps(tmp_path, raw, {7: road})
    line = refused_cli(maps, tmp_path / "mp")
    assert "Town12_HD_map.npz" in line and "road 7 lane -1" in line and "nan" in line


def test_a_clips_town_without_a_map_is_refused_before_anything_is_read(raw, tmp_path):
    maps = tmp_path / "maps"
    maps.mkdir()
    shutil.copy(raw / "maps" / "Town12_HD_map.npz", maps)
    line = refused_cli(maps, tmp_path / "mp", "--clips", raw / "v1")
    assert "Town13" in line and clip_name(1) in line and "no map" in line


@pytest.mark.parametrize("value,why", [
    ({7: {"Trigger_Volumes": [{"Points": [[1.0, 2.0]], "Type": "StopSign"}]}}, "x, y, z"),
    ({7: {-1: [{"Points": [], "Type": "Center"}]}}, "non-empty"),
    ({7: {"lane": []}}, "int lane ids"),
    ({7: {-1: [{"Points": [((1.0, 2.0, 0.0),)], "Type": 3}]}}, "Type"),
    ({7: {-1: [{"Points": [((1.0, 2.0, 0.0),)], "Type": "Center", "x": {1, 2}}]}}, "refused"),
])
def test_a_malformed_map_is_one_line_naming_the_file(value, why):
    with pytest.raises(ValueError, match=why) as err:
        read_map(npz_bytes(value), "maps/Town12_HD_map.npz", True)
    assert str(err.value).startswith("maps/Town12_HD_map.npz: ") and "\n" not in str(err.value)


def test_a_second_file_of_one_town_or_a_non_map_is_refused(raw, tmp_path):
    maps = bad_maps(tmp_path, raw, {7: good_road()})
    shutil.copy(maps / "Town12_HD_map.npz", maps / "Town12_copy.npz")
    with pytest.raises(PackError, match="Town12_copy.npz and .*Town12_HD_map.npz both"):
        pack_maps(maps, tmp_path / "mp", allow_pickle=True, progress=False)
    (maps / "Town12_copy.npz").write_bytes(b"PK not a zip")
    os.rename(maps / "Town12_copy.npz", maps / "Town14_HD_map.npz")
    with pytest.raises(ValueError, match="Town14_HD_map.npz: refused.*not a readable .npz"):
        pack_maps(maps, tmp_path / "mp", allow_pickle=True, progress=False)
    assert not (tmp_path / "mp").exists()


def test_an_arr_member_over_array_bytes_is_refused_before_it_is_inflated(raw, tmp_path):
    """--limit array_bytes on the command line bounds arr.npy by its zip directory's size."""
    line = refused_cli(raw / "maps", tmp_path / "mp", "--limit", "array_bytes=4096")
    assert limits.active().array_bytes == limits.DEFAULT.array_bytes   # (restored)
    assert "Town12_HD_map.npz" in line and "arr.npy" in line and "array_bytes=4,096" in line
