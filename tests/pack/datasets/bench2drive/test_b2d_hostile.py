"""Bench2Drive raw files as hostile input (issue 23): a radar .h5 that reaches outside itself
(external storage, external and soft links, virtual datasets, filters the data never uses), a
radar or expert file that declares more than the limits allow, odd radar structures, a zip CRC
mismatch, absurd anno values, and `synth` without h5py. Real h5py files, real npz files, real
`pack` runs on the synthetic Bench2Drive writer's clips."""
from __future__ import annotations

import gzip
import io
import json
import os
import shutil
import subprocess
import sys
import textwrap
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pytest

from carla_wds import limits
from carla_wds.calib import B2D_RADARS
from carla_wds.codecs import codec_named
from carla_wds.limits import LimitError
from carla_wds.pack.datasets.bench2drive.raw import npz_array, radar_array
from carla_wds.pack.errors import PackError
from carla_wds.pack.synth import synth_dataset
from carla_wds.pack.synth.bench2drive import clip_name
from tests.conftest import read_pack
# every keyframe with a full future: the bad frames sit near the ends of 6-keyframe clips
from tests.conftest import run_pack_all_frames as run_pack

h5py = pytest.importorskip("h5py")
SENSORS = ("boxes", "expert", "radar")
CLIP = clip_name(0)
# ASCII is finite as float32 (no byte >= 0x7f), so the old code packed it as radar values
SECRET = (b"SECRET-TOKEN:hunter2-do-not-leak-" * 2)[:64]


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("b2d_hostile")   # 26 frames: keyframes 0 and 5 are samples
    synth_dataset(out, "bench2drive", episodes=1, frames=26, seed=11, image_size=(54, 96),
                  progress=False)
    return out


def clip_copy(raw: Path, tmp_path: Path) -> tuple[Path, Path]:
    """(input folder, clip folder) of a private copy of the raw clip."""
    src = tmp_path / "v1"
    shutil.copytree(raw / "v1", src)
    return src, src / CLIP


def pack_both(src: Path, tmp_path: Path, **kw) -> tuple[str, dict]:
    """The fail-mode error (nothing left behind) and the skip-mode manifest."""
    with pytest.raises(PackError) as err:
        run_pack(src, tmp_path / "fail", layout="bench2drive", sensors=SENSORS, **kw)
    assert not (tmp_path / "fail").exists()
    m = run_pack(src, tmp_path / "skip", layout="bench2drive", sensors=SENSORS,
                 on_error="skip", **kw)
    assert "\n" not in str(err.value)
    return str(err.value), m


def write_radar(path: Path, special: dict | None = None) -> bytes:
    """A radar .h5 with the five datasets; `special[name](f, name)` writes that one instead."""
    special = special or {}
    with h5py.File(path, "w") as f:
        for name in B2D_RADARS:
            if name in special:
                special[name](f, name)
            else:
                f.create_dataset(name, data=np.ones((3, 4), np.float16), compression="gzip")
    return path.read_bytes()


def refusal(decode, data: bytes, error: type = ValueError) -> tuple[str, int]:
    """(the error message of decode(data), the peak of Python-traced memory while it ran)."""
    tracemalloc.start()
    try:
        with pytest.raises(error) as err:
            decode(data)
        return str(err.value), tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def source_h5(path: Path) -> Path:
    """Another HDF5 file on the machine, holding the secret as a (4, 4) float32 array."""
    with h5py.File(path, "w") as f:
        f.create_dataset("data", data=np.frombuffer(SECRET, np.float32).reshape(4, 4))
    return path


# --- radar: nothing outside the file ---------------------------------------------------------

