"""garage_lb2 inputs: SimLingo's route rule against its transcription over a grid of results
files, hostile raw routes (one line naming the file and the fix), the distribution archives
synth writes, and the CLI."""
from __future__ import annotations

import gzip
import itertools
import json
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from carla_wds.datasets.garage_lb2 import lb2_boxes
from carla_wds.codecbase import SchemaError
from carla_wds.pack.datasets.routes.layouts import load_layout
from carla_wds.pack.errors import PackError
from carla_wds.pack.synth.garage_lb2 import GROUP, synth_archives, synth_dataset
from tests.conftest import read_pack, run_pack
from tests.pack.datasets.routes.test_layout_garage_lb2 import simlingo_keeps

FRAMES = 26


def _results(composed: float, route: float, minor: dict[str, int], other: int) -> dict:
    infractions = {"min_speed_infractions": ["slow"] * minor.get("min_speed", 0),
                   "outside_route_lanes": ["out"] * minor.get("outside", 0),
                   "collisions_vehicle": ["hit"] * other, "red_light": []}
    return {"scores": {"score_composed": composed, "score_route": route, "score_penalty": 1.0},
            "num_infractions": sum(len(v) for v in infractions.values()),
            "infractions": infractions}


def test_the_simlingo_rule_equals_its_loader_on_a_grid_of_results():
    flt = load_layout("garage_lb2_simlingo").route_filter
    plain = load_layout("garage_lb2").route_filter
    seen = set()
    for composed, route, slow, out, other in itertools.product(
            (100.0, 99.9, 60.0), (100.0, 94.5, 94.0, 80.0), (0, 2), (0, 1), (0, 1)):
        results = _results(composed, route, {"min_speed": slow, "outside": out}, other)
        keep = simlingo_keeps(results)
        assert (flt.reason(results) == "") == keep, results
        assert (plain.reason(results) == "") == (composed >= 100.0), results
        seen.add(keep and composed < 100)
    assert seen == {True, False}   # the grid holds routes only the rule keeps


@pytest.mark.parametrize("bad, says", [
    ({"scores": {"score_composed": 80.0, "score_route": 99.0}}, "num_infractions"),
    ({"scores": {"score_composed": "x"}}, "scores.score_composed"),
    ({"scores": {"score_composed": 80.0, "score_route": None}, "num_infractions": 0,
      "infractions": {"min_speed_infractions": [], "outside_route_lanes": []}}, "score_route"),
])
def test_a_results_file_without_what_the_rule_reads_is_a_value_error(bad, says):
    with pytest.raises(ValueError, match=says):
        load_layout("garage_lb2_simlingo").route_filter.reason(bad)


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("raw_lb2_in")
    # route 0 perfect, route 1 kept by SimLingo's rule only, route 2 perfect
    synth_dataset(out, episodes=3, frames=FRAMES, seed=2, image_size=(24, 48), progress=False)
    return out


def _copy(raw: Path, tmp_path: Path) -> tuple[Path, Path]:
    import shutil
    dst = tmp_path / "raw"
    shutil.copytree(raw, dst)
    return dst, sorted(p.parent for p in dst.rglob("measurements"))[0]


@pytest.mark.parametrize("layout", ["garage_lb2", "garage_lb2_simlingo"])
def test_a_truncated_measurements_file_is_one_line_naming_it(raw, tmp_path, layout):
    src, route = _copy(raw, tmp_path)
    path = route / "measurements" / "0012.json.gz"
    path.write_bytes(path.read_bytes()[:40])
    with pytest.raises(PackError) as err:
        run_pack(src, tmp_path / "out", layout=layout)
    text = str(err.value)
    assert "\n" not in text and "measurements/0012.json.gz" in text and "Fix" in text
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").glob("*.tar"))


@pytest.mark.parametrize("layout", ["garage_lb2", "garage_lb2_simlingo"])
def test_a_truncated_results_file_is_one_line_naming_it_and_the_fix(raw, tmp_path, layout):
    src, route = _copy(raw, tmp_path)
    path = route / "results.json.gz"
    path.write_bytes(path.read_bytes()[:25])
    with pytest.raises(PackError) as err:
        run_pack(src, tmp_path / "out", layout=layout)
    text = str(err.value)
    assert "\n" not in text and "results.json.gz" in text and "Fix" in text


