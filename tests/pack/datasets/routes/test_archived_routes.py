"""Route layouts packed straight from `.tar.gz` and `.zip` archives (issue 30,
carla_wds/pack/datasets/routes/archived.py): real archives written here with tarfile/zipfile
from synthetic routes (several routes per archive, at nested depths, a zip with and one without
its stem folder, a label-tree archive holding no route), packed once from the archives and once
from the same archives extracted as the datasets' instructions extract them (tar into the
archive's folder; a zip into its folder when its members sit under one folder named as its
stem, else into <folder>/<stem>: DriveLM's download_pdm_lite_carla_lb2.py): the shards are
byte-identical. Then hostile and broken archives, each refused in one line naming the archive,
the member and the fix, with nothing left in OUTPUT_DIR.
"""
from __future__ import annotations

import io
import json
import logging
import shutil
import stat
import tarfile
import zipfile
from pathlib import Path

import pytest

from carla_wds.pack.errors import PackError
from tests.conftest import make_raw, read_pack
from tests.conftest import run_pack_all_frames as run_pack
from tests.helpers import shard_hashes

EPISODES = 5
FRAMES = 20   # a few samples a route in garage's own sample set; no assertion counts them


def _routes(raw: Path) -> list[str]:
    return sorted(p.parent.relative_to(raw).as_posix() for p in raw.rglob("measurements"))


def _files(raw: Path, route: str) -> list[Path]:
    return sorted(p for p in (raw / route).rglob("*") if p.is_file())


def write_tar(path: Path, raw: Path, routes: list[str], prefix: str = "") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        for route in routes:
            tar.add(raw / route, arcname=prefix + route)


def write_zip(path: Path, raw: Path, routes: list[str], prefix: str = "") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for route in routes:
            for f in _files(raw, route):
                z.write(f, prefix + f.relative_to(raw).as_posix())


def extract_all(archives: Path, out: Path) -> None:
    """The archives extracted as their datasets' instructions do (module docstring)."""
    for a in sorted(archives.rglob("*")):
        folder = out / a.parent.relative_to(archives)
        if a.name.endswith(".tar.gz"):
            with tarfile.open(a) as tar:
                tar.extractall(folder, filter="data")
        elif a.suffix == ".zip":
            with zipfile.ZipFile(a) as z:
                stem = a.name[:-4]
                tops = {n.split("/", 1)[0] for n in z.namelist()}
                z.extractall(folder if tops == {stem} else folder / stem)


