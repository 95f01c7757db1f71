"""Extending carla-wds from outside the package (issue 25): a modality, a code dataset and a
YAML dataset, each registered from this test alone, are written by their own synth writer,
packed by `carla_wds.pack.pack`, verified by `carla-wds verify`'s function and loaded by
CARLAWebData; nothing else in the package changes, and the registries are as before after.

- a modality: one Codec subclass plus one `register_modality` row (a 4x4 uint8 grid, collated
  "fixed", landing in `batch.fields`, the one typed mapping);
- a code dataset: a `pack.datasets.Dataset` subclass (its `open` plans route folders into
  FrameTasks for the shared encoder), a synth writer and one `pack.datasets.register` line,
  plus its DatasetInfo (`carla_wds.datasets.register_dataset`: the label frame it defines);
- a YAML dataset: a layout YAML (here a file in tmp_path, registered under its name with
  `register(name, RoutesDataset(path), synth=writer)`; a path alone packs too) plus a writer.
Real folders, real PNG/npy/JSON files and real tar shards; nothing is mocked.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

import cv2
import numpy as np
import pytest
import torch

from carla_wds import CARLAWebData
from carla_wds.codecbase import Codec, Data, SchemaError
from carla_wds.codecs import codec_named
from carla_wds.datasets import DatasetInfo, Frame, canonical_frame, register_dataset
from carla_wds.extras import Extra
from carla_wds.modalities import CodecUse, Modality, register_modality
from carla_wds.pack import PackOptions, pack
from carla_wds.pack import datasets as pack_datasets
from carla_wds.pack import synth
from carla_wds.pack.audit import verify
from carla_wds.pack.datasets import Dataset, PackInput, RoutesDataset, SampleRule, register
from carla_wds.pack.frames import FrameEncoder
from carla_wds.pack.labels import frame_labels
from carla_wds.pack.routes import FrameTask, Reader, RoutePlan
from carla_wds.schema import SampleSpec, make_key
from tests.tables import restored_tables

GRID = (4, 4)          # the toy modality's fixed shape
PRED_LEN = 2
EPISODES, FRAMES = 2, 7
IMAGE = (24, 16)       # (width, height) of the toy cameras


class ToyGridCodec(Codec):
    """The toy modality's codec: a 4x4 uint8 grid as b"TG" and its 16 bytes."""
    name: ClassVar[str] = "toygrid"

    def encode(self, value: Any) -> bytes:
        arr = np.asarray(value, np.uint8)
        if arr.shape != GRID:
            raise ValueError(f"a toy grid is {GRID}, got {arr.shape}")
        return b"TG" + arr.tobytes()

    def decode(self, data: Data) -> np.ndarray:
        problem = self.check(data)
        if problem:
            raise ValueError(problem)
        return np.frombuffer(bytes(data)[2:], np.uint8).reshape(GRID).copy()

    def check(self, data: Data) -> str | None:
        data = bytes(data)
        ok = data[:2] == b"TG" and len(data) == 2 + GRID[0] * GRID[1]
        return None if ok else "not a toy grid; expected b'TG' and 16 bytes"


TOY_KIND = Modality("toygrid", "uint8", GRID, "cell id", collate="fixed", batch="fields",
                    codecs=(CodecUse("toygrid", "uint8", GRID, "cell id"),), doc="a test's kind")
# the code dataset's own label frame: (right, forward) as-is, origin 1 m ahead
TOY_INFO = DatasetInfo(name="toyset", layouts=("toyset",),
                       frames={"toyframe": Frame(((1.0, 0.0), (0.0, 1.0)), (0.0, 1.0))})


def toy_grid(episode: str, t: int) -> np.ndarray:
    """What the writer stores for frame t of an episode (the test's expected values)."""
    base = sum(map(ord, episode)) + 7 * t
    return ((np.arange(16) * 3 + base) % 251).astype(np.uint8).reshape(GRID)


def _poses(frames: int, seed: int) -> list[dict[str, float]]:
    """A straight drive with a little curvature, and a command per frame."""
    return [{"x": 2.0 * t, "y": 0.1 * t * t + seed, "theta": 0.05 * t, "speed": 4.0 + t,
             "command": 1 + (t % 6)} for t in range(frames)]


def _camera(folder: Path, t: int, seed: int) -> Path:
    w, h = IMAGE
    rgb = np.full((h, w, 3), (40 * t + seed) % 256, np.uint8)
    path = folder / "rgb" / f"{t:04d}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    cv2.imwrite(str(path), rgb)
    return path


def toy_writer(out_dir, layout="toyset", episodes=EPISODES, frames=FRAMES, seed=0,
               image_size=None, progress=False) -> list[Path]:
    """The code dataset's synth writer: per episode rgb/NNNN.png, grid/NNNN.tg (its native
    format, the toy codec's bytes) and one poses.json."""
    out = []
    for e in range(episodes):
        folder = Path(out_dir) / f"episode_{e:02d}"
        for t in range(frames):
            _camera(folder, t, seed + e)
            grid = folder / "grid" / f"{t:04d}.tg"
            grid.parent.mkdir(exist_ok=True)
            grid.write_bytes(ToyGridCodec().encode(toy_grid(folder.name, t)))
        (folder / "poses.json").write_text(json.dumps(_poses(frames, seed + e)))
        out.append(folder)
    return out


