"""`pack --image-format raw`: cameras decoded once at pack time (with the codec the loader uses
for the source format) and stored as uint8 (H, W, 3) .npy members, which the loader reads with
no image decode. The same routes packed png/jpg (the source bytes) and raw serve identical
batches through the adapters (TCP from PNG cameras, TransFuser++ from JPEG cameras, its camera
twin and colour augmentation on; Bench2Drive's six JPEG cameras), and the raw packs still
equal their codebase's golden; history windows, `view` and `show` read them; a hostile raw
member is refused in one line naming the shard and the sample."""
from __future__ import annotations

import io
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch

from carla_wds.codecs import SchemaError, codec_named
from carla_wds.load import CARLAWebData
from carla_wds.pack import PackOptions, pack
from tests.helpers import manifest_of, rewrite_shard

from .batch_goldens import check_batch, read_golden, served, shared_golden_shards
from .test_garage_model import GOLDEN as GARAGE_GOLDEN
from .test_garage_model import _compare as garage_compare
from .test_garage_model import add_signals
from .test_tcp_model import ATOL as TCP_ATOL
from .test_tcp_model import GOLDEN as TCP_GOLDEN


def _raw_pack(shards: Path, out: Path, **options) -> Path:
    """The routes golden_shards wrote beside `shards` (root/raw), packed again with raw images
    into out (the golden shards' folder is shared, read-only)."""
    pack(shards.parent / "raw", out, PackOptions(progress=False, image_format="raw",
                                                 layout=manifest_of(shards)["layout"], **options))
    return out


@pytest.fixture(scope="module")
def tcp_packs(tmp_path_factory) -> tuple[Path, Path]:
    opts = {"allow_pickle_input": True, "max_samples": 5}
    png = shared_golden_shards(tmp_path_factory, read_golden(TCP_GOLDEN)[0], **opts)
    return png, _raw_pack(png, tmp_path_factory.mktemp("tcp_raw") / "raw_shards", **opts)


@pytest.fixture(scope="module")
def garage_packs(tmp_path_factory) -> tuple[Path, Path]:
    jpg = shared_golden_shards(tmp_path_factory, read_golden(GARAGE_GOLDEN)[0], add_signals,
                               max_samples=4)
    return jpg, _raw_pack(jpg, tmp_path_factory.mktemp("garage_raw") / "raw_shards",
                          max_samples=4)


def _same_batches(a: list[dict], b: list[dict]) -> None:
    assert len(a) == len(b) and a
    for x, y in zip(a, b):
        assert list(x) == list(y)
        for k in x:
            if isinstance(x[k], torch.Tensor):
                assert x[k].dtype == y[k].dtype and torch.equal(x[k], y[k]), k
            elif isinstance(x[k], list) and x[k] and isinstance(x[k][0], torch.Tensor):
                assert all(torch.equal(p, q) for p, q in zip(x[k], y[k])), k
            else:
                assert x[k] == y[k], k


def test_raw_members_are_the_decoded_pixels_of_the_source(tcp_packs, garage_packs):
    for source, raw in (tcp_packs, garage_packs):
        src, got = manifest_of(source), manifest_of(raw)
        assert got["image_format"] == "raw" and src["image_format"] in ("png", "jpg")
        assert got["image_sizes"] == src["image_sizes"]
        with tarfile.open(source / src["shards"][0]["name"]) as a, \
                tarfile.open(raw / got["shards"][0]["name"]) as b:
            cam = f"{next(iter(src['image_sizes']))}"
            ma = next(m for m in a if m.name.endswith(f".{cam}.{src['image_format']}"))
            mb = b.getmember(ma.name.rsplit(".", 1)[0] + ".raw")
            arr = np.load(io.BytesIO(b.extractfile(mb).read()), allow_pickle=False)
            want = codec_named(src["image_format"]).decode(a.extractfile(ma).read())
        assert arr.dtype == np.uint8 and arr.shape == (*src["image_sizes"][cam], 3)
        np.testing.assert_array_equal(arr, want)


def test_tcp_from_raw_equals_the_png_pack_and_their_golden(tcp_packs):
    meta, arrays = golden = read_golden(TCP_GOLDEN)
    _, from_png = served(meta, tcp_packs[0], "tcp")
    data, from_raw = served(meta, tcp_packs[1], "tcp")
    _same_batches(from_png, from_raw)
    for b, batch in enumerate(from_raw):
        check_batch(b, batch, golden, data.adapter.extra_keys, TCP_ATOL)
    for workers in (0, 2):   # train mode, TCP's colour augmentation on, through workers
        runs = [list(CARLAWebData(str(p), adapter="tcp", batch_size=4, mode="train",
                                  augment=True, seed=5, num_workers=workers)) for p in tcp_packs]
        _same_batches(*runs)


def test_garage_from_raw_equals_the_jpg_pack_twin_and_augmentation_on(garage_packs):
    meta, arrays = read_golden(GARAGE_GOLDEN)
    _, from_jpg = served(meta, garage_packs[0], "garage")
    _, from_raw = served(meta, garage_packs[1], "garage")
    _same_batches(from_jpg, from_raw)
    garage_compare(meta, arrays, from_raw)
    runs = [list(CARLAWebData(str(p), adapter="garage", batch_size=2, mode="train",
                              augment=True, seed=3)) for p in garage_packs]
    _same_batches(*runs)


