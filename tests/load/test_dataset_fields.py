"""The loader's exactness guarantees over a multi-modal garage pack with fields=[...] selected
and the camera twin on: exact len() and equal batch counts per rank for any world size and
worker count, eval covering every sample once, identical batches after a mid-epoch resume
(fields and twin choice included), padding masked by *_len, and the same on two DDP ranks
(forked by tests/ranks.py). The garage pack (tests/pack/datasets/routes/test_layout_garage.py)
holds 30 samples in shards of 7, 7, 7, 7, 2.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from carla_wds import CARLAWebData
# every frame with a full future: short garage routes hold none of garage's own range
from tests.conftest import run_pack_all_frames as run_pack
from tests.helpers import all_keys
from tests.ranks import run_script
# fixtures:
from tests.pack.datasets.routes.test_layout_garage import packed_garage, raw_garage  # noqa: F401

SIZE = (24, 32)
ALL = ["depth", "semantics", "bev", "lidar", "boxes", "measurements"]
KW = dict(image_size=SIZE, fields=ALL, twin_p=0.5, seed=7)


def per_sample(batch, i: int) -> dict[str, np.ndarray]:
    """Sample i of a batch, its padded rows cut at their *_len counts."""
    n_pts, n_box = int(batch.lidar_len[i]), int(batch.boxes_len[i])
    return {"lidar": batch.lidar[i, :n_pts].numpy(), "boxes": batch.boxes[i, :n_box].numpy(),
            "route": batch.route[i].numpy(), "camera_set": batch.camera_set[i].numpy(),
            "target_point": batch.target_point[i].numpy(), "depth": batch.depth[i].numpy(),
            "bev": batch.bev[i].numpy(), "speed": batch.measurements["speed"][i].numpy()}


def check_masked(batch) -> None:
    """Rows past each sample's *_len are zero, and padding samples hold nothing."""
    for i in range(len(batch)):
        assert not batch.lidar[i, int(batch.lidar_len[i]):].any()
        assert not batch.boxes[i, int(batch.boxes_len[i]):].any()
        if not batch.valid[i]:
            assert batch.lidar_len[i] == 0 and batch.boxes_len[i] == 0 and batch.keys[i] == ""
            assert not batch.depth[i].any() and not batch.route[i].any()


@pytest.fixture(scope="module")
def reference(packed_garage):  # noqa: F811
    """key -> the sample's fields, from one rank without workers (every sample: 30 % 3 == 0)."""
    out = {}
    for b in CARLAWebData(str(packed_garage), batch_size=3, **KW):
        out.update({k: per_sample(b, i) for i, k in enumerate(b.keys)})
    return out


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("world,workers", [(1, 2), (2, 0), (2, 3), (3, 1), (4, 2)])
def test_train_exact_counts_and_the_same_fields_per_key(packed_garage, reference,  # noqa: F811
                                                       world, workers):
    batch_size, keys, lengths = 3, [], []
    for rank in range(world):
        data = CARLAWebData(str(packed_garage), batch_size=batch_size, num_workers=workers,
                            rank=rank, world_size=world, **KW)
        batches = list(data)
        lengths.append((len(batches), len(data)))
        for b in batches:
            assert b.valid.all() and b.lidar.shape[0] == b.camera_set.shape[0] == batch_size
            check_masked(b)
            for i, k in enumerate(b.keys):
                assert same(per_sample(b, i), reference[k]), k
            keys += b.keys
    assert len({n for pair in lengths for n in pair}) == 1, lengths
    assert len(keys) == len(set(keys))
    assert len(reference) - len(keys) == len(reference) % (world * batch_size)


@pytest.mark.parametrize("world,batch_size,workers", [(1, 4, 0), (3, 2, 2), (7, 2, 2)])
def test_eval_every_sample_once_padding_masked(packed_garage, reference, world,  # noqa: F811
                                               batch_size, workers):
    """(7, 2, 2): rank 0's second worker holds no real sample, so one of its batches is all
    padding; it still carries every selected field, zero and masked."""
    keys, counts = [], set()
    for rank in range(world):
        batches = list(CARLAWebData(str(packed_garage), batch_size=batch_size, mode="eval",
                                    num_workers=workers, rank=rank, world_size=world, **KW))
        counts.add(len(batches))
        for b in batches:
            assert b.lidar is not None and b.measurements is not None and b.bev is not None
            check_masked(b)
            assert not b.camera_set.any()    # eval: never the twin
            for i in np.flatnonzero(b.valid.numpy()):
                want = {**reference[b.keys[i]], "camera_set": np.int8(0)}
                if reference[b.keys[i]]["camera_set"] == 0:   # the unmoved set: all equal
                    assert same(per_sample(b, i), want)
                keys.append(b.keys[i])
    assert len(counts) == 1
    assert sorted(keys) == sorted(all_keys(packed_garage))


