"""Raw route folders: frame accounting, bad input in both --on-error modes, layouts.

Every bad input is made for real in a copy of a synthetic raw dataset. In `fail` mode the CLI must
exit non-zero with a message naming episode, frame, file, what was expected and a "Fix:"; in
`skip` mode the manifest lists the frame with its reason and the accounting invariant holds.
"""
from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

PRED_LEN = 4
EP = "Town01/routes_town01_00"          # first route of the tcp fixture
EP_TF4 = "Town01_tiny/routes_00"         # first route of the transfuser4 fixture


# ---------------------------------------------------------------- accounting helpers

def raw_frames(raw: Path, measurements: str = "measurements") -> dict[str, list[int]]:
    """episode -> sorted frame numbers, from the measurement files actually on disk."""
    out: dict[str, list[int]] = {}
    for meas_dir in sorted(raw.rglob(measurements)):
        episode = meas_dir.parent.relative_to(raw).as_posix()
        out[episode] = sorted(int(p.stem) for p in meas_dir.glob("*.json"))
    return out


def check_accounting(raw: Path, pack_dir: Path, samples_of, pred_len: int = PRED_LEN) -> dict:
    """Every frame found is in exactly one of: a sample, its route's tail, manifest['skipped']."""
    manifest = json.loads((pack_dir / "manifest.json").read_text())
    found = raw_frames(raw)
    in_samples = [(m["episode"], m["frame"]) for m in
                  (json.loads(s["meta.json"]) for s in samples_of(pack_dir).values())]
    in_skipped = [(s["episode"], s["frame"]) for s in manifest["skipped"]]
    assert all(s["reason"] for s in manifest["skipped"])
    assert len(set(in_samples)) == len(in_samples), "a frame is in two samples"
    assert len(set(in_skipped)) == len(in_skipped), "a frame is skipped twice"
    assert not set(in_samples) & set(in_skipped), "a frame is both a sample and skipped"
    tail = {(ep, t) for ep, frames in found.items() if len(frames) > pred_len
            for t in frames if t > max(frames) - pred_len} - set(in_skipped)
    assert not tail & set(in_samples)
    all_found = {(ep, t) for ep, frames in found.items() for t in frames}
    assert set(in_samples) | set(in_skipped) | tail == all_found
    n_found = sum(len(f) for f in found.values())
    counts = manifest["counts"]
    assert counts["frames"] == n_found == len(in_samples) + len(tail) + len(in_skipped)
    assert counts["samples"] == manifest["total_samples"] == len(in_samples)
    assert counts["tail_frames"] == len(tail)
    assert counts["skipped"] == len(in_skipped)
    return manifest


def test_every_frame_accounted_for_clean(raw_tcp, packed_tcp, samples_of):
    manifest = check_accounting(raw_tcp, packed_tcp, samples_of)
    assert manifest["skipped"] == []
    assert manifest["counts"] == {"routes": 3, "frames": 90, "samples": 78, "tail_frames": 12,
                                  "skipped": 0, "nan_theta": 0, "void_command": 0,
                                  "filtered_routes": 0, "head_frames": 0,
                                  "loader_tail_frames": 0, "route_gaps": 0}


def test_every_frame_accounted_for_tf4(raw_tf4, packed_tf4, samples_of):
    manifest = check_accounting(raw_tf4, packed_tf4, samples_of)
    assert manifest["total_samples"] == 78 and manifest["layout"] == "transfuser4"


# ---------------------------------------------------------------- corruptions

def _edit_json(path: Path, fn: Callable[[dict], None]) -> None:
    data = json.loads(path.read_text())
    fn(data)
    path.write_text(json.dumps(data))   # allow_nan: NaN / Infinity written as CARLA's json does


def _png_with_bad_pixels(path: Path) -> None:
    """Keep signature, IHDR, chunk CRCs and IEND intact; replace the pixel data (IDAT) by a valid
    zlib stream that holds far too few bytes: only a full decode notices."""
    data = path.read_bytes()
    out, pos = bytearray(data[:8]), 8
    while pos < len(data):
        (n,), kind = struct.unpack(">I", data[pos:pos + 4]), data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IDAT":
            body = zlib.compress(b"\x00" * 7)
        out += struct.pack(">I", len(body)) + kind + body
        out += struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)
        pos += 12 + n
    assert bytes(out[-12:]) == data[-12:]          # IEND unchanged
    path.write_bytes(bytes(out))