def test_radar_external_storage_is_refused_and_the_secret_never_packed(raw, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_bytes(SECRET)
    src, clip = clip_copy(raw, tmp_path)

    def external(f, name):
        f.create_dataset(name, shape=(4, 4), dtype="<f4", external=[(str(secret), 0, 64)])
    write_radar(clip / "radar" / "00000.h5", {"radar_front": external})
    msg, m = pack_both(src, tmp_path)
    assert msg.startswith(f"{CLIP} frame 0000: radar/00000.h5: ")
    assert "external storage" in msg and "radar_front" in msg
    assert [(s["frame"], s["file"]) for s in m["skipped"]] == [(0, "radar/00000.h5")]
    for path in (tmp_path / "skip").rglob("*"):
        if path.is_file():
            assert SECRET[:16] not in path.read_bytes(), path
    for sample in read_pack(tmp_path / "skip").values():
        assert SECRET[:16] not in b"".join(sample.values())


def _external_link(tmp):
    target = str(source_h5(tmp / "other.h5"))
    return lambda f, name: f.__setitem__(name, h5py.ExternalLink(target, "data"))


def _soft_link(tmp):
    return lambda f, name: f.__setitem__(name, h5py.SoftLink("/radar_back_right"))


def _virtual(tmp):
    target = str(source_h5(tmp / "other.h5"))

    def write(f, name):
        layout = h5py.VirtualLayout(shape=(4, 4), dtype="<f4")
        layout[:] = h5py.VirtualSource(target, "data", shape=(4, 4))
        f.create_virtual_dataset(name, layout)
    return write


@pytest.mark.parametrize("make, words", [
    (_external_link, "external link"), (_soft_link, "soft link"),
    (_virtual, "virtual dataset")])
def test_radar_links_and_virtual_datasets_are_refused(tmp_path, make, words):
    data = write_radar(tmp_path / "r.h5", {"radar_front": make(tmp_path)})
    with pytest.raises(ValueError) as err:
        radar_array(data)
    msg = str(err.value)
    assert "radar_front" in msg and words in msg and "expected" in msg and "\n" not in msg


def test_radar_filters_other_than_gzip_and_shuffle_are_refused(tmp_path):
    def shuffled(f, name):   # what Bench2Drive writes, shuffle added: still read
        f.create_dataset(name, data=np.full((2, 4), 2, np.float16), compression="gzip",
                         shuffle=True, chunks=True)
    arr = radar_array(write_radar(tmp_path / "r.h5", {"radar_front": shuffled}))
    assert arr.shape == (2 + 4 * 3, 5) and arr.dtype == np.float32
    assert (arr[:2, 1:] == 2).all() and (arr[2:, 1:] == 1).all()
    ones = np.ones((3, 4), "<f4")
    for words, kw in [("filter lzf", {"compression": "lzf"}),
                      ("filter scaleoffset", {"scaleoffset": 2}),
                      ("filter fletcher32", {"fletcher32": True})]:
        data = write_radar(tmp_path / "r.h5", {
            "radar_front": lambda f, name: f.create_dataset(name, data=ones, **kw)})
        with pytest.raises(ValueError, match=f"radar dataset radar_front uses {words}; "
                                             "expected a dataset stored in the file itself"):
            radar_array(data)


# --- radar: declared sizes before reading, one-line errors for odd structures ----------------

def test_radar_declaring_1e9_rows_is_refused_before_allocating(tmp_path):
    """2.7 KB of HDF5 that declares 1e9 x 4 float32 (16 GB): refused from the declaration, in
    a process whose address space could not hold the array anyway."""
    def bomb(f, name):
        f.create_dataset(name, shape=(10 ** 9, 4), dtype="<f4", chunks=(4096, 4),
                         compression="gzip")
    path = tmp_path / "bomb.h5"
    write_radar(path, {"radar_front": bomb})
    assert path.stat().st_size < 20_000
    code = textwrap.dedent(f"""
        import resource, sys
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
        from carla_wds.pack.datasets.bench2drive.plan import radar_array
        try:
            radar_array(open({str(path)!r}, "rb").read())
        except ValueError as exc:
            print("REFUSED", exc)
    """)
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("REFUSED") and "radar_rows" in out.stdout
    assert "--limit radar_rows=N" in out.stdout


def test_radar_rows_and_bytes_limits_name_the_file_in_pack(raw, tmp_path):
    src, clip = clip_copy(raw, tmp_path)
    write_radar(clip / "radar" / "00005.h5")   # 15 rows
    with limits.using(limits.active().with_overrides({"radar_rows": 14})):
        msg, m = pack_both(src, tmp_path)
    assert msg.startswith(f"{CLIP} frame 0005: radar/00005.h5: ") and "radar_rows=14" in msg
    assert [(s["frame"], s["file"]) for s in m["skipped"]] == [(5, "radar/00005.h5")]

    def wide(f, name):   # 300 x 4 float64 = 9600 bytes, declared by a chunked dataset
        f.create_dataset(name, data=np.zeros((300, 4)), chunks=(300, 4), compression="gzip")
    data = write_radar(tmp_path / "wide.h5", {"radar_front": wide})
    with limits.using(limits.active().with_overrides({"array_bytes": 4096})):
        with pytest.raises(LimitError, match="array_bytes=4,096"):
            radar_array(data)


def _group(f, name):
    f.create_group(name).create_dataset("x", data=np.ones((2, 4)))


def _compound(f, name):
    f.create_dataset(name, data=np.zeros(3, [("a", "<f4"), ("b", "<f4"), ("c", "<f4"),
                                              ("d", "<f4")]))


def _strings(f, name):
    f.create_dataset(name, data=np.array([[b"a", b"b", b"c", b"d"]]))


def _vlen(f, name):
    f.create_dataset(name, (2, 4), dtype=h5py.vlen_dtype(np.float32))


@pytest.mark.parametrize("make, words", [
    (_group, "is a group"), (_compound, "expected a numeric (M, 4) array"),
    (_strings, "expected a numeric (M, 4) array"), (_vlen, "expected a numeric (M, 4) array")])
def test_odd_radar_structures_are_one_line_errors(tmp_path, make, words):
    data = write_radar(tmp_path / "r.h5", {"radar_back_left": make})
    msg, peak = refusal(radar_array, data)
    assert "radar_back_left" in msg and words in msg and "\n" not in msg
    assert peak < 8 << 20


def test_a_radar_chunk_is_checked_against_array_bytes(tmp_path):
    """2 rows kept in one 65536-row gzip chunk: reading them decompresses the whole chunk."""
    def huge_chunk(f, name):
        f.create_dataset(name, data=np.ones((2, 4), "<f4"), maxshape=(None, 4),
                         chunks=(65536, 4), compression="gzip")
    data = write_radar(tmp_path / "r.h5", {"radar_front": huge_chunk})
    assert len(data) < 20_000
    with limits.using(limits.active().with_overrides({"array_bytes": 65536})):
        with pytest.raises(LimitError, match=r"one chunk \(65536, 4\) of radar dataset "
                                             r"radar_front, in bytes is 1,048,576"):
            radar_array(data)


def test_a_radar_group_is_a_bad_frame_in_pack(raw, tmp_path):
    src, clip = clip_copy(raw, tmp_path)
    write_radar(clip / "radar" / "00000.h5", {"radar_front": _group})
    msg, m = pack_both(src, tmp_path)
    assert msg.startswith(f"{CLIP} frame 0000: radar/00000.h5: ") and "is a group" in msg
    assert [(s["frame"], s["file"]) for s in m["skipped"]] == [(0, "radar/00000.h5")]


# --- expert_assessment .npz ------------------------------------------------------------------

def npz_bytes(npy: bytes, method: int = zipfile.ZIP_STORED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", method) as z:
        z.writestr("arr_0.npy", npy)
    return buf.getvalue()


def npy_bytes(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, arr, allow_pickle=False)
    return buf.getvalue()


def test_expert_npz_member_over_array_bytes_is_refused_before_reading():
    data = npz_bytes(npy_bytes(np.zeros(1 << 17)), zipfile.ZIP_DEFLATED)   # 1 MiB in ~1 KB
    assert len(data) < 8192
    with limits.using(limits.active().with_overrides({"array_bytes": 65536})):
        msg, peak = refusal(npz_array, data, LimitError)
    assert "arr_0.npy" in msg and "array_bytes=65,536" in msg
    assert peak < 256 << 10


def test_expert_npz_header_declaring_more_than_its_member_holds():
    header = io.BytesIO()   # an .npy header declaring 1e10 float64 (80 GB), then 2 KB of data
    np.lib.format.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False,
                                                  "shape": (10 ** 10,)})
    data = npz_bytes(header.getvalue() + np.zeros(258).tobytes())
    msg, peak = refusal(npz_array, data)
    assert "(10000000000,)" in msg and "array_bytes" in msg and peak < 1 << 20
    with limits.using(limits.active().with_overrides({"array_bytes": 2 ** 40})):
        with pytest.raises(ValueError, match=r"declares float64 \(10000000000,\) \(80,000,000,000 "
                                             r"bytes\) but holds 2,064 bytes"):
            npz_array(data)


