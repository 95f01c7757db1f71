"""Raw-input oddities, each made for real in a copy of a synthetic dataset: symlinked routes and
symlink loops, values that overflow float32 labels, images of another size, two files claiming
one frame number, and the image sizes the manifest records."""
from __future__ import annotations

import json
import logging
import os
import shutil

import cv2
import numpy as np
import pytest

from ..helpers import manifest_of, shard_hashes
from .test_routes import EP, check_accounting

# ---------------------------------------------------------------- symlinks


def test_symlinked_route_is_packed_and_a_loop_is_searched_once(raw_tcp, packed_tcp, copy_raw,
                                                               tmp_path, packer, caplog):
    """A route folder that is a symlink to a folder outside INPUT_DIR is a route like any other
    (same keys, same bytes); a link back up the tree (a loop) and a second link to a route are
    not searched twice, and say so."""
    raw = copy_raw(raw_tcp)
    route = raw / EP
    elsewhere = tmp_path / "disk2" / "route"
    shutil.move(str(route), str(elsewhere.parent.mkdir(parents=True) or elsewhere))
    route.symlink_to(elsewhere, target_is_directory=True)
    (raw / "Town01" / "loop").symlink_to("..", target_is_directory=True)
    (raw / "Town01" / "zz_again").symlink_to(elsewhere, target_is_directory=True)
    with caplog.at_level(logging.WARNING, logger="carla_wds.pack.routes"):
        manifest = packer(raw, tmp_path / "out", max_samples=7)
    assert manifest["counts"]["routes"] == 3 and manifest["total_samples"] == 78
    assert shard_hashes(tmp_path / "out") == shard_hashes(packed_tcp)
    assert "Town01/loop" in caplog.text and "Town01/zz_again" in caplog.text
    assert "not searched twice" in caplog.text


# ---------------------------------------------------------------- float32 overflow

def _edit(path, **values) -> None:
    data = json.loads(path.read_text())
    data.update(values)
    path.write_text(json.dumps(data))


def test_positions_too_far_apart_for_float32_are_bad_frames(raw_tcp, copy_raw, tmp_path, cli,
                                                            packer, samples_of):
    """x = 3e38 then -3e38: each fits float32, their difference does not. The frames whose
    waypoints span both are bad; none is packed with an infinity."""
    raw = copy_raw(raw_tcp)
    meas = raw / EP / "measurements"
    _edit(meas / "0014.json", x=3e38)
    _edit(meas / "0015.json", x=-3e38)
    failed = cli("pack", raw, tmp_path / "fail")
    assert failed.exit_code != 0
    assert f"{EP} frame 0011: measurements/0011.json: label waypoints" in failed.output
    assert "not finite in float32" in failed.output and "Fix:" in failed.output
    assert not (tmp_path / "fail").exists()
    manifest = packer(raw, tmp_path / "out", on_error="skip")
    assert [s["frame"] for s in manifest["skipped"]] == [11, 12, 13, 14]
    check_accounting(raw, tmp_path / "out", samples_of)
    for members in samples_of(tmp_path / "out").values():
        for name in ("waypoints", "waypoints_diff", "target_point"):
            arr = np.load(__import__("io").BytesIO(members[f"{name}.npy"]))
            assert np.isfinite(arr).all()
    assert cli("verify", tmp_path / "out", "--deep").exit_code == 0


# ---------------------------------------------------------------- image sizes

def _png(h: int, w: int) -> bytes:
    rgb = np.random.default_rng(1).integers(0, 255, (h, w, 3), dtype=np.uint8)
    return cv2.imencode(".png", rgb)[1].tobytes()


def test_image_of_another_size_is_a_bad_frame(raw_tcp, copy_raw, tmp_path, cli, packer,
                                              samples_of):
    raw = copy_raw(raw_tcp)
    (raw / EP / "rgb" / "0010.png").write_bytes(_png(30, 40))
    failed = cli("pack", raw, tmp_path / "fail")
    assert failed.exit_code != 0
    msg = failed.output
    assert f"{EP} frame 0010: rgb/0010.png: image is 30x40 (HxW)" in msg, msg
    assert f"{EP}/rgb/0000.png, the first front image, is 48x64" in msg and "Fix:" in msg
    manifest = packer(raw, tmp_path / "out", on_error="skip")
    assert [(s["frame"], s["file"]) for s in manifest["skipped"]] == [(10, "rgb/0010.png")]
    assert manifest["image_sizes"] == {"front": [48, 64]}
    check_accounting(raw, tmp_path / "out", samples_of)


def test_manifest_records_image_sizes_as_stored(raw_tf4, packed_tf4, tmp_path, packer):
    assert manifest_of(packed_tf4)["image_sizes"] == {c: [48, 64] for c in
                                                      ("front", "rear", "left", "right")}
    resized = packer(raw_tf4, tmp_path / "small", layout="transfuser4", resize=(24, 40),
                     image_format="jpg")
    assert resized["image_sizes"] == {c: [24, 40] for c in ("front", "rear", "left", "right")}


# ---------------------------------------------------------------- frame-number collisions

@pytest.mark.parametrize("folder, ext, frames", [("measurements", "json", [1, 2, 3, 4, 5]),
                                                 ("rgb", "png", [5])])
def test_two_files_for_one_frame_number(folder, ext, frames, raw_tcp, copy_raw, tmp_path, cli,
                                        packer, samples_of):
    """0005.x next to 00005.x: both are frame 5, so neither is trusted; the error names both
    (a bad measurement also takes the frames that need it as a future)."""
    raw = copy_raw(raw_tcp)
    src = raw / EP / folder / f"0005.{ext}"
    shutil.copyfile(src, src.with_name(f"00005.{ext}"))
    failed = cli("pack", raw, tmp_path / "fail")
    assert failed.exit_code != 0
    assert f"{EP} frame 0005: {folder}/" in failed.output, failed.output
    assert (f"{folder}/00005.{ext} and {folder}/0005.{ext} are both frame 5; expected one "
            f"{ext} file per frame number") in failed.output, failed.output
    manifest = packer(raw, tmp_path / "out", on_error="skip")
    assert [s["frame"] for s in manifest["skipped"]] == frames
    own = [s for s in manifest["skipped"] if s["frame"] == 5][0]
    assert f"00005.{ext}" in own["reason"] and f"/0005.{ext}" in own["reason"]
    # accounting counts frame numbers, not files: drop the second file for the check
    os.unlink(src.with_name(f"00005.{ext}"))
    check_accounting(raw, tmp_path / "out", samples_of)


def _png_header_only(h: int, w: int) -> bytes:
    """Signature, IHDR declaring h x w, IEND: passes the cheap structure check undecoded."""
    import struct
    import zlib

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (struct.pack(">I", len(body)) + kind + body
                + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF))
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IEND", b"")


def test_first_image_too_large_for_the_loader_is_refused(raw_tcp, copy_raw, tmp_path, cli,
                                                         packer):
    """A first image declaring 9000x9000 pixels would set the manifest's size past what the
    loader accepts (a decompression bomb): that frame is bad, and the next one sets the size."""
    raw = copy_raw(raw_tcp)
    (raw / EP / "rgb" / "0000.png").write_bytes(_png_header_only(9000, 9000))
    failed = cli("pack", raw, tmp_path / "fail")
    assert failed.exit_code != 0
    assert f"{EP} frame 0000: rgb/0000.png: image is 9000x9000 (HxW) as stored" in failed.output
    manifest = packer(raw, tmp_path / "out", on_error="skip")
    assert [s["frame"] for s in manifest["skipped"]] == [0]
    assert manifest["image_sizes"] == {"front": [48, 64]}
