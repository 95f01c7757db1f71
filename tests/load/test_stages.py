"""The decoding stages on real encoded samples made with the schema's own encoder."""
from __future__ import annotations

import io
import multiprocessing
import os
import tarfile

import cv2
import numpy as np
import pytest
import torch

from carla_wds.load.stream import shardio
from carla_wds.load.decode import stages
from carla_wds.load.decode.batch import collate, empty_sample
from carla_wds.load.transport.ring import BatchRing, RingItem
from carla_wds.schema import SampleSpec, SchemaError, encode_sample
from carla_wds.shardread import MappedShard
from carla_wds.tario import tar_members

from ..helpers import mapped_rss_kb

SPEC = SampleSpec(("front", "left"), pred_len=4)
SIZE = (12, 20)


def _raw(i: int, rng: np.random.Generator) -> tuple[dict, dict[str, np.ndarray]]:
    images = {c: rng.integers(0, 256, (*SIZE, 3), dtype=np.uint8) for c in SPEC.cameras}
    png = {c: cv2.imencode(".png", cv2.cvtColor(im, cv2.COLOR_RGB2BGR))[1].tobytes()
           for c, im in images.items()}
    labels = {"speed": float(i), "meta": {"frame": i},
              "target_point": [i, -i], "target_command": np.eye(6)[i % 6],
              "waypoints": np.full((4, 2), i), "waypoints_diff": np.full((4, 2), -i)}
    return encode_sample(SPEC, f"k{i}", png, labels), images


def test_decode_batches_fills_slots_pads_and_reports_errors():
    rng = np.random.default_rng(0)
    made = [_raw(i, rng) for i in range(4)]
    raws = [r for r, _ in made]
    broken = dict(raws[1], **{"waypoints.npy": raws[1]["target_point.npy"]})   # wrong shape
    groups = [[raws[0], broken, {"__error__": "lost in a truncated shard"}],
              [raws[3], None, None]]
    batches = list(stages.decode_batches(groups, SPEC, SIZE, on_error="skip"))
    assert [b.keys for b in batches] == [["k0", "", ""], ["k3", "", ""]]
    assert batches[0].valid.tolist() == [True, False, False]
    assert len(batches[0].errors) == 2 and "waypoints.npy" in batches[0].errors[0]
    assert batches[0].errors[1] == "lost in a truncated shard"
    b = batches[1]
    assert b.images.shape == (3, 2, 3, *SIZE) and b.images.dtype == torch.uint8
    for c, cam in enumerate(SPEC.cameras):   # pixels exactly the encoded ones, RGB order
        assert np.array_equal(b.images[0, c].permute(1, 2, 0).numpy(), made[3][1][cam])
    assert not b.images[1:].any()            # padding is zeros, not leftover memory
    assert b.speed.tolist() == [3.0, 0.0, 0.0]
    assert b.command[0].tolist() == np.eye(6)[3].tolist()
    assert torch.equal(b.waypoints[0], torch.full((4, 2), 3.0))
    with pytest.raises(SchemaError, match="k1.*waypoints.npy"):
        list(stages.decode_batches([[raws[0], broken]], SPEC, SIZE, on_error="raise"))


def test_decode_batches_equals_decode_sample_then_collate():
    """The batch path and the single-sample path (for pipelines of your own) agree."""
    rng = np.random.default_rng(1)
    raws = [_raw(i, rng)[0] for i in range(3)]
    (direct,) = stages.decode_batches([raws + [None]], SPEC, SIZE)
    samples = [stages.decode_sample(r, SPEC, SIZE) for r in raws] + [empty_sample(2, SIZE, 4)]
    via = collate(samples)
    for name in ("images", "speed", "target_point", "command", "waypoints", "waypoints_diff",
                 "valid"):
        assert torch.equal(getattr(direct, name), getattr(via, name)), name
    assert direct.keys == via.keys