def label_tree(path: Path) -> None:
    """A language-label chunk: a `commentary/` tree of .json.gz beside no measurements/."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        data = json.dumps({"commentary": "slow down"}).encode()
        info = tarfile.TarInfo("commentary/simlingo/x/Town12_route0/commentary/0000.json.gz")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


@pytest.fixture(scope="module", params=["garage", "tcp"])
def dataset(request, tmp_path_factory) -> tuple[str, Path, Path]:
    """(layout, folder of archives, the same archives extracted)."""
    layout = request.param
    root = tmp_path_factory.mktemp(f"archived_{layout}")
    raw = make_raw(root / "raw", layout, episodes=EPISODES, frames=FRAMES, seed=3)
    routes = _routes(raw)
    assert len(routes) == EPISODES
    arc = root / "archives"
    write_tar(arc / "group" / "deep" / "data_chunk_001.tar.gz", raw, routes[:2])  # 2 routes
    write_zip(arc / "Town" / "data" / "Scenario.zip", raw, routes[2:4], "Scenario/")
    write_zip(arc / "flat.zip", raw, routes[4:])   # no stem folder: lands in flat/
    label_tree(arc / "commentary_chunk_001.tar.gz")
    extract_all(arc, root / "extracted")
    return layout, arc, root / "extracted"


def test_archives_pack_byte_identical_to_their_extracted_folders(dataset, tmp_path, caplog):
    layout, arc, extracted = dataset
    with caplog.at_level(logging.WARNING):
        m_arc = run_pack(arc, tmp_path / "from_archives", layout=layout, max_samples=7)
    m_dir = run_pack(extracted, tmp_path / "from_folders", layout=layout, max_samples=7)
    assert len(shard_hashes(tmp_path / "from_archives")) > 1   # several shards, each compared
    assert shard_hashes(tmp_path / "from_archives") == shard_hashes(tmp_path / "from_folders")
    assert m_arc["counts"] == m_dir["counts"] and m_arc["counts"]["routes"] == EPISODES
    episodes = {s.rsplit("__", 1)[0] for s in read_pack(tmp_path / "from_archives")}
    assert any(e.startswith("Town__data__Scenario__") for e in episodes), episodes
    assert any(e.startswith("flat__") for e in episodes), episodes
    # the label chunk is no error: skipped and counted
    said = [r.getMessage() for r in caplog.records if "hold no route folder" in r.getMessage()]
    assert said and said[0].startswith("1 of 4 archives") and "commentary_chunk_001" in said[0]


def test_parts_of_an_archived_pack_equal_the_folders_parts(dataset, tmp_path):
    layout, arc, extracted = dataset
    for i in (0, 1):
        run_pack(arc, tmp_path / f"a{i}", layout=layout, part=(i, 2))
        run_pack(extracted, tmp_path / f"f{i}", layout=layout, part=(i, 2))
        assert shard_hashes(tmp_path / f"a{i}") == shard_hashes(tmp_path / f"f{i}")


def test_cli_packs_archives(dataset, tmp_path, cli):
    layout, arc, _ = dataset
    result = cli("pack", arc, tmp_path / "out", "--layout", layout, "--spool-bytes", "0")
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "out" / "manifest.json").read_text())["counts"]["routes"] \
        == EPISODES


# ------------------------------------------------------------------------ hostile archives

@pytest.fixture(scope="module")
def garage(tmp_path_factory) -> tuple[Path, list[str]]:
    raw = make_raw(tmp_path_factory.mktemp("hostile_raw"), "garage", episodes=2, frames=14)
    return raw, _routes(raw)


def _tar_with(path: Path, raw: Path, route: str, extra: tarfile.TarInfo,
              data: bytes = b"") -> None:
    with tarfile.open(path, "w:gz") as tar:
        tar.add(raw / route, arcname=route)
        tar.addfile(extra, io.BytesIO(data) if data else None)


def _tar_info(name: str, kind: bytes = tarfile.REGTYPE, size: int = 0, link: str = ""
              ) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.size, info.linkname = kind, size, link
    return info


def _zip_with(path: Path, raw: Path, route: str, name: str, data: bytes = b"x",
              attr: int | None = None) -> None:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for f in _files(raw, route):
            z.write(f, f.relative_to(raw).as_posix())
        info = zipfile.ZipInfo(name)
        info.compress_type = zipfile.ZIP_DEFLATED
        if attr is not None:
            info.external_attr = attr << 16
        z.writestr(info, data)


def _cut(path: Path, keep: float) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:int(len(data) * keep)])


def _hostile(kind: str, arc: Path, raw: Path, routes: list[str]) -> tuple[str, str]:
    """Write archive `kind` into arc; (what the one-line error names, a fix word)."""
    r = routes[0]
    if kind == "tar_dotdot":
        _tar_with(arc / "a.tar.gz", raw, r, _tar_info("../evil.txt", size=1), b"x")
        return "'../evil.txt'", "Fix: rebuild"
    if kind == "tar_absolute":
        _tar_with(arc / "a.tar.gz", raw, r, _tar_info("/etc/evil", size=1), b"x")
        return "'/etc/evil'", "Fix: rebuild"
    if kind == "tar_symlink":
        _tar_with(arc / "a.tar.gz", raw, r, _tar_info(f"{r}/rgb/link.jpg", tarfile.SYMTYPE,
                                                       link="/etc/passwd"))
        return "is a symlink", "Fix: rebuild"
    if kind == "tar_hardlink":
        _tar_with(arc / "a.tar.gz", raw, r, _tar_info(f"{r}/rgb/hard.jpg", tarfile.LNKTYPE,
                                                       link="/etc/passwd"))
        return "is a hard link", "Fix: rebuild"
    if kind == "tar_device":
        _tar_with(arc / "a.tar.gz", raw, r, _tar_info(f"{r}/dev", tarfile.CHRTYPE))
        return "is a device", "Fix: rebuild"
    if kind == "zip_symlink":
        _zip_with(arc / "a.zip", raw, r, f"{r}/rgb/link.jpg", b"/etc/passwd",
                  attr=stat.S_IFLNK | 0o777)
        return "is a symlink", "Fix: rebuild"
    if kind == "zip_dotdot":
        _zip_with(arc / "a.zip", raw, r, "../../evil.txt")
        return "'../../evil.txt'", "Fix: rebuild"
    if kind == "zip_encrypted":   # zipfile writes no encrypted entry: its flag bit set here
        name = f"{r}/secret.txt"
        _zip_with(arc / "a.zip", raw, r, name)
        data = bytearray((arc / "a.zip").read_bytes())
        local = data.find(name.encode()) - 30         # local header: flags at +6
        central = data.rfind(name.encode()) - 46      # central header: flags at +8
        data[local + 6] |= 0x1
        data[central + 8] |= 0x1
        (arc / "a.zip").write_bytes(bytes(data))
        return "is encrypted", "Fix: decrypt"
    if kind == "zip_duplicate":
        with pytest.warns(UserWarning, match="Duplicate name"):
            _zip_with(arc / "a.zip", raw, r, f"{r}/results.json.gz")
        return "twice", "Fix: keep one"
    if kind == "zip_truncated":
        _zip_with(arc / "a.zip", raw, r, f"{r}/extra.txt")
        _cut(arc / "a.zip", 0.9)
        return "no zip central directory", "Fix: download"
    if kind == "tar_truncated":
        write_tar(arc / "a.tar.gz", raw, [r])
        _cut(arc / "a.tar.gz", 0.6)
        return "truncated or corrupt archive", "Fix: download"
    if kind == "zip_member_too_large":   # one member past raw_file_bytes (64 MiB)
        _zip_with(arc / "a.zip", raw, r, f"{r}/big.bin", bytes(65 << 20))
        return "big.bin's size (bytes) is 68,157,440, over the limit raw_file_bytes", \
            "--limit raw_file_bytes"
    if kind == "zip_bomb":   # 3 x 40 MiB of zeros, ~120 kB packed: far past clip_ratio
        _zip_with(arc / "a.zip", raw, r, f"{r}/bomb.bin", bytes(40 << 20))
        with zipfile.ZipFile(arc / "a.zip", "a", zipfile.ZIP_DEFLATED) as z:
            for i in (2, 3):
                z.writestr(f"{r}/bomb{i}.bin", bytes(40 << 20))
        return "over the limit clip_ratio", "--limit clip_ratio"
    if kind == "split_route":
        write_tar(arc / "a.tar.gz", raw, [r])
        write_tar(arc / "b.tar.gz", raw, [r])   # both extract to the same route folder
        return f"route {r} is in two archives", "Fix: keep one copy"
    raise AssertionError(kind)


HOSTILE = ["tar_dotdot", "tar_absolute", "tar_symlink", "tar_hardlink", "tar_device",
           "zip_symlink", "zip_dotdot", "zip_encrypted", "zip_duplicate", "zip_truncated",
           "tar_truncated", "zip_member_too_large", "zip_bomb", "split_route"]


@pytest.mark.parametrize("kind", HOSTILE)
def test_a_hostile_or_broken_archive_is_refused_in_one_line(kind, garage, tmp_path, cli):
    raw, routes = garage
    arc = tmp_path / "in"
    arc.mkdir()
    write_zip(arc / "zz_good.zip", raw, routes[1:], "zz_good/")   # a good archive beside it
    said, fix = _hostile(kind, arc, raw, routes)
    result = cli("pack", arc, tmp_path / "out", "--layout", "garage")
    assert result.exit_code == 1, result.output
    line = result.output.strip()
    assert len(line.splitlines()) == 1, line
    assert said in line and fix in line, line
    assert ".tar.gz" in line or ".zip" in line, line   # the archive is named
    assert not (tmp_path / "out").exists()


def test_a_corrupt_zip_member_is_a_skipped_frame_naming_it(garage, tmp_path):
    """A member whose CRC fails is found when read: its frame is skipped (listed) with
    --on-error skip, and the pack stops naming it without."""
    raw, routes = garage
    arc = tmp_path / "in"
    write_zip(arc / "r.zip", raw, routes[:1], "r/")
    data = bytearray((arc / "r.zip").read_bytes())
    with zipfile.ZipFile(arc / "r.zip") as z:
        info = next(i for i in z.infolist() if i.filename.endswith("rgb/0002.jpg"))
    at = info.header_offset + 30 + len(info.filename) + len(info.extra) + 10
    data[at] ^= 0xFF   # a byte of the stored JPEG: the CRC check fails on read
    (arc / "r.zip").write_bytes(bytes(data))
    with pytest.raises(PackError, match=r"rgb/0002.jpg.*(CRC|corrupt)"):
        run_pack(arc, tmp_path / "fail", layout="garage")
    assert not (tmp_path / "fail").exists()
    m = run_pack(arc, tmp_path / "skip", layout="garage", on_error="skip")
    assert [s["file"] for s in m["skipped"] if s["frame"] == 2] == ["rgb/0002.jpg"]


def test_the_folder_planner_applies_a_filters_route_rule(tmp_path):
    """folders.route_filter_reason delegates to RouteFilter.reason when the filter names a
    route rule (garage_lb2_simlingo's keep_also), so archived routes are filtered by it too:
    SimLingo keeps score_composed < 100 when score_route > 94 and every infraction is a
    min-speed or outside-lane one (dataset_base.py l.229-262, as written in the test here)."""
    import gzip

    from carla_wds.pack.datasets.routes.folders import FilterFileError, route_filter_reason
    from carla_wds.pack.datasets.routes.layouts import load_layout
    flt = load_layout("garage_lb2_simlingo").route_filter

    def reason(composed, route, minor, other):
        doc = {"scores": {"score_composed": composed, "score_route": route},
               "num_infractions": minor + other,
               "infractions": {"min_speed_infractions": ["slow"] * minor,
                               "outside_route_lanes": [], "collisions_vehicle": ["c"] * other}}
        (tmp_path / "results.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode()))
        return route_filter_reason(tmp_path, flt)

    assert reason(100, 100, 0, 0) == ""
    assert reason(90, 96, 2, 0) == ""                                   # kept by the rule
    assert reason(90, 96, 2, 1).startswith("results.json.gz: scores.score_composed is 90")
    assert reason(90, 94, 2, 0) != ""                                   # score_route > 94 only
    (tmp_path / "results.json.gz").write_bytes(gzip.compress(b'{"scores": {}}'))
    with pytest.raises(FilterFileError, match="unreadable"):
        route_filter_reason(tmp_path, flt)


@pytest.mark.parametrize("form", ["simlingo", "pdm_lite"])
def test_garage_lb2_from_its_releases_archives(form, tmp_path):
    """garage_lb2 packed from the archives as SimLingo (.tar.gz chunks holding data/simlingo/
    ..., beside a label chunk) and PDM-Lite (Town12/data/<Scenario>.zip holding <Scenario>/)
    ship them (synth_archives) equals the pack of the same archives extracted as their
    instructions say."""
    from carla_wds.pack.synth.garage_lb2 import synth_archives
    arc = tmp_path / "archives"
    written = synth_archives(arc, form, episodes=4, frames=24, seed=2, image_size=(32, 64))
    assert written and all(p.name.endswith(".tar.gz" if form == "simlingo" else ".zip")
                           for p in written)
    label_tree(arc / "commentary_simlingo_chunk_001.tar.gz")
    extract_all(arc, tmp_path / "extracted")
    m_arc = run_pack(arc, tmp_path / "a", layout="garage_lb2")
    m_dir = run_pack(tmp_path / "extracted", tmp_path / "f", layout="garage_lb2")
    assert shard_hashes(tmp_path / "a") == shard_hashes(tmp_path / "f")
    assert m_arc["counts"] == m_dir["counts"] and m_arc["total_samples"] > 0
    top = "data__simlingo__" if form == "simlingo" else "Town12__data__"
    keys = list(read_pack(tmp_path / "a"))
    assert all(k.startswith(top) for k in keys), keys[:2]


def test_worker_processes_encode_archived_tasks_from_their_bytes(dataset, tmp_path):
    """With --resize every image is decoded, so tasks go to 2 worker processes: they get
    each frame's files as bytes (no worker opens an archive) and give the folders' shards.
    A symlink loop beside the archives is searched once."""
    layout, arc, extracted = dataset
    loop = arc / "loop"
    loop.symlink_to(arc, target_is_directory=True)
    try:
        kw = {"layout": layout, "workers": 2, "resize": (16, 32), "max_samples": 9}
        run_pack(arc, tmp_path / "a", **kw)
    finally:
        loop.unlink()
    run_pack(extracted, tmp_path / "f", **kw)
    assert shard_hashes(tmp_path / "a") == shard_hashes(tmp_path / "f")


def test_a_cluster_plan_of_archives_equals_the_folders_plan(dataset, tmp_path, cli):
    """`carla-wds plan` sizes an archived route by its members' unpacked bytes, which are its
    extracted files' bytes: the plan (parts, sizes, fingerprint) equals the folders', and each
    part packed with --plan gives the folders' part's shards."""
    layout, arc, extracted = dataset
    plans = {}
    for name, src in (("a", arc), ("f", extracted)):
        out = tmp_path / name
        result = cli("plan", src, out, "--layout", layout, "--parts", "2")
        assert result.exit_code == 0, result.output
        plans[name] = json.loads((out / "plan.json").read_text())
        for i in (0, 1):
            result = cli("pack", src, out, "--layout", layout, "--plan", out / "plan.json",
                         "--part", str(i))
            assert result.exit_code == 0, result.output
    for key in ("fingerprint", "names", "bytes", "part_list"):
        assert plans["a"][key] == plans["f"][key], key
    assert plans["a"]["bytes"] > 0
    parts = [p["dir"] for p in plans["a"]["part_list"]]
    for d in parts:
        assert shard_hashes(tmp_path / "a" / d) == shard_hashes(tmp_path / "f" / d)


def test_archives_beside_route_folders_are_said_not_to_be_read(dataset, tmp_path, caplog):
    """A folder holding route folders is packed as folders; archives beside them are not read,
    and the pack says so (a partly extracted download is never a silent half)."""
    layout, arc, extracted = dataset
    mixed = tmp_path / "mixed"
    shutil.copytree(extracted, mixed)
    shutil.copy(arc / "flat.zip", mixed / "flat_copy.zip")
    with caplog.at_level(logging.WARNING):
        run_pack(mixed, tmp_path / "out", layout=layout, max_samples=50)
    said = [r.getMessage() for r in caplog.records if "archives are not read" in r.getMessage()]
    assert said and "1 .tar.gz/.zip archives" in said[0] and "flat_copy.zip" in said[0]
    run_pack(extracted, tmp_path / "ref", layout=layout, max_samples=50)
    assert shard_hashes(tmp_path / "out") == shard_hashes(tmp_path / "ref")
