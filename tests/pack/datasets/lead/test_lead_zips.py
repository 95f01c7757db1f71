"""LEAD's route zips (one per route, as ln2697/lead_carla distributes them) packed in place
through the shared archive readers: the same samples as from the extracted folders; a bad
zip is one line naming it, or a listed route with --on-error skip."""
from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import pytest

from carla_wds.pack import PackOptions, pack
from carla_wds.pack.errors import PackError
from carla_wds.pack.synth.lead import synth_dataset, write_route_zips
from tests.pack.datasets.lead.test_layout_lead import samples


def _opts(**kw) -> PackOptions:
    return PackOptions.of(layout="lead", allow_pickle_input=True, progress=False, **kw)


@pytest.fixture(scope="module")
def both(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("lead_zips")
    routes = synth_dataset(root / "raw", episodes=3, frames=19, seed=6, image_size=(16, 16),
                           progress=False)
    write_route_zips(routes, root / "zips")
    return root / "raw", root / "zips"


def test_zips_pack_to_the_same_samples_as_their_folders(both, tmp_path):
    raw, zips = both
    names = sorted(str(p.relative_to(zips)) for p in zips.rglob("*.zip"))
    assert names[0].startswith("Accident/Town12_Rep0_3790_0_route0") and len(names) == 3
    with zipfile.ZipFile(zips / names[0]) as z:
        assert z.namelist()[0].startswith("data/carla_leaderboard2/data/Accident/Town12_")
    pack(raw, tmp_path / "a", _opts())
    pack(zips, tmp_path / "b", _opts(workers=2, max_samples=4))   # zips held in workers
    a, b = samples(tmp_path / "a"), samples(tmp_path / "b")
    assert [s["__key__"] for s in a] == [s["__key__"] for s in b] and len(a) == 3 * 3
    assert a == b
    # nothing extracted beside them: the scenario folders hold the zips only
    assert sorted(str(p.relative_to(zips)) for p in zips.rglob("*") if p.is_file()) == names
    assert {p.parent for p in zips.rglob("*.zip")} == {p for p in zips.iterdir()}


def test_a_zip_with_a_traversal_member_is_one_line_naming_it(both, tmp_path):
    zips = tmp_path / "zips"
    shutil.copytree(both[1], zips)
    bad = sorted(zips.rglob("*.zip"))[0]
    with zipfile.ZipFile(bad, "a") as z:
        z.writestr("../../evil.txt", b"x")
    with pytest.raises(PackError) as err:
        pack(zips, tmp_path / "out", _opts())
    assert "evil.txt" in str(err.value) and bad.name in str(err.value)
    assert "\n" not in str(err.value) and not (tmp_path / "out").exists()


def test_a_truncated_zip_is_left_out_and_listed_with_on_error_skip(both, tmp_path):
    zips = tmp_path / "zips"
    shutil.copytree(both[1], zips)
    bad = sorted(zips.rglob("*.zip"))[1]
    bad.write_bytes(bad.read_bytes()[:5000])
    with pytest.raises(PackError, match=bad.name):
        pack(zips, tmp_path / "fail", _opts())
    manifest = pack(zips, tmp_path / "out", _opts(on_error="skip"))
    left = [r for r in manifest["filtered_routes"] if "archive" in r["reason"]]
    assert len(left) == 1 and bad.name[:-4] in left[0]["episode"]
    assert manifest["counts"]["samples"] == 3 * 2
    json.dumps(manifest)


def test_a_cluster_plan_of_real_size_zips_needs_no_unpickling(tmp_path):
    """`carla-wds plan` lists and sizes the zips without --allow-pickle-input (LEAD's 384 px
    strips say their camera count); packing still refuses the pickles without the flag."""
    from carla_wds.pack.plan_parts import make_plan
    routes = synth_dataset(tmp_path / "raw", episodes=2, frames=17, seed=2, progress=False)
    write_route_zips(routes, tmp_path / "zips")
    plan = make_plan(str(tmp_path / "zips"), PackOptions.of(layout="lead"), 2)
    sizes = {n: s for part in plan["part_list"] for n, s in part["episodes"].items()}
    assert sorted(sizes) == ["Accident/Town12_Rep0_3790_0_route0_01_10_05_46_05",
                             "VehicleOpensDoorTwoWays/Town13_Rep0_3791_0_route1_01_10_05_46_05"]
    assert all(s == (tmp_path / "zips" / f"{n}.zip").stat().st_size for n, s in sizes.items())
    with pytest.raises(PackError, match="metas/0008.pkl.*--allow-pickle-input"):
        pack(tmp_path / "zips", tmp_path / "out", PackOptions.of(layout="lead",
                                                                 progress=False))
    assert not (tmp_path / "out").exists()
    manifest = pack(tmp_path / "zips", tmp_path / "ok", _opts())
    assert manifest["cameras"] == ["front_left", "front", "front_right"]
    assert manifest["image_sizes"]["front"] == [384, 384]
