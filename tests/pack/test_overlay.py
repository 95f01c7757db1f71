"""pack-overlay (issue 30) on real packs: coverage equal to each project's own path formula,
unmatched entries counted and listed, and hostile overlays refused in one line with nothing
left behind."""
from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from carla_wds import limits
from carla_wds.pack import PackOptions, pack
from carla_wds.pack.errors import PackError
from carla_wds.pack.overlay import pack_overlay
from carla_wds.pack.synth import synth_dataset
from carla_wds.pack.synth.overlays import raw_routes, synth_overlay
from carla_wds.sequence import split_key
from tests.helpers import all_keys
from tests.overlaykit import garage_with_trees, overlay_entries

GARAGE_KINDS = ("simlingo_commentary", "simlingo_drivelm", "simlingo_dreamer", "drivelm")
# SimLingo's label file of a frame: its measurements path with two replacements
# (RenzKa/simlingo simlingo_training/dataloader/dataset_driving.py:86, :121; dataset_base.py:286)
SIMLINGO = {"simlingo_commentary": ("commentary", "commentary/"),
            "simlingo_drivelm": ("vqa", "drivelm/"), "simlingo_dreamer": ("dreamer", "dreamer/")}


@pytest.fixture(scope="module")
def garage(tmp_path_factory) -> Path:
    """A garage pack of several shards packed from <root>/data, as SimLingo's tree has it."""
    root = tmp_path_factory.mktemp("ovl")
    garage_with_trees(root, {k: _tree(root, k).name for k in GARAGE_KINDS}, 2, 3)
    return root


def _tree(root: Path, kind: str) -> Path:
    return root / SIMLINGO.get(kind, ("", "drivelm_carla/"))[1].rstrip("/")


def expected_entries(root: Path, kind: str) -> dict[str, Path]:
    """base key -> the file the project's own loader reads for that sample (their formula)."""
    out = {}
    for key in all_keys(root / "shards"):
        route, frame = split_key(key)
        measurement = str(root / "data" / route.replace("__", "/") / "measurements" /
                          f"{frame:04d}.json.gz")
        if kind in SIMLINGO:
            folder, tree = SIMLINGO[kind]
            path = Path(measurement.replace("measurements", folder).replace("data/", tree))
            if path.is_file():
                out[key] = path
        else:   # DriveLM-CARLA: the keyframe its image_paths.CAM_FRONT names
            for f in _tree(root, kind).rglob("*.json"):
                front = json.loads(f.read_text())["image_paths"]["CAM_FRONT"]
                if front.endswith(f"{route.replace('__', '/')}/rgb/{frame:04d}.jpg"):
                    out[key] = f
    return out