def test_history_windows_and_fields_from_raw(tcp_packs):
    def load(path: Path) -> list:
        return list(CARLAWebData(str(path), batch_size=3, image_size=(64, 100), history=2,
                                 fields=["measurements"], seed=1, mode="eval"))
    for a, b in zip(*map(load, tcp_packs), strict=True):
        assert a.keys == b.keys and torch.equal(a.images, b.images)
        assert torch.equal(a.waypoints, b.waypoints)


def test_view_and_show_read_a_raw_pack(cli, tcp_packs, tmp_path):
    out, montage = tmp_path / "report.html", tmp_path / "montage.png"
    result = cli("view", str(tcp_packs[1]), "--out", str(out), "-n", "3")
    assert result.exit_code == 0 and out.is_file(), result.output
    result = cli("show", str(tcp_packs[1]), "--out", str(montage), "-n", "2")
    assert result.exit_code == 0 and montage.stat().st_size > 0, result.output


def _npy(arr: np.ndarray, allow_pickle: bool = False) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=allow_pickle)
    return buf.getvalue()


def _huge_header(h: int, w: int) -> bytes:
    """A version-2 .npy whose header length field claims 2 GiB."""
    return b"\x93NUMPY\x02\x00" + (2**31).to_bytes(4, "little") + b"{'descr': '|u1'" + \
        bytes(h * w * 3)


@pytest.mark.parametrize("name, member, match", [
    ("four channels", lambda h, w: _npy(np.zeros((h, w, 4), np.uint8)), r"\(H, W, 3\) uint8"),
    ("float32", lambda h, w: _npy(np.zeros((h, w, 3), np.float32)), r"dtype float32"),
    ("transposed", lambda h, w: _npy(np.zeros((w, h, 3), np.uint8)), r"manifest records"),
    ("fortran", lambda h, w: _npy(np.asfortranarray(np.zeros((h, w, 3), np.uint8))),
     "Fortran order"),
    ("object array", lambda h, w: _npy(np.array([{"a": 1}], dtype=object), True),
     r"dtype object"),
    ("huge header", _huge_header, "header does not parse"),
    ("truncated", lambda h, w: _npy(np.zeros((h, w, 3), np.uint8))[:-7], r"header declares"),
    ("png bytes", lambda h, w: b"\x89PNG\r\n\x1a\n" + bytes(40), "IHDR|PNG"),
])
def test_a_hostile_raw_member_is_one_line_naming_shard_and_key(tcp_packs, copy_tree, name,
                                                               member, match):
    shards = copy_tree(tcp_packs[1], f"hostile_{name.replace(' ', '_')}")
    manifest = manifest_of(shards)
    h, w = manifest["image_sizes"]["front"]
    shard = shards / manifest["shards"][0]["name"]
    victim = {}

    def edit(i: int, sample: dict) -> dict:
        if i == 1:
            victim["key"] = sample["__key__"]
            sample["front.raw"] = member(h, w)
        return sample
    rewrite_shard(shard, edit)
    with pytest.raises(SchemaError, match=match) as err:
        for _ in CARLAWebData(str(shards), adapter="tcp", batch_size=4, mode="eval"):
            pass
    text = str(err.value)
    assert len(text.splitlines()) == 1 and shard.name in text and victim["key"] in text, text
    assert "front.raw" in text


def test_the_codec_round_trips_and_refuses_what_is_not_a_raw_image():
    codec = codec_named("raw")
    img = np.random.default_rng(0).integers(0, 256, (5, 7, 3), dtype=np.uint8)
    data = codec.encode(img)
    assert codec.check(data) is None and codec.size(data) == (5, 7)
    np.testing.assert_array_equal(codec.decode(data), img)
    view = codec.pixels(data)
    assert not view.flags.writeable and np.array_equal(view, img)
    assert codec.encode(data) == data   # a raw member passes through, checked
    with pytest.raises(SchemaError, match="uint8 \\(H, W, 3\\)"):
        codec.encode(img.astype(np.float32))
    with pytest.raises(SchemaError, match="raw image bytes refused"):
        codec.encode(data[:-1])
    assert "header declares" in codec.check(data[:-1])
    assert "Fortran" in codec.check(_npy(np.asfortranarray(img)))


def test_bench2drive_jpeg_cameras_from_raw(tmp_path):
    """Six JPEG cameras: the raw pack serves the jpg pack's pixels at the packed size, and
    below half of it the pixels of exact_resize=True (the JPEG's reduced-DCT decode is off)."""
    from carla_wds.pack.synth import synth_dataset
    from tests.conftest import run_pack
    synth_dataset(tmp_path / "raw", "bench2drive", episodes=1, frames=30, seed=1,
                  image_size=(90, 160), progress=False)
    packs = [tmp_path / f"shards_{fmt}" for fmt in ("jpg", "raw")]
    for out in packs:
        run_pack(tmp_path / "raw" / "archives", out, layout="bench2drive", stride=1,
                 image_format=out.name.split("_")[1])
    for size, exact in (((90, 160), False), ((45, 80), True)):
        jpg, raw = ([b.images for b in CARLAWebData(str(p), batch_size=4, image_size=size,
                                                    mode="eval", exact_resize=exact)]
                    for p in packs)
        assert len(jpg) == len(raw) > 0 and all(map(torch.equal, jpg, raw))