def test_expert_npz_crc_mismatch_is_a_bad_file_naming_it(raw, tmp_path):
    src, clip = clip_copy(raw, tmp_path)
    path = clip / "expert_assessment" / "-0001.npz"
    data = bytearray(path.read_bytes())
    at = data.index(b"\x93NUMPY") + 200     # inside the stored array data
    data[at] ^= 0x01
    path.write_bytes(bytes(data))
    msg, m = pack_both(src, tmp_path)
    assert msg.startswith(f"{CLIP} frame 0000: expert_assessment/-0001.npz: ") and "CRC" in msg
    assert [(s["frame"], s["file"]) for s in m["skipped"]] == [(0, "expert_assessment/-0001.npz")]


def test_a_bad_future_expert_file_skips_the_frames_it_is_the_future_of(raw, tmp_path):
    """Issue 26: frames 0 and 5 carry future expert labels from files t - 1 + 5k; a NaN in
    file 24 (frame 5's last future, no frame's own) skips frame 5, naming it."""
    src, clip = clip_copy(raw, tmp_path)
    path = clip / "expert_assessment" / "00024.npz"
    arr = np.load(path)["arr_0"].copy()
    arr[3] = np.nan
    path.write_bytes(npz_bytes(npy_bytes(arr)))
    msg, m = pack_both(src, tmp_path)
    assert msg.startswith(f"{CLIP} frame 0005: expert_assessment/00024.npz: ") and "finite" in msg
    assert [(s["frame"], s["file"]) for s in m["skipped"]] == [(5, "expert_assessment/00024.npz")]
    assert m["counts"]["samples"] == 1


