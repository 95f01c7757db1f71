"""The decoding stages on real encoded samples made with the schema's own encoder."""
from __future__ import annotations

import cv2
import numpy as np
import pytest
import torch

from carla_wds.load import stages
from carla_wds.load.batch import collate, empty_sample
from carla_wds.schema import SampleSpec, SchemaError, encode_sample

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


def test_decode_batches_takes_each_block_after_sample_0():
    """Sample 0 is decoded before the batch's block is taken (a ring worker then reuses the
    slot the main process just dropped); it still lands in row 0, and a padded or skipped
    row 0 is zeros, not the sample decoded before it or the block's old bytes."""
    rng = np.random.default_rng(1)
    made = [_raw(i, rng) for i in range(3)]
    raws = [r for r, _ in made]
    decoded: list[int] = []   # positions decoded so far (augment_at is asked for each)
    taken: list[list[int]] = []   # what had been decoded when each block was taken

    def alloc() -> torch.Tensor:   # a reused block, still full of an earlier batch's bytes
        taken.append(list(decoded))
        return torch.full((2, 2, *SIZE, 3), 255, dtype=torch.uint8)

    groups = iter([[raws[0], raws[1]], [{"__error__": "lost"}, raws[2]], [None, None]])
    batches = stages.decode_batches(groups, SPEC, SIZE, on_error="skip", alloc=alloc,
                                    augment_at=lambda pos: decoded.append(pos))
    first = next(batches)
    assert taken == [[0]]
    for row, (_, images) in enumerate(made[:2]):
        for cam, name in enumerate(SPEC.cameras):
            assert np.array_equal(first.images[row, cam].permute(1, 2, 0).numpy(), images[name])
    rest = list(batches)
    assert taken == [[0], [0, 1], [0, 1, 3]]   # an error row 0 is not decoded
    assert rest[0].keys == ["", "k2"] and not rest[0].images[0].any()
    assert rest[0].images[1].any() and rest[0].errors == ["lost"]
    assert rest[1].valid.tolist() == [False, False] and not rest[1].images.any()