@pytest.mark.parametrize("layout", ["garage_lb2", "garage_lb2_simlingo"])
def test_a_missing_results_file_leaves_the_route_out_counted_and_listed(raw, tmp_path, layout):
    src, route = _copy(raw, tmp_path)
    (route / "results.json.gz").unlink()
    manifest = run_pack(src, tmp_path / "out", layout=layout)
    episode = route.relative_to(src).as_posix()
    (listed,) = [f for f in manifest["filtered_routes"] if f["episode"] == episode]
    assert "no results.json.gz" in listed["reason"]
    assert not any(k.startswith(episode.replace("/", "__")) for k in read_pack(tmp_path / "out"))


def test_an_unknown_box_class_is_refused_naming_it():
    with pytest.raises(SchemaError, match="unknown leaderboard_2 box class 'ufo'"):
        lb2_boxes([{"class": "weather"}, {"class": "ufo", "position": [0, 0, 0]}])
    assert lb2_boxes([{"class": "weather"}, {"class": "ego_info"}]).shape == (0, 14)


@pytest.fixture(scope="module")
def releases(tmp_path_factory):
    """releases(form) -> (folder, the archives synth_archives wrote there) of raw's routes
    in that release form, written once for the module; the tests only read them."""
    made = {}

    def get(form: str) -> tuple[Path, list[Path]]:
        if form not in made:
            out = tmp_path_factory.mktemp(f"release_{form}") / form
            made[form] = out, synth_archives(out, form, episodes=3, frames=FRAMES, seed=2,
                                             image_size=(24, 48))
        return made[form]
    return get


def test_archives_hold_the_routes_under_their_release_paths(raw, releases):
    _, tars = releases("simlingo")
    assert [t.name for t in tars] == ["_".join(GROUP.parts) + f"_chunk_00{i}.tar.gz"
                                      for i in (1, 2)]
    with tarfile.open(tars[0]) as tar:
        names = tar.getnames()
    routes = sorted({"/".join(n.split("/")[:6]) for n in names})
    assert routes == [f"{GROUP.as_posix()}/{r.name}" for r in sorted(
        p.parent for p in raw.rglob("measurements"))[:2]]   # the first two routes, same paths
    # the files are the folder writer's, byte for byte
    first = routes[0] + "/measurements/0003.json.gz"
    with tarfile.open(tars[0]) as tar:
        assert tar.extractfile(first).read() == (raw / first).read_bytes()
    pdm, zips = releases("pdm_lite")
    assert [z.relative_to(pdm).as_posix() for z in zips] == [
        "Town12/data/Accident.zip", "Town12/data/HazardAtSideLane.zip",
        "Town12/data/ParkingExit.zip"]
    with zipfile.ZipFile(zips[0]) as zf:
        assert all(n.startswith("Accident/Town12_Rep0_100_0_route0_") for n in zf.namelist())
        assert json.loads(gzip.decompress(zf.read(
            "Accident/Town12_Rep0_100_0_route0_01_01_00_00_00/results.json.gz"))
                          )["scores"]["score_composed"] == 100.0
    assert not (pdm / ".synth_routes").exists()


@pytest.mark.parametrize("form", ["simlingo", "pdm_lite"])
def test_the_release_archives_pack_as_the_folders_do(raw, releases, tmp_path, form):
    """Straight from SimLingo's .tar.gz chunks or PDM-Lite's zips, never extracted: the same
    samples, byte for byte, and SimLingo's route rule applied to the archived results."""
    arch, _ = releases(form)
    a = run_pack(raw, tmp_path / "a", layout="garage_lb2_simlingo")
    b = run_pack(arch, tmp_path / "b", layout="garage_lb2_simlingo")
    assert a["total_samples"] == b["total_samples"] > 0
    # route folder name / frame -> members; meta.json names the route's path, which differs
    by_route = lambda pack: {  # noqa: E731
        "/".join(k.rsplit("__", 2)[-2:]): {m: b for m, b in v.items() if m != "meta.json"}
        for k, v in read_pack(pack).items()}
    assert by_route(tmp_path / "a") == by_route(tmp_path / "b")


def test_the_cli_synthesises_and_packs_both_views(tmp_path):
    cli = [sys.executable, "-m", "carla_wds.cli"]
    subprocess.run([*cli, "synth", str(tmp_path / "raw"), "--layout", "garage_lb2",
                    "--episodes", "2", "--frames", str(FRAMES), "--image-size", "24x48"],
                   check=True, capture_output=True)
    for layout in ("garage_lb2", "garage_lb2_simlingo"):
        done = subprocess.run([*cli, "pack", str(tmp_path / "raw"), str(tmp_path / layout),
                               "--layout", layout], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]
        manifest = json.loads((tmp_path / layout / "manifest.json").read_text())
        assert manifest["pack_args"]["layout"] == layout and manifest["total_samples"] > 0