@dataclass
class Case:
    corrupt: Callable[[Path], None]
    episode: str
    frame: int
    file: str                 # as named in the message and the skipped record
    reason: str               # a fragment of the reason (what was expected / found)
    options: dict = field(default_factory=dict)
    layout: str = "tcp"
    skipped_frames: tuple = ()   # all (frame) numbers of `episode` expected in skipped
    samples: int | None = None   # expected total_samples when not 78 minus the skipped


def _meas(ep: str, t: int) -> str:
    return f"{ep}/measurements/{t:04d}.json"


def _derived(t: int) -> tuple:
    """A bad measurement at frame t also takes the pred_len frames that need it as a future."""
    return tuple(range(max(0, t - PRED_LEN), t + 1))


CASES = {
    "missing_camera": Case(lambda r: (r / EP / "rgb" / "0007.png").unlink(), EP, 7,
                           "rgb/0007.png", "missing camera file", skipped_frames=(7,)),
    "missing_camera_tf4": Case(lambda r: (r / EP_TF4 / "rgb_rear" / "0010.png").unlink(), EP_TF4,
                               10, "rgb_rear/0010.png", "missing camera file",
                               layout="transfuser4", skipped_frames=(10,)),
    "truncated_png": Case(lambda r: (r / EP / "rgb" / "0008.png").write_bytes(
        (r / EP / "rgb" / "0008.png").read_bytes()[:300]), EP, 8, "rgb/0008.png", "truncated PNG",
        skipped_frames=(8,)),
    "not_a_png": Case(lambda r: (r / EP / "rgb" / "0003.png").write_bytes(b"GIF89a" + bytes(99)),
                      EP, 3, "rgb/0003.png", "not a PNG", skipped_frames=(3,)),
    "bad_pixels_check_images": Case(lambda r: _png_with_bad_pixels(r / EP / "rgb" / "0011.png"),
                                    EP, 11, "rgb/0011.png", "does not decode",
                                    options={"check_images": True}, skipped_frames=(11,)),
    "malformed_json": Case(lambda r: (r / _meas(EP, 9)).write_text('{"x": 1.0, "y": '), EP, 9,
                           "measurements/0009.json", "malformed JSON",
                           skipped_frames=_derived(9)),
    "json_not_object": Case(lambda r: (r / _meas(EP, 9)).write_text("[1, 2]"), EP, 9,
                            "measurements/0009.json", "expected a JSON object",
                            skipped_frames=_derived(9)),
    "missing_field": Case(lambda r: _edit_json(r / _meas(EP, 12), lambda d: d.pop("speed")), EP,
                          12, "measurements/0012.json", "missing measurement field 'speed'",
                          skipped_frames=_derived(12)),
    "missing_field_tf4": Case(lambda r: _edit_json(r / _meas(EP_TF4, 12),
                                                   lambda d: d.pop("x_command")),
                              EP_TF4, 12, "measurements/0012.json", "'x_command'",
                              layout="transfuser4", skipped_frames=_derived(12)),
    "nan_x": Case(lambda r: _edit_json(r / _meas(EP, 14), lambda d: d.update(x=float("nan"))), EP,
                  14, "measurements/0014.json", "non-finite", skipped_frames=_derived(14)),
    "inf_y": Case(lambda r: _edit_json(r / _meas(EP, 15), lambda d: d.update(y=float("inf"))), EP,
                  15, "measurements/0015.json", "non-finite", skipped_frames=_derived(15)),
    "nan_speed": Case(lambda r: _edit_json(r / _meas(EP, 16), lambda d: d.update(
        speed=float("nan"))), EP, 16, "measurements/0016.json", "non-finite",
        skipped_frames=_derived(16)),
    "inf_theta": Case(lambda r: _edit_json(r / _meas(EP, 17), lambda d: d.update(
        theta=float("-inf"))), EP, 17, "measurements/0017.json", "non-finite value in ['theta']",
        skipped_frames=_derived(17)),
    "huge_x": Case(lambda r: _edit_json(r / _meas(EP, 18), lambda d: d.update(x=1e308)), EP, 18,
                   "measurements/0018.json", "beyond float32 range", skipped_frames=_derived(18)),
    "huge_speed": Case(lambda r: _edit_json(r / _meas(EP, 8), lambda d: d.update(speed=-1e39)),
                       EP, 8, "measurements/0008.json", "beyond float32 range",
                       skipped_frames=_derived(8)),
    "string_field": Case(lambda r: _edit_json(r / _meas(EP, 6), lambda d: d.update(x="12.5")), EP,
                         6, "measurements/0006.json", "expected a number",
                         skipped_frames=_derived(6)),
    "command_out_of_range": Case(lambda r: _edit_json(r / _meas(EP, 13),
                                                      lambda d: d.update(target_command=0)),
                                 EP, 13, "measurements/0013.json", "RoadOption",
                                 skipped_frames=_derived(13)),
    "short_route": Case(lambda r: [p.unlink() for p in sorted((r / EP / "measurements")
                                                              .glob("*.json"))[4:]],
                        EP, 0, "measurements/", "needs at least pred_len + 1",
                        skipped_frames=(0, 1, 2, 3), samples=52),
    "dot_in_route_name": Case(lambda r: (r / EP).rename(r / "Town01" / "routes.town01_00"),
                              "Town01/routes.town01_00", 0, "Town01/routes.town01_00", "dot",
                              skipped_frames=tuple(range(30))),
}