@pytest.mark.parametrize("workers,k", [(0, 2), (2, 1), (2, 3)])
def test_resume_gives_identical_batches_with_fields(packed_garage, workers, k):  # noqa: F811
    kw = dict(batch_size=3, num_workers=workers, augment=True, rank=1, world_size=2, **KW)
    full = CARLAWebData(str(packed_garage), **kw)
    full.set_epoch(3)
    want = list(full)
    first = CARLAWebData(str(packed_garage), **kw)
    first.set_epoch(3)
    it = iter(first)
    for _ in range(k):
        next(it)
    state = first.state_dict()
    resumed = CARLAWebData(str(packed_garage), **kw)
    resumed.load_state_dict(state)
    resumed.set_epoch(3)
    got = list(resumed)
    assert len(got) == len(want) - k
    for a, b in zip(got, want[k:]):
        assert a.keys == b.keys and torch.equal(a.images, b.images)
        for name in ("camera_set", "lidar", "lidar_len", "boxes", "boxes_len", "depth",
                     "semantics", "bev", "route", "waypoints", "target_point"):
            assert torch.equal(getattr(a, name), getattr(b, name)), name
        assert all(torch.equal(a.measurements[n], b.measurements[n]) for n in b.measurements)
    assert any(b.camera_set.any() for b in want) and any(not b.camera_set.all() for b in want)


RANK_SCRIPT = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    import torch.distributed as tdist
    from carla_wds import CARLAWebData

    shards, out = sys.argv[1], Path(sys.argv[2])
    tdist.init_process_group("gloo")
    kw = dict(image_size=(24, 32), fields={fields!r}, twin_p=0.5, seed=7)
    train = CARLAWebData(shards, batch_size=3, num_workers=1, **kw)
    val = CARLAWebData(shards, batch_size=4, mode="eval", num_workers=1, **kw)
    rows = [[b.keys, b.camera_set.tolist(), b.lidar_len.tolist(), b.boxes_len.tolist()]
            for b in train]
    ev = [k for b in val for k, v in zip(b.keys, b.valid.tolist()) if v]
    tdist.barrier()
    (out / f"rank{{tdist.get_rank()}}.json").write_text(json.dumps(
        {{"len": len(train), "train": rows, "eval": ev, "eval_len": len(val)}}))
    tdist.barrier()
    tdist.destroy_process_group()
""")


@pytest.mark.ddp
def test_torchrun_ranks_match_the_simulated_ones(packed_garage, tmp_path):  # noqa: F811
    script = tmp_path / "ranks.py"
    script.write_text(RANK_SCRIPT.format(fields=ALL))
    run_script(str(script), str(packed_garage), str(tmp_path))
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for r, got in enumerate(ranks):
        sim = CARLAWebData(str(packed_garage), batch_size=3, num_workers=1, rank=r,
                           world_size=2, **KW)
        assert got["len"] == len(sim) == len(got["train"])
        assert got["train"] == [[b.keys, b.camera_set.tolist(), b.lidar_len.tolist(),
                                 b.boxes_len.tolist()] for b in sim]
    assert ranks[0]["eval_len"] == ranks[1]["eval_len"]
    assert sorted(ranks[0]["eval"] + ranks[1]["eval"]) == sorted(all_keys(packed_garage))


@pytest.fixture(scope="module")
def packed_laz(raw_garage, tmp_path_factory) -> Path:  # noqa: F811
    """The garage pack with its LiDAR kept as the source LAZ bytes (codec laz), decoded by
    the loader: a layout YAML of one's own, as the README describes."""
    from carla_wds.pack.datasets.routes import layouts
    text = (Path(layouts.__file__).parent / "layouts" / "garage.yaml").read_text()
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("lidar:")]
    at = lines.index("sensors:") + 1
    lines.insert(at, "  lidar: {folder: lidar, ext: laz, codec: laz}")
    yaml = tmp_path_factory.mktemp("layout") / "garage_laz.yaml"
    yaml.write_text("\n".join(lines) + "\n")
    out = tmp_path_factory.mktemp("packed_laz") / "shards"
    run_pack(raw_garage, out, layout=str(yaml), max_samples=7)
    assert json.loads((out / "manifest.json").read_text())["members"]["lidar.laz"] == "laz"
    return out


def test_workers_after_a_main_process_laz_decode(packed_laz):
    """A pass without workers decodes LAZ in the main process; the DataLoader workers forked
    for the next pass must not inherit a dead decoder thread pool (lazrs' parallel reader
    deadlocked them). Run in a child process, so a hang fails the test instead of the suite."""
    code = textwrap.dedent(f"""
        from carla_wds import CARLAWebData
        for workers in (0, 2):
            data = CARLAWebData({str(packed_laz)!r}, batch_size=4, mode="eval",
                                num_workers=workers, image_size=(24, 32), fields=["lidar"])
            print(sum(int(b.valid.sum()) for b in data), flush=True)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["30", "30"]


def test_a_value_of_the_record_asked_as_a_field_names_the_field_to_select(packed_garage):  # noqa: F811
    """fields=["steer"] (a value of the measurements record, as TCP's action_mu is) says which
    field to select and where the value lands, instead of only listing the fields."""
    with pytest.raises(ValueError) as exc:
        CARLAWebData(str(packed_garage), batch_size=2, fields=["steer", "nothing"])
    msg = str(exc.value)
    assert "'steer' is a value of 'measurements'" in msg
    assert "fields=['measurements']" in msg and "batch.measurements['steer']" in msg
    assert "'nothing'" in msg and "'nothing' is a value" not in msg
