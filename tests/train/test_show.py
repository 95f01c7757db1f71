"""`carla-wds show --checkpoint X`: one-line errors in show's own words for every bad X, and
checkpoints read with weights_only=True (no pickle decoded)."""
from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from carla_wds import CARLAWebData

from carla_wds.train.checkpoint import save_checkpoint
from carla_wds.train.config import TrainConfig, to_dict
from carla_wds.train.model import ModelConfig, build_model
# fixtures:
from tests.pack.datasets.routes.test_layout_garage import packed_garage, raw_garage  # noqa: F401


def make_checkpoint(path: Path, n_cameras: int = 4, **config_edits) -> Path:
    """A checkpoint as the trainer writes it, of an untrained tiny model (no training needed)."""
    cfg = TrainConfig(model=ModelConfig(backbone="tiny", feature_dim=32))
    cfg.data.image_size = [32, 48]
    model = build_model(cfg.model, n_cameras, 4)
    config = to_dict(cfg)
    for dotted, value in config_edits.items():
        section, name = dotted.split("__")
        config[section][name] = value
    save_checkpoint(path, {"model": model.state_dict(), "config": config, "step": 3})
    return path


def show_error(cli, shards: Path, checkpoint: Path, tmp_path: Path) -> str:
    out = tmp_path / "x.png"
    result = cli("show", shards, "--checkpoint", checkpoint, "--out", out, "-n", "2")
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: --checkpoint {checkpoint}: "), lines
    assert "resume=" not in lines[0] and "Fix: " in lines[0], lines[0]
    assert not out.exists()
    return lines[0]


def test_good_checkpoint_draws_predictions(cli, packed_tf4, tmp_path):
    ckpt = make_checkpoint(tmp_path / "checkpoint.pt")
    result = cli("show", packed_tf4, "--checkpoint", ckpt, "--out", tmp_path / "x.png", "-n", "2")
    assert result.exit_code == 0, result.output
    assert cv2.imread(str(tmp_path / "x.png")) is not None


def test_missing_file(cli, packed_tf4, tmp_path):
    msg = show_error(cli, packed_tf4, tmp_path / "nope.pt", tmp_path)
    assert "no such file" in msg


def test_garbage_bytes(cli, packed_tf4, tmp_path):
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"definitely not a checkpoint\n" * 40)
    assert "not a checkpoint: not the zip archive torch.save writes" in \
        show_error(cli, packed_tf4, garbage, tmp_path)