def test_decode_batches_fill_the_blocks_alloc_gives():
    """Each batch's images are the block `alloc` gave, here reused and still full of an
    earlier batch's bytes: its rows hold exactly the decoded pixels, and a padded or skipped
    row, row 0 included, is zeros, not those old bytes."""
    rng = np.random.default_rng(1)
    made = [_raw(i, rng) for i in range(3)]
    raws = [r for r, _ in made]
    blocks: list[torch.Tensor] = []

    def alloc(shape: tuple[int, ...]) -> torch.Tensor:
        blocks.append(torch.full(shape, 255, dtype=torch.uint8))
        return blocks[-1]

    groups = [[raws[0], raws[1]], [{"__error__": "lost"}, raws[2]], [None, None]]
    batches = list(stages.decode_batches(groups, SPEC, SIZE, on_error="skip", alloc=alloc))
    assert len(blocks) == len(batches) == 3
    for batch, block in zip(batches, blocks):   # decoded in place, not copied
        assert np.shares_memory(batch.images.numpy(), block.numpy())
    want = [[made[0][1], made[1][1]], [None, made[2][1]], [None, None]]
    for batch, rows in zip(batches, want):
        for row, images in enumerate(rows):
            for cam, name in enumerate(SPEC.cameras):
                got = batch.images[row, cam].permute(1, 2, 0).numpy()
                assert np.array_equal(got, images[name]) if images else not got.any()
    assert batches[1].keys == ["", "k2"] and batches[1].errors == ["lost"]
    assert batches[2].valid.tolist() == [False, False]


def test_ring_batches_keep_their_pixels_while_held_and_reuse_dropped_slots():
    """Decoding into a ring of 3 slots, keeping batches 0, 1, 5, 6 and 7 and dropping the
    others at once: the kept ones never change (no slot is written while a batch holds it),
    the dropped ones' slot serves the next batches, and once every slot is held the rest
    come in blocks of their own, with the same pixels."""
    rng = np.random.default_rng(4)
    made = [_raw(i, rng) for i in range(16)]
    groups = [[made[i][0], made[i + 1][0]] for i in range(0, 16, 2)]
    ring = BatchRing(3, (2, len(SPEC.cameras), *SIZE, 3), multiprocessing.get_context("fork"))
    kept, slots, outside = {}, set(), 0
    for n, sent in enumerate(map(ring.item, stages.decode_batches(iter(groups), SPEC, SIZE,
                                                                  alloc=ring.alloc))):
        if isinstance(sent, RingItem):
            slots.add(sent.slot)
            batch = ring.take(sent)
        else:
            outside, batch = outside + 1, sent
        if n in (0, 1, 5, 6, 7):
            kept[n] = batch
        del batch
    assert len(slots) == 3 and outside == 2   # 6 batches through 3 slots; 2 beyond them
    for n, batch in kept.items():
        for row in range(2):
            for cam, name in enumerate(SPEC.cameras):
                assert np.array_equal(batch.images[row, cam].permute(1, 2, 0).numpy(),
                                      made[2 * n + row][1][name]), (n, row, name)



@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="needs Linux /proc")
def test_the_reader_gives_back_each_group_once_the_next_is_asked_for(tmp_path):
    """Decoding touches a group's mapped pages; they leave this process's RSS when the
    decode stage asks for the next group, so a worker holds one batch's members in RSS,
    not the whole shuffle buffer's."""
    rng = np.random.default_rng(3)
    path = tmp_path / "big.tar"
    with tarfile.open(path, "w") as tar:
        for i in range(4):
            data = rng.integers(0, 256, 300_000, np.uint8).tobytes()
            info = tarfile.TarInfo(f"s{i}.front.png")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    with open(path, "rb") as f:
        raws = [{"__key__": m["fname"], "front.png": m["data"]}
                for m in tar_members(MappedShard(str(path), f), "big.tar")]
        assert all(isinstance(r["front.png"], memoryview) for r in raws)   # views of the map
        groups = shardio.released([raws[:2], raws[2:], [None]])
        first = next(groups)
        assert sum(len(bytes(r["front.png"])) for r in first) == 600_000   # decoding reads
        assert mapped_rss_kb(path) > 500
        next(groups)
        assert mapped_rss_kb(path) < 100    # the first group's pages are back
        assert list(groups) == [[None]]      # padding has no pages; the end is reached