@pytest.fixture
def bad_raw(request, copy_raw):
    """(case, raw copy with the case's corruption applied)."""
    case = CASES[request.param]
    raw = copy_raw(request.getfixturevalue("raw_tcp" if case.layout == "tcp" else "raw_tf4"))
    case.corrupt(raw)
    return case, raw


def _cli_options(case: Case) -> list[str]:
    args = ["--layout", case.layout, "--max-samples", "7"]
    if case.options.get("check_images"):
        args.append("--check-images")
    return args


@pytest.mark.parametrize("bad_raw", sorted(CASES), indirect=True)
def test_bad_input_fail_mode_names_episode_frame_file_and_fix(bad_raw, tmp_path, cli):
    case, raw = bad_raw
    out = tmp_path / "out"
    result = cli("pack", raw, out, *_cli_options(case))
    assert result.exit_code != 0, result.output
    msg = result.output
    assert case.episode in msg, msg
    assert f"frame {case.frame:04d}" in msg, msg
    assert case.file in msg, msg
    assert case.reason in msg, msg
    assert "Fix:" in msg, msg
    assert "Traceback" not in msg
    assert not (out / "manifest.json").exists()


@pytest.mark.parametrize("bad_raw", sorted(CASES), indirect=True)
def test_bad_input_skip_mode_records_reason(bad_raw, tmp_path, packer, samples_of):
    case, raw = bad_raw
    out = tmp_path / "out"
    # every frame with a full future: the cases name frames TransFuser 2021's loader leaves out
    manifest = packer(raw, out, layout=case.layout, max_samples=7, on_error="skip",
                      all_frames=True, **case.options)
    mine = [s for s in manifest["skipped"] if s["episode"] == case.episode]
    assert tuple(s["frame"] for s in mine) == case.skipped_frames, mine
    assert {s["episode"] for s in manifest["skipped"]} == {case.episode}
    own = [s for s in mine if s["frame"] == case.frame]
    assert own and own[0]["file"] == case.file and case.reason in own[0]["reason"], own
    # Frames skipped because a future frame is bad say which one and why.
    for s in mine:
        if s["frame"] != case.frame and case.file.endswith(".json"):
            assert case.file in s["file"] and case.reason in s["reason"], s
    check_accounting(raw, out, samples_of)
    expected = case.samples
    if expected is None:
        expected = 78 - sum(1 for f in case.skipped_frames if f < 30 - PRED_LEN)
    assert manifest["total_samples"] == expected


def test_bad_pixels_pass_the_cheap_check_and_are_copied(copy_raw, raw_tcp, tmp_path, packer,
                                                        samples_of):
    """Structure intact, pixel data corrupt: the default structural check cannot see it (the
    bytes are packed verbatim); only --check-images catches it (tested above)."""
    raw = copy_raw(raw_tcp)
    bad = raw / EP / "rgb" / "0011.png"
    _png_with_bad_pixels(bad)
    manifest = packer(raw, tmp_path / "out", max_samples=7)
    assert manifest["skipped"] == [] and manifest["total_samples"] == 78
    packed = samples_of(tmp_path / "out")["Town01__routes_town01_00__0011"]["front.png"]
    assert packed == bad.read_bytes()