def test_truncated_checkpoint(cli, packed_tf4, tmp_path):
    ckpt = make_checkpoint(tmp_path / "checkpoint.pt")
    ckpt.write_bytes(ckpt.read_bytes()[: ckpt.stat().st_size // 2])
    assert "not a checkpoint" in show_error(cli, packed_tf4, ckpt, tmp_path)


class _Canary:
    """Unpickling this would create a file: proof that a pickle was decoded."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (Path.touch, (Path(self.path),))


def test_pickled_objects_are_refused_never_unpickled(cli, packed_tf4, tmp_path):
    canary = tmp_path / "unpickled"
    ckpt = tmp_path / "evil.pt"
    torch.save({"model": {}, "config": {}, "step": 0, "x": _Canary(str(canary))}, ckpt)
    assert pickle.dumps(_Canary(str(canary)))   # the payload itself is a working pickle
    msg = show_error(cli, packed_tf4, ckpt, tmp_path)
    assert "holds pickled objects" in msg and "weights_only=True refused" in msg, msg
    assert "Unsupported global" in msg
    assert not canary.exists()


def test_torch_file_that_is_not_a_checkpoint(cli, packed_tf4, tmp_path):
    tensor = tmp_path / "tensor.pt"
    torch.save({"weights": torch.zeros(3)}, tensor)
    assert "not a carla-wds checkpoint: it has no 'model', 'config', 'step'" in \
        show_error(cli, packed_tf4, tensor, tmp_path)


def test_weights_that_do_not_match_the_config(cli, packed_tf4, tmp_path):
    ckpt = make_checkpoint(tmp_path / "checkpoint.pt", model__feature_dim=64)
    msg = show_error(cli, packed_tf4, ckpt, tmp_path)
    assert "weights do not match the model its config describes" in msg
    assert "model.feature_dim=64" in msg and "in the file" in msg, msg


def test_model_trained_on_other_cameras(cli, packed_tcp, tmp_path):
    ckpt = make_checkpoint(tmp_path / "checkpoint.pt")   # 4 cameras; the tcp pack has one
    msg = show_error(cli, packed_tcp, ckpt, tmp_path)
    assert "for 1 cameras" in msg and "fuse.0.weight" in msg, msg
    named = make_checkpoint(tmp_path / "named.pt", n_cameras=2, data__cameras=["front", "left"])
    msg = show_error(cli, packed_tcp, named, tmp_path)
    assert "trained on data.cameras ['front', 'left']" in msg and "left" in msg, msg


def test_stored_config_from_another_version(cli, packed_tf4, tmp_path):
    ckpt = make_checkpoint(tmp_path / "checkpoint.pt", optim__momentum=0.9)
    msg = show_error(cli, packed_tf4, ckpt, tmp_path)
    assert "stored config does not fit" in msg and "optim.momentum" in msg, msg
    bad = make_checkpoint(tmp_path / "bad.pt", data__image_size=[0, 0])
    assert "data.image_size=[0, 0] is invalid" in show_error(cli, packed_tf4, bad, tmp_path)


def test_real_cli_process_prints_one_line(packed_tf4, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "carla_wds.cli", "show", str(packed_tf4),
                           "--checkpoint", str(tmp_path / "nope.pt"), "--out",
                           str(tmp_path / "x.png")], capture_output=True, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == (f"Error: --checkpoint {tmp_path / 'nope.pt'}: no such file. "
                                   "Fix: pass --checkpoint the checkpoint.pt that `carla-wds "
                                   "train` wrote into its run_dir")


def test_resume_errors_keep_the_trainer_wording(packed_tf4, tmp_path):
    from carla_wds.train.checkpoint import CheckpointError
    from carla_wds.train.config import load_config
    from carla_wds.train.loop import run_training
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "checkpoint.pt").write_bytes(b"x" * 100)
    cfg = load_config(None, [f"run_dir={run_dir}", "model.backbone=tiny", "model.feature_dim=32",
                             f"data.train={packed_tf4}", f"data.val={packed_tf4}",
                             "data.batch_size=8", "data.num_workers=0", "data.image_size=[32,48]"])
    with pytest.raises(CheckpointError, match=r"not a checkpoint.*Fix: resume=PATH .*resume=none"
                                              r".*or move .*checkpoint.pt away"):
        run_training(cfg)
    assert sorted(p.name for p in run_dir.iterdir()) == [".lock", "checkpoint.pt", "config.json"]


def test_every_layout_drives_up_the_page(packed_tf4, packed_garage):  # noqa: F811
    """The bird's-eye rows are (right, forward) whatever frame the layout's labels use:
    garage's (forward, right) waypoints were drawn as TCP's (right, -forward), sideways."""
    from carla_wds.train.show import bev_rows
    for packed, forward in ((packed_tf4, lambda w: -w[..., 1]), (packed_garage,
                                                                lambda w: w[..., 0])):
        data = CARLAWebData(str(packed), batch_size=8, mode="eval", image_size=(32, 64))
        batch = next(iter(data))
        rows = bev_rows(batch, dict(data.spec.frames))
        moving = [(r, i) for i, r in enumerate(rows) if float(batch.speed[i]) > 1.0]
        assert moving, "the synthetic routes drive"
        for row, i in moving:
            np.testing.assert_allclose(row["waypoints"][:, 1], forward(batch.waypoints[i].numpy()),
                                       atol=1e-5)
            assert row["waypoints"][-1, 1] > 1.0   # ahead: up the page
            assert abs(row["waypoints"][-1, 0]) < row["waypoints"][-1, 1]   # not sideways


def test_a_checkpoints_sizes_are_bounded_before_show_builds_anything(cli, packed_tf4, tmp_path):
    """Issue 38 N7: image_size [30000, 30000] passed 3 GB in 7.5 s. 4097 is small enough to
    render, so the old code drew it: the bound, not the RAM, refuses it now."""
    wide = make_checkpoint(tmp_path / "wide.pt", data__image_size=[32, 4097])
    msg = show_error(cli, packed_tf4, wide, tmp_path)
    assert "data.image_size=[32, 4097] is invalid (item 4097: out of range)" in msg, msg
    assert "<= 4096" in msg, msg
    deep = make_checkpoint(tmp_path / "deep.pt", model__feature_dim=10 ** 8)
    assert "model.feature_dim=100000000 is invalid" in show_error(cli, packed_tf4, deep, tmp_path)


def test_show_opens_no_file_a_checkpoint_names_as_pretrained(packed_tf4, tmp_path, caplog):
    """Issue 38 Low 14: model.pretrained is ignored, with a note: the weights are in the
    checkpoint. The old code opened the named file (here: refused it as not found)."""
    from carla_wds.train.show import show
    cfg = TrainConfig(model=ModelConfig(backbone="resnet18", feature_dim=32))
    cfg.data.image_size = [32, 48]
    model = build_model(cfg.model, 4, 4)
    config = to_dict(cfg)
    named = tmp_path / "elsewhere" / "secret.pth"
    config["model"]["pretrained"] = str(named)
    save_checkpoint(tmp_path / "checkpoint.pt", {"model": model.state_dict(), "config": config,
                                                 "step": 3})
    caplog.set_level("INFO", logger="carla_wds.train.show")
    out = show(packed_tf4, tmp_path / "x.png", checkpoint=tmp_path / "checkpoint.pt", n=2)
    assert cv2.imread(str(out)) is not None
    notes = [r.getMessage() for r in caplog.records if "model.pretrained is ignored" in r.getMessage()]
    assert len(notes) == 1 and "show opens no file a checkpoint names" in notes[0], notes
    assert str(named) not in notes[0]


def test_show_spreads_its_samples_over_the_packs_routes(cli, packed_tf4, tmp_path, monkeypatch):
    """show draws view's stratified choice (view/scan.py choose), not the first n samples of
    one route."""
    import carla_wds.train.viz as viz
    from carla_wds.manifest import read_manifest
    from carla_wds.view.scan import choose, scan
    drawn, real = [], viz.montage
    monkeypatch.setattr(viz, "montage", lambda rows, *a, **kw: drawn.append(rows) or
                        real(rows, *a, **kw))
    result = cli("show", packed_tf4, "--out", tmp_path / "x.png", "-n", "6")
    assert result.exit_code == 0, result.output
    rows = scan(read_manifest(str(packed_tf4)))
    route_of = {r.key: r.route for r in rows}
    keys = [row["key"] for row in drawn[0]]
    assert keys == [r.key for r in choose(rows, 6)]
    assert len(set(route_of.values())) >= 3
    assert {route_of[k] for k in keys} == set(route_of.values())   # every route, not one
    assert cv2.imread(str(tmp_path / "x.png")) is not None


def test_show_of_a_history_model_takes_the_loaders_windows(packed_tf4):
    """A model with data.history needs each sample's earlier frames: the loader's own pass."""
    from carla_wds.view.pick import spread_batch
    data = CARLAWebData(str(packed_tf4), batch_size=3, mode="eval", image_size=(32, 48), rank=0,
                        world_size=1, history=1)
    got = spread_batch(data, 3)
    assert got.keys == next(iter(data)).keys and got.images.shape[:2] == (3, 2)


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_a_chosen_sample_that_does_not_decode(packed_tf4, tmp_path, on_error):
    """on_error=raise: one error naming the sample; skip: the sample is left out."""
    import shutil

    from carla_wds.train.show import ShowError
    from carla_wds.view.pick import spread_batch
    from tests.shardedit import rewrite_member
    pack = tmp_path / "pack"
    shutil.copytree(packed_tf4, pack)
    key = rewrite_member(pack, ".front.png", lambda b: b[:40])   # a truncated PNG
    data = CARLAWebData(str(pack), batch_size=100, mode="eval", image_size=(32, 48), rank=0,
                        world_size=1, on_error=on_error)
    if on_error == "raise":
        shard = (pack / json.loads((pack / "manifest.json").read_text())["shards"][0]["name"])
        with pytest.raises(ShowError, match=f"^shard {shard} sample '{key}': .*Fix: run "
                           "`carla-wds verify --deep"):
            spread_batch(data, 100)   # every sample: the bad one among them
    else:
        batch = spread_batch(data, 100)
        assert key not in [k for k, ok in zip(batch.keys, batch.valid) if ok]
        assert int(batch.valid.sum()) == len(batch) - 1