@dataclass(frozen=True)
class ToyLayoutInfo:
    """What the manifest says of a toy pack: its name, rate and sample rule."""
    name: str = "toyset"
    rate_hz: float = 2.0
    samples: SampleRule = field(default_factory=SampleRule)


class ToyDataset(Dataset):
    """--layout toyset: episode folders with a poses.json, planned frame by frame."""
    layouts = ("toyset",)

    def open(self, input_dir, opts) -> tuple[PackInput, Any]:
        opts = replace(opts, pred_len=opts.pred_len or PRED_LEN)
        extra = Extra("grid", "grid.toygrid", "toygrid", "toygrid", "uint8", GRID, "cell id")
        spec = SampleSpec(("front",), opts.pred_len, "png", extras=(extra,),
                          frames=(("target_point", "toyframe"), ("waypoints", "toyframe")))
        encoder = FrameEncoder(spec, "png", opts.quality, opts.resize, opts.check_images,
                               (Reader("grid", extra.member, "bytes", "toygrid"),))
        episodes = sorted(p.name for p in Path(input_dir).iterdir() if (p / "poses.json").is_file())
        return PackInput(ToyLayoutInfo(), spec, episodes,
                         lambda ep: plan_episode(Path(input_dir), ep, opts.pred_len),
                         encoder, None), opts


def plan_episode(root: Path, episode: str, pred_len: int) -> RoutePlan:
    """Every frame with a full future is a task; the last pred_len are the tail."""
    poses = json.loads((root / episode / "poses.json").read_text())
    plan = RoutePlan(episode, n_frames=len(poses), tail=pred_len)
    for t in range(len(poses) - pred_len):
        now = poses[t]
        xy = np.array([[p["x"], p["y"]] for p in poses[t:t + pred_len + 1]])
        labels = frame_labels(xy, now["theta"], xy[-1], now["command"], pred_len)
        labels.update(speed=now["speed"], meta={"episode": episode, "frame": t,
                                                 "command": now["command"]})
        plan.tasks.append(FrameTask(
            episode, t, make_key(episode, t), labels,
            {"front": str(root / episode / "rgb" / f"{t:04d}.png")},
            {"grid": str(root / episode / "grid" / f"{t:04d}.tg")}))
    return plan


TOY_YAML = """\
name: toyroutes
measurements: meas
cameras: {front: rgb}
fields: {x: x, y: y, theta: theta, speed: speed, target_x: tx, target_y: ty, command: command}
rate_hz: 2
frames: {waypoints: toyframe, target_point: toyframe}
sensors:
  lidar: {folder: lidar, ext: npy, codec: points}
  grid: {folder: grid, ext: tg, codec: toygrid}
"""


def toy_points(route: str, t: int) -> np.ndarray:
    """What the YAML dataset's writer stores as frame t's point cloud."""
    n = 3 + (t + len(route)) % 4
    return (np.arange(n * 4, dtype=np.float32).reshape(n, 4) + t).astype(np.float32)


def yaml_writer(out_dir, layout="toyroutes", episodes=EPISODES, frames=FRAMES, seed=0,
                image_size=None, progress=False) -> list[Path]:
    """The YAML dataset's synth writer: route folders of rgb/, lidar/ and meas/ files."""
    out = []
    for e, pose in enumerate([_poses(frames, seed + e) for e in range(episodes)]):
        folder = Path(out_dir) / f"route_{e:02d}"
        (folder / "meas").mkdir(parents=True)
        (folder / "lidar").mkdir()
        (folder / "grid").mkdir()
        for t, p in enumerate(pose):
            _camera(folder, t, seed + e)
            np.save(folder / "lidar" / f"{t:04d}.npy", toy_points(folder.name, t))
            (folder / "grid" / f"{t:04d}.tg").write_bytes(
                ToyGridCodec().encode(toy_grid(folder.name, t)))
            meas = {**p, "tx": p["x"] + 30.0, "ty": p["y"]}
            (folder / "meas" / f"{t:04d}.json").write_text(json.dumps(meas))
        out.append(folder)
    return out


@pytest.fixture
def toy_registries(tmp_path):
    """The toy kind, both toy datasets and their writers registered; every registry restored
    after the test (the pack registry and the writers too), so no other test sees them."""
    layout_file = tmp_path / "toyroutes.yaml"
    layout_file.write_text(TOY_YAML)
    packers = dict(pack_datasets._REGISTRY)
    writers = dict(synth._WRITERS)
    with restored_tables():
        try:
            register_modality(TOY_KIND, [ToyGridCodec()])
            register_dataset(TOY_INFO)
            register("toyset", ToyDataset(), synth=toy_writer)
            register("toyroutes", RoutesDataset(str(layout_file)), synth=yaml_writer)
            yield layout_file
        finally:
            for table, before in ((pack_datasets._REGISTRY, packers), (synth._WRITERS, writers)):
                table.clear()
                table.update(before)