def test_dot_replacement_packs_the_route(copy_raw, raw_tcp, tmp_path, packer, samples_of):
    raw = copy_raw(raw_tcp)
    (raw / EP).rename(raw / "Town01" / "routes.town01_00")
    manifest = packer(raw, tmp_path / "out", max_samples=7, dot_replacement="-")
    assert manifest["skipped"] == [] and manifest["total_samples"] == 78
    keys = list(samples_of(tmp_path / "out"))
    assert "Town01__routes-town01_00__0000" in keys
    assert all("." not in k for k in keys)
    meta = json.loads(samples_of(tmp_path / "out")["Town01__routes-town01_00__0000"]["meta.json"])
    assert meta["episode"] == "Town01/routes.town01_00"


def test_bad_measurement_in_tail_is_skipped_not_tail(copy_raw, raw_tcp, tmp_path, packer,
                                                     samples_of):
    raw = copy_raw(raw_tcp)
    (raw / _meas(EP, 29)).write_text("garbage")       # the last frame of the route
    manifest = packer(raw, tmp_path / "out", on_error="skip")
    frames = sorted(s["frame"] for s in manifest["skipped"])
    assert frames == [25, 29]       # 25 needs 26..29; 26..28 are tail either way
    check_accounting(raw, tmp_path / "out", samples_of)


def test_gap_in_frame_numbers(copy_raw, raw_tcp, tmp_path, packer, samples_of):
    raw = copy_raw(raw_tcp)
    (raw / _meas(EP, 10)).unlink()
    (raw / EP / "rgb" / "0010.png").unlink()
    manifest = packer(raw, tmp_path / "out", on_error="skip")
    mine = [s for s in manifest["skipped"] if s["episode"] == EP]
    assert [s["frame"] for s in mine] == [6, 7, 8, 9]
    assert all("missing" in s["reason"] for s in mine)
    check_accounting(raw, tmp_path / "out", samples_of)


@pytest.mark.parametrize("on_error", ["fail", "skip"])
def test_empty_input_dir_is_refused(tmp_path, cli, on_error):
    (tmp_path / "empty").mkdir()
    result = cli("pack", tmp_path / "empty", tmp_path / "out", "--on-error", on_error)
    assert result.exit_code != 0
    assert "no route folders" in result.output and "Fix:" in result.output
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_missing_input_dir_is_refused(tmp_path, cli):
    result = cli("pack", tmp_path / "nope", tmp_path / "out")
    assert result.exit_code != 0 and "not a directory" in result.output


def test_fail_mode_exit_code_through_the_real_command(bad_raw_malformed, tmp_path):
    """The installed console script, in a subprocess: non-zero exit and the message on stderr."""
    exe = Path(sys.executable).parent / "carla-wds"
    proc = subprocess.run([str(exe), "pack", str(bad_raw_malformed), str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert f"{EP} frame 0009: measurements/0009.json: malformed JSON" in proc.stderr
    assert "Fix:" in proc.stderr and "Traceback" not in proc.stderr


@pytest.fixture
def bad_raw_malformed(copy_raw, raw_tcp):
    raw = copy_raw(raw_tcp)
    CASES["malformed_json"].corrupt(raw)
    return raw


# ---------------------------------------------------------------- layouts

def test_layout_yaml_from_a_user_path(copy_raw, raw_tcp, tmp_path, cli, samples_of):
    raw = copy_raw(raw_tcp)
    for route in raw.glob("*/*"):
        (route / "rgb").rename(route / "cam0")
        (route / "measurements").rename(route / "meas")
    layout = tmp_path / "my_rig.yaml"
    layout.write_text(
        "name: my_rig\nmeasurements: meas\ncameras:\n  front: cam0\nfields:\n"
        "  x: x\n  y: y\n  theta: theta\n  speed: speed\n  target_x: x_target\n"
        "  target_y: y_target\n  command: target_command\n")
    result = cli("pack", raw, tmp_path / "out", "--layout", layout, "--max-samples", "7")
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["layout"] == "my_rig" and manifest["cameras"] == ["front"]
    assert manifest["total_samples"] == 78
    sample = samples_of(tmp_path / "out")["Town01__routes_town01_00__0005"]
    assert sample["front.png"] == (raw / EP / "cam0" / "0005.png").read_bytes()


def test_bad_layout_is_refused_with_a_message(tmp_path, raw_tcp, cli):
    bad = tmp_path / "bad.yaml"
    bad.write_text("cameras:\n  top: rgb\nfields: {}\n")
    for layout in (bad, "no_such_layout", tmp_path / "missing.yaml"):
        result = cli("pack", raw_tcp, tmp_path / "out", "--layout", layout)
        assert result.exit_code != 0
        assert "Traceback" not in result.output and "Error" in result.output, result.output
