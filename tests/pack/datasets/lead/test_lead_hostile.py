"""LEAD's pickles and bad files: refused without --allow-pickle-input (one line, nothing
written), read with it only through the opcode walker (a forbidden global is refused and never
run), bounded, and every bad sensor file a skip naming it."""
from __future__ import annotations

import json
import lzma
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from carla_wds import limits
from carla_wds.pack import PackOptions, pack
from carla_wds.pack.datasets.lead import pickles, sensors
from carla_wds.pack.errors import PackError
from carla_wds.pack.sources import PickleRefused
from carla_wds.pack.synth.lead import lead_pickle, synth_dataset

ROUTE = "Accident/Town12_Rep0_3790_0_route0_01_10_05_46_05"


class _Evil:
    """Unpickles to os.system(...): what a crafted LEAD pickle could hold."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.fixture()
def raw(tmp_path) -> Path:
    root = tmp_path / "raw"
    synth_dataset(root, episodes=1, frames=18, seed=4, image_size=(16, 16), progress=False)
    return root


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "carla_wds.cli", *args], capture_output=True,
                          text=True, timeout=300)


def test_a_pickle_without_the_flag_is_one_line_naming_file_and_fix(raw, tmp_path):
    out = tmp_path / "out"
    result = _cli("pack", str(raw), str(out), "--layout", "lead")
    assert result.returncode != 0
    lines = [ln for ln in result.stderr.splitlines() if ln.startswith("Error")]
    assert len(lines) == 1, result.stderr
    assert f"{ROUTE}/metas/0000.pkl" in lines[0] and "--allow-pickle-input" in lines[0]
    assert not out.exists() or not any(out.iterdir())


def test_with_the_flag_the_cli_packs_and_no_member_is_a_pickle(raw, tmp_path):
    out = tmp_path / "out"
    result = _cli("pack", str(raw), str(out), "--layout", "lead",
                  "--allow-pickle-input")
    assert result.returncode == 0, result.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["layout"] == "lead" and manifest["counts"]["samples"] == 2
    assert _cli("verify", str(out), "--deep").returncode == 0


def test_a_forbidden_global_is_refused_even_with_the_flag_and_never_run(raw, tmp_path):
    marker = tmp_path / "ran"
    (raw / ROUTE / "metas" / "0009.pkl").write_bytes(
        lzma.compress(pickle.dumps({"speed": _Evil(marker)})))
    with pytest.raises(PackError) as err:
        pack(raw, tmp_path / "out", PackOptions.of(layout="lead", progress=False,
                                                   allow_pickle_input=True))
    message = str(err.value)
    assert "metas/0009.pkl" in message and "system" in message and "\n" not in message
    assert not marker.exists() and not (tmp_path / "out").exists()
    manifest = pack(raw, tmp_path / "skip", PackOptions.of(
        layout="lead", progress=False, allow_pickle_input=True, on_error="skip"))
    assert [s["frame"] for s in manifest["skipped"]] == [9] and not marker.exists()


@pytest.mark.parametrize("value", [eval, os.system, shutil.rmtree, subprocess.Popen])
def test_the_unpickler_allows_numpy_and_plain_values_only(value):
    ok = {"a": np.arange(3, dtype=np.float16), "b": [1, None, "x", {2: 3.5}],
          "c": np.float32(2.5), "d": np.array([[1.0]], np.float32)[::-1]}
    got = pickles.read_lead_pickle(lead_pickle(ok), "f.pkl", True)
    assert got["b"] == ok["b"] and got["a"].dtype == np.float16 and got["c"] == 2.5
    with pytest.raises(ValueError, match="refused"):
        pickles.read_lead_pickle(lead_pickle({"x": value}), "f.pkl", True)
    with pytest.raises(PickleRefused, match="f.pkl.*--allow-pickle-input"):
        pickles.read_lead_pickle(lead_pickle(ok), "f.pkl", False)


def _reconstruct_pickle(shape: tuple, typecode: bytes, state: tuple | None) -> bytes:
    """A hand-written pickle: numpy's _reconstruct(ndarray, shape, typecode), then BUILD with
    `state` (what a crafted file can say, which numpy's own pickles never do)."""
    body = (b"cnumpy.core.multiarray\n_reconstruct\n" + b"cnumpy\nndarray\n"
            + pickle.dumps(shape, 3)[2:-1] + pickle.dumps(typecode, 3)[2:-1] + b"\x87R")
    if state is not None:   # (the dtype pickles through numpy.dtype, an allowed global)
        body += pickle.dumps(state, 3)[2:-1] + b"b"
    return b"\x80\x03" + body + b"."


@pytest.mark.parametrize("shape,state,why", [
    ((10 ** 6,), None, "refused.*before its data"),                 # allocates at once
    ((0,), (1, (10 ** 9,), np.dtype("O"), False, [None]), "refused.*dtype 'O8'"),  # past its list
    ((0,), (1, (10 ** 9,), np.dtype("f8"), False, b"\0" * 8), "refused.*fill its shape"),
    ((0,), (1, (1 << 20,), np.dtype("u1"), False, b"\0" * (1 << 20)),
     "over the limit array_bytes"),                                   # too big
])
def test_an_array_state_that_numpy_would_trust_is_refused(shape, state, why):
    with limits.using(limits.active().with_overrides({"array_bytes": 1 << 16})):
        with pytest.raises(ValueError, match=why):
            pickles.read_lead_pickle(_reconstruct_pickle(shape, b"b", state), "f.pkl", True)
    # numpy's own pickle of the same kind of array still reads
    ok = np.arange(6, dtype=np.float64).reshape(2, 3)
    for protocol in (3, 4, 5):   # LEAD writes HIGHEST_PROTOCOL
        got = pickles.read_lead_pickle(pickle.dumps(ok, protocol), "f.pkl", True)
        assert got.tolist() == ok.tolist() and got.dtype == ok.dtype


def test_a_bomb_and_a_truncated_stream_are_bounded_errors():
    bomb = lzma.compress(pickle.dumps(b"\0" * (1 << 20)))
    with limits.using(limits.active().with_overrides({"array_bytes": 1 << 16})):
        with pytest.raises(ValueError, match="array_bytes"):
            pickles.read_lead_pickle(bomb, "f.pkl", True)
    with pytest.raises(ValueError, match="xz"):
        pickles.read_lead_pickle(bomb[:40], "f.pkl", True)


@pytest.mark.parametrize("file, cut", [("rgb/0009.jpg", 200), ("lidar/0009.laz", 300),
                                       ("radar/0009.npz", 100), ("bboxes/0009.pkl", 30),
                                       ("depth/0009.png", 20), ("rgb_perturbated/0009.jpg", 99)])
def test_a_bad_sensor_file_is_a_skip_naming_it(raw, tmp_path, file, cut):
    path = raw / ROUTE / file
    path.write_bytes(path.read_bytes()[:cut])
    manifest = pack(raw, tmp_path / "out", PackOptions.of(
        layout="lead", progress=False, allow_pickle_input=True, on_error="skip"))
    assert [(s["frame"], s["file"]) for s in manifest["skipped"]] == [(9, file)]
    assert manifest["counts"]["samples"] == 1


def test_a_failed_route_and_a_route_without_results_are_left_out(raw, tmp_path):
    results = raw / ROUTE / "results.json"
    doc = json.loads(results.read_text())
    doc.update(status="Completed", num_infractions=1)
    doc["scores"]["score_composed"] = 90.0
    doc["infractions"]["collisions_vehicle"] = ["x"]
    results.write_text(json.dumps(doc))
    with pytest.raises(PackError, match="left out by its route filter"):
        pack(raw, tmp_path / "out", PackOptions.of(layout="lead", progress=False,
                                                   allow_pickle_input=True))


def test_instance_and_camera_pc_of_debug_runs():
    import cv2
    strip = np.random.default_rng(0).integers(0, 255, (4, 12, 3), dtype=np.uint8)
    ok, buf = cv2.imencode(".png", strip)
    parts = sensors.instance_pngs(buf.tobytes(), 3)
    from carla_wds.codecs import codec_named
    got = codec_named("instance").decode(parts[1])
    assert (got == strip[:, 4:8]).all()   # the saved (tag, G, B) as the instance codec serves
    import io
    b = io.BytesIO()
    np.savez_compressed(b, np.ones((5, 4), np.float32))
    assert sensors.camera_pc(b.getvalue()).shape == (5, 4)