def _load(out: Path, fields: list[str], workers: int = 0) -> list[Any]:
    return list(CARLAWebData(str(out), batch_size=4, mode="eval", image_size=(16, 24),
                             num_workers=workers, fields=fields))


def _served(batches: list[Any], name: str) -> dict[str, torch.Tensor]:
    """key -> the field's value, each valid sample's (a key twice fails)."""
    out: dict[str, torch.Tensor] = {}
    for batch in batches:
        for i, key in enumerate(batch.keys):
            if bool(batch.valid[i]):
                assert key not in out, f"{key} served twice"
                out[key] = batch.fields[name][i] if name in batch.fields else \
                    getattr(batch, name)[i][:int(batch.lidar_len[i])]
    return out


def test_a_toy_modality_and_code_dataset_pack_verify_and_load(toy_registries, tmp_path):
    raw, out = tmp_path / "raw", tmp_path / "pack"
    folders = synth.synth_dataset(raw, "toyset", episodes=EPISODES, frames=FRAMES,
                                  progress=False)
    assert [f.name for f in folders] == ["episode_00", "episode_01"]
    manifest = pack(raw, out, PackOptions.of(layout="toyset", max_samples=3, progress=False))
    expected = {make_key(f.name, t): toy_grid(f.name, t)
                for f in folders for t in range(FRAMES - PRED_LEN)}
    assert manifest["layout"] == "toyset" and manifest["total_samples"] == len(expected)
    assert manifest["members"]["grid.toygrid"] == "toygrid" and len(manifest["shards"]) > 1
    assert canonical_frame(manifest["spec"]["frames"]["waypoints"]) == "toyframe"
    assert verify(out, deep=True, progress=False) == []

    for workers in (0, 1):   # in this process, and in a loader worker (forked: registered)
        batches = _load(out, ["grid"], workers)
        for batch in batches:   # the one typed mapping, the table's dtype and shape
            grid = batch.fields["grid"]
            assert isinstance(grid, torch.Tensor) and grid.dtype == torch.uint8
            assert grid.shape == (len(batch.keys), *GRID)
        served = _served(batches, "grid")
        assert sorted(served) == sorted(expected)   # every key exactly once
        for key, value in served.items():
            np.testing.assert_array_equal(value.numpy(), expected[key], err_msg=key)


def test_a_toy_yaml_dataset_packs_by_its_registered_name_and_by_path(toy_registries, tmp_path):
    raw = tmp_path / "raw"
    folders = synth.synth_dataset(raw, "toyroutes", episodes=EPISODES, frames=FRAMES,
                                  progress=False)
    by_name = pack(raw, tmp_path / "named", PackOptions.of(layout="toyroutes", progress=False))
    by_path = pack(raw, tmp_path / "path", PackOptions.of(layout=str(toy_registries),
                                                         progress=False))
    pred_len = by_name["pred_len"]   # 2 s at 2 Hz
    expected = {make_key(f.name, t): toy_points(f.name, t)
                for f in folders for t in range(FRAMES - pred_len)}
    for manifest in (by_name, by_path):
        assert manifest["layout"] == "toyroutes" and manifest["total_samples"] == len(expected)
        assert manifest["spec"]["frames"]["waypoints"] == "toyframe"
    assert [s["sha256"] for s in by_name["shards"]] == [s["sha256"] for s in by_path["shards"]]
    assert verify(tmp_path / "named", deep=True, progress=False) == []
    batches = _load(tmp_path / "named", ["lidar", "grid"])
    served = _served(batches, "lidar")
    assert sorted(served) == sorted(expected)
    for key, value in served.items():
        assert value.dtype == torch.float32
        np.testing.assert_array_equal(value.numpy(), expected[key], err_msg=key)
    # the toy modality, registered from this test, is read from the YAML's sensor folder too
    grids = _served(batches, "grid")
    assert sorted(grids) == sorted(expected)
    written = {make_key(f.name, t): toy_grid(f.name, t) for f in folders
               for t in range(FRAMES - pred_len)}
    for key, value in grids.items():
        np.testing.assert_array_equal(value.numpy(), written[key], err_msg=key)


def test_the_registries_are_as_before_after_a_toy_test():
    from carla_wds.codecs import CODECS
    from carla_wds.datasets import DATASETS
    from carla_wds.modalities import MODALITIES
    assert "toygrid" not in MODALITIES and "toygrid" not in CODECS
    assert "toyset" not in DATASETS
    assert not {"toyset", "toyroutes"} & set(pack_datasets.builtin_layouts())
    assert not {"toyset", "toyroutes"} & set(synth.synth_layouts())
    with pytest.raises(ValueError, match="unknown layout 'toyset'"):
        synth.writer("toyset")
    with pytest.raises(SchemaError, match="no codec named 'toygrid'"):
        codec_named("toygrid")