def test_a_future_expert_file_of_another_feature_length_is_refused(raw, tmp_path):
    """The port stacks the future features with the frame's own: file 19 one value short (the
    last future of frame 0, the third of frame 5) is refused, naming it."""
    src, clip = clip_copy(raw, tmp_path)
    path = clip / "expert_assessment" / "00019.npz"
    path.write_bytes(npz_bytes(npy_bytes(np.load(path)["arr_0"][1:])))
    with pytest.raises(PackError) as err:
        run_pack(src, tmp_path / "fail", layout="bench2drive", sensors=SENSORS)
    assert str(err.value).startswith(f"{CLIP} frame 0000: expert_assessment/00019.npz: ")
    assert "expected (1538,) as frame t's" in str(err.value)

# --- non-finite and absurd label values ------------------------------------------------------

def _set(key, value):
    def edit(doc):
        doc[key] = value
    return edit


def _box(key, value):
    def edit(doc):
        doc["bounding_boxes"][1][key] = value
    return edit


def _far_target(doc):
    """Each coordinate within float32, the target point 4.8e38 m away: inf as float32."""
    doc.update(theta=3 * np.pi / 4, x_target=3.4e38, y_target=3.4e38)


def _sensor(key, value):
    def edit(doc):
        doc["sensors"]["CAM_FRONT"][key] = value
    return edit


def _rotation_only(doc):
    del doc["bounding_boxes"][1]["world2vehicle"]
    doc["bounding_boxes"][1]["rotation"] = [0.0, 0.0, None]


@pytest.mark.parametrize("edit, words", [
    # absurd values: beyond float32, or computed labels that overflow it
    (_set("x_target", 1e308), "x_target"), (_set("y_target", -1e308), "y_target"),
    (_far_target, "target_point"), (_set("command_near", 1e20), "command_near"),
    (_box("extent", [1e39, 1.0, 1.0]), "box"), (_box("speed", 1e39), "box"),
    # odd structures: a dict, null or nested dicts where numbers belong
    (_set("acceleration", {"x": 1.0}), "acceleration"), (_box("center", {"x": 1.0}), "center"),
    (_box("extent", [None, 1.0, 1.0]), "extent"), (_rotation_only, "rotation"),
    (_sensor("intrinsic", [[{}] * 3] * 3), "CAM_FRONT.intrinsic")])
def test_absurd_values_and_odd_structures_in_anno_are_bad_frames(raw, tmp_path, edit, words):
    src, clip = clip_copy(raw, tmp_path)
    path = clip / "anno" / "00000.json.gz"
    doc = json.loads(gzip.decompress(path.read_bytes()))
    edit(doc)
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    msg, m = pack_both(src, tmp_path)
    assert msg.startswith(f"{CLIP} frame 0000: anno/00000.json.gz: ") and words in msg
    assert [(s["frame"], s["file"]) for s in m["skipped"]] == [(0, "anno/00000.json.gz")]
    for sample in read_pack(tmp_path / "skip").values():
        for member in ("target_point.npy", "waypoints.npy", "boxes.npy"):
            assert np.isfinite(np.load(io.BytesIO(sample[member]))).all()
        rec = codec_named("record").decode(sample["measurements.npy"])
        assert all(np.isfinite(rec[n]).all() for n in rec.dtype.names)


# --- synth without h5py ----------------------------------------------------------------------

def test_synth_bench2drive_without_h5py_writes_nothing(tmp_path, cli, monkeypatch):
    monkeypatch.setitem(sys.modules, "h5py", None)   # `import h5py` now raises ImportError
    out = tmp_path / "raw"
    result = cli("synth", out, "--layout", "bench2drive", "--episodes", "1", "--frames", "3",
                 "--image-size", "36x64")
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "h5py" in lines[0] and "carla-wds[radar]" in lines[0]
    assert not out.exists()