@pytest.mark.parametrize("kind", GARAGE_KINDS)
def test_coverage_and_entries_equal_the_projects_formula(garage, tmp_path, kind):
    want = expected_entries(garage, kind)
    files = sorted(p for p in _tree(garage, kind).rglob("*") if p.is_file())
    report = pack_overlay(_tree(garage, kind), garage / "shards", tmp_path / "o", kind)
    doc = json.loads((tmp_path / "o" / "manifest.json").read_text())
    base = all_keys(garage / "shards")
    assert 0 < len(want) < len(base)
    assert doc["coverage"] == {"base_samples": len(base), "with_entry": len(want),
                               "entries": len(files), "unmatched": len(files) - len(want),
                               "unmatched_list": "unmatched.json"}
    assert report.with_entry == len(want) and report.entries == len(files)
    unmatched = json.loads((tmp_path / "o" / "unmatched.json").read_text())
    assert len(unmatched) == len(files) - len(want) >= 2   # the ghost route's, route tails
    assert {u["file"] for u in unmatched} == {
        str(p.relative_to(_tree(garage, kind))) for p in set(files) - set(want.values())}
    members = overlay_entries(tmp_path / "o")
    assert list(members) == base   # same keys, same order, one per base sample
    for key in base:
        file_value = None if key not in want else json.loads(
            gzip.decompress(want[key].read_bytes()) if want[key].name.endswith(".gz")
            else want[key].read_bytes())
        assert members[key] == file_value, key
    runs = [r for s in doc["shards"] for r in s["entries"]]
    assert sum(n for has, n in runs if has) == len(want)
    assert doc["base"]["manifest_sha256"] == __import__("hashlib").sha256(
        (garage / "shards" / "manifest.json").read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def b2d(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("ovl_b2d")
    synth_dataset(root / "raw", "bench2drive", episodes=2, frames=30, seed=2,
                  image_size=(24, 32), progress=False)
    pack(root / "raw" / "archives", root / "shards",
         PackOptions.of(layout="bench2drive", max_samples=8, progress=False,
                        dataset_options={"stride": 1}))
    for kind in ("b2d_vl", "b2d_speed"):
        synth_overlay(root / kind, kind, raw_routes(root / "raw" / "v1", kind),
                      root / "raw" / "v1", coverage=0.5, unmatched=3)
    return root


def test_b2d_vl_on_a_bench2drive_pack(b2d, tmp_path):
    report = pack_overlay(b2d / "b2d_vl", b2d / "shards", tmp_path / "o", "b2d_vl")
    # Bench2Drive-VL's B2DVLDataset.load_vqa_data: <vqa_dir>/<clip>/<frame:05d>.json
    want = {}
    for key in all_keys(b2d / "shards"):
        clip, frame = split_key(key)
        path = b2d / "b2d_vl" / clip / f"{frame:05d}.json"
        want[key] = json.loads(path.read_text()) if path.is_file() else None
    assert overlay_entries(tmp_path / "o") == want
    assert report.with_entry == sum(v is not None for v in want.values()) > 0
    assert len(report.unmatched) >= 3


def test_b2d_speed_keeps_the_appended_speeds_only(b2d, tmp_path):
    """Bench2Drive-Speed's append_virtual_target_speed.py: <clip>/appended_anno/<frame>.json.gz
    is the frame's anno plus three keys; the overlay holds those three."""
    (b2d / "b2d_speed" / "stray").mkdir(exist_ok=True)   # a .json.gz outside appended_anno/
    (b2d / "b2d_speed" / "stray" / "00001.json.gz").write_bytes(gzip.compress(b"{}"))
    report = pack_overlay(b2d / "b2d_speed", b2d / "shards", tmp_path / "o", "b2d_speed")
    keep = ("virtual_target_speed", "tendency_speed", "fut_speed")
    want = {}
    for key in all_keys(b2d / "shards"):
        clip, frame = split_key(key)
        path = b2d / "b2d_speed" / clip / "appended_anno" / f"{frame:05d}.json.gz"
        anno = json.loads(gzip.decompress(path.read_bytes())) if path.is_file() else None
        want[key] = None if anno is None else {k: anno[k] for k in keep}
    assert overlay_entries(tmp_path / "o") == want and report.with_entry > 0
    assert not any("stray" in u["file"] for u in report.unmatched)   # not read at all


def _refused(fn, match: str, out: Path):
    with pytest.raises((PackError, ValueError), match=match) as info:
        fn()
    assert "\n" not in str(info.value)
    assert not out.exists() and not list(out.parent.glob(f".{out.name}.tmp-*"))
    return info


def _copy_tree(src: Path, dst: Path) -> Path:
    subprocess.run(["cp", "-r", str(src), str(dst)], check=True)
    return dst


def test_hostile_overlay_files_are_refused_and_leave_nothing(garage, tmp_path):
    kind = "simlingo_commentary"
    tree = _copy_tree(_tree(garage, kind), tmp_path / "tree")
    victim = sorted(tree.rglob("*.json.gz"))[0]
    good = victim.read_bytes()
    victim.write_bytes(good[:len(good) // 2])   # truncated
    _refused(lambda: pack_overlay(tree, garage / "shards", tmp_path / "o", kind),
             rf"{victim.name}.*truncated or corrupt gzip.*Fix", tmp_path / "o")
    victim.write_bytes(gzip.compress(b" " * (2 << 20) + b"{}"))   # a bomb under a 1 MB bound
    with limits.using(limits.DEFAULT.with_overrides({"json_bytes": 1 << 20})):
        _refused(lambda: pack_overlay(tree, garage / "shards", tmp_path / "o", kind),
                 rf"{victim.name}.*decompresses to over", tmp_path / "o")
    victim.write_bytes(gzip.compress(b'{"no_commentary": 1}'))
    _refused(lambda: pack_overlay(tree, garage / "shards", tmp_path / "o", kind),
             r"expected a JSON object with a 'commentary' string.*Fix: pass the --kind",
             tmp_path / "o")
    victim.write_bytes(good)
    os.symlink("/etc/passwd", victim.parent / "0999.json.gz")   # leads out of the tree
    _refused(lambda: pack_overlay(tree, garage / "shards", tmp_path / "o", kind),
             r"0999.json.gz: a symlink; refused", tmp_path / "o")
    (victim.parent / "0999.json.gz").unlink()
    twin = tree / "extra" / victim.relative_to(tree)   # two files for one base sample
    twin.parent.mkdir(parents=True)
    twin.write_bytes(good)
    _refused(lambda: pack_overlay(tree, garage / "shards", tmp_path / "o", kind),
             r"are both the entry of base sample", tmp_path / "o")


def test_wrong_kind_and_existing_out_are_refused(garage, tmp_path):
    _refused(lambda: pack_overlay(_tree(garage, "drivelm"), garage / "shards", tmp_path / "o",
                                  "simlingo_commentary"), r"no simlingo_commentary files",
             tmp_path / "o")
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "x").write_text("x")
    with pytest.raises(FileExistsError, match="already holds files"):
        pack_overlay(_tree(garage, "drivelm"), garage / "shards", tmp_path / "busy", "drivelm")


def test_cli_pack_overlay_one_line_errors(garage, tmp_path):
    cli = [sys.executable, "-m", "carla_wds.cli"]
    ok = subprocess.run([*cli, "pack-overlay", str(_tree(garage, "drivelm")),
                         str(garage / "shards"), str(tmp_path / "o"), "--kind", "drivelm"],
                        capture_output=True, text=True)
    assert ok.returncode == 0 and "base samples" in ok.stdout and "unmatched.json" in ok.stdout
    bad = subprocess.run([*cli, "pack-overlay", str(tmp_path / "nowhere"),
                          str(garage / "shards"), str(tmp_path / "o2"), "--kind", "drivelm"],
                         capture_output=True, text=True)
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and "not a folder" in bad.stderr
    assert not (tmp_path / "o2").exists()


def _chunk(tree: Path, archive: Path, prefix: str, edit=None) -> Path:
    """A SimLingo-style label chunk: the tree's files under `prefix/` in one .tar.gz."""
    with tarfile.open(archive, "w:gz") as tar:
        for path in sorted(p for p in tree.rglob("*") if p.is_file()):
            info = tar.gettarinfo(str(path), f"{prefix}/{path.relative_to(tree).as_posix()}")
            if edit:
                edit(info)
            with open(path, "rb") as f:
                tar.addfile(info, f)
    return archive


def test_label_chunks_are_read_without_extraction(garage, tmp_path):
    """An OVERLAY_DIR of .tar.gz chunks gives the same overlay shards as the extracted tree."""
    kind = "simlingo_dreamer"
    (tmp_path / "chunks").mkdir()
    _chunk(_tree(garage, kind), tmp_path / "chunks" / "dreamer_chunk_001.tar.gz",
           "dreamer/simlingo")
    from_chunks = pack_overlay(tmp_path / "chunks", garage / "shards", tmp_path / "a", kind)
    pack_overlay(_tree(garage, kind), garage / "shards", tmp_path / "b", kind)
    shards = sorted(p.name for p in (tmp_path / "b").glob("overlay-*.tar"))
    assert shards and all((tmp_path / "a" / n).read_bytes() == (tmp_path / "b" / n).read_bytes()
                          for n in shards)
    assert all(u["file"].startswith("dreamer_chunk_001.tar.gz:dreamer/simlingo/")
               for u in from_chunks.unmatched) and from_chunks.unmatched


@pytest.mark.parametrize("edit,match", [
    (lambda i: setattr(i, "name", "../../escape/" + i.name), "leaves the archive's folder"),
    (lambda i: (setattr(i, "type", tarfile.SYMTYPE), setattr(i, "linkname", "/etc/passwd"),
                setattr(i, "size", 0)), "is a symlink, not a plain file")])
def test_hostile_label_chunks_are_refused(garage, tmp_path, edit, match):
    kind = "simlingo_dreamer"
    (tmp_path / "chunks").mkdir()
    _chunk(_tree(garage, kind), tmp_path / "chunks" / "c.tar.gz", "dreamer", edit)
    _refused(lambda: pack_overlay(tmp_path / "chunks", garage / "shards", tmp_path / "o", kind),
             rf"overlay archive .*c.tar.gz.*{match}.*Fix", tmp_path / "o")


@pytest.fixture(scope="module")
def lb2(tmp_path_factory) -> Path:
    """A garage_lb2_simlingo pack (SimLingo's own route filter and frames) of SimLingo's tree,
    <root>/data/simlingo/..., with each label tree beside data/ as SimLingo's database has."""
    root = tmp_path_factory.mktemp("ovl_lb2")
    routes = synth_dataset(root, "garage_lb2", episodes=3, frames=40, seed=2,
                           image_size=(24, 32), progress=False)
    pack(root / "data", root / "shards", PackOptions.of(layout="garage_lb2_simlingo",
                                                        max_samples=8, progress=False))
    for i, kind in enumerate(GARAGE_KINDS):
        synth_overlay(_tree(root, kind), kind, routes, root / "data", coverage=0.5, seed=i)
    return root


@pytest.mark.parametrize("kind", GARAGE_KINDS)
def test_the_kinds_join_a_garage_lb2_pack_by_simlingos_formula(lb2, tmp_path, kind):
    want = expected_entries(lb2, kind)
    report = pack_overlay(_tree(lb2, kind), lb2 / "shards", tmp_path / "o", kind)
    members = overlay_entries(tmp_path / "o")
    assert list(members) == all_keys(lb2 / "shards") and report.with_entry == len(want) > 0
    assert {k for k, v in members.items() if v is not None} == set(want)


def test_a_corrupt_base_shard_is_one_line_naming_it(garage, tmp_path):
    base = _copy_tree(garage / "shards", tmp_path / "base")
    shard = sorted(base.glob("*.tar"))[0]
    shard.write_bytes(b"not a tar header" * 64)   # as long as a header block: no clean end
    kind = "simlingo_commentary"
    info = _refused(lambda: pack_overlay(_tree(garage, kind), base, tmp_path / "o", kind),
                    "base shard", tmp_path / "o")
    assert shard.name in str(info.value) and "not a readable tar" in str(info.value)


def test_routes_with_dots_match_a_base_packed_with_dot_replacement():
    from carla_wds.pack.overlay import RouteIndex
    from carla_wds.pack.overlay_kinds import Entry
    keys = [["Town12__route_1_5__0003", "Town12__route_1_5__0004"]]   # make_key, "_" for "."
    entry = Entry("x/route_1.5/0003.json.gz", ("Town12", "route_1.5"), 3, {})
    assert RouteIndex(keys, "_").route_of(entry) == "Town12__route_1_5"
    assert RouteIndex(keys).route_of(entry) is None   # without the base's mapping: unmatched
