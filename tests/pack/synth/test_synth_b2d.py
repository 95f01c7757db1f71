"""synth --layout bench2drive: the real clip structure, archives holding the same files out of
frame order, consistent calibration (a car's box projects onto its pixels), determinism."""
from __future__ import annotations

import gzip
import hashlib
import json
import tarfile
from pathlib import Path

import cv2
import numpy as np
import pytest

from carla_wds.calib import project
from carla_wds.pack.synth import synth_dataset
from carla_wds.pack.synth.bench2drive import clip_name

CAMS = ("front", "front_left", "front_right", "back", "back_left", "back_right")


@pytest.fixture(scope="module")
def clips(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("synth_b2d")
    synth_dataset(out, "bench2drive", episodes=2, frames=12, seed=1, image_size=(180, 320),
                  progress=False)
    return out


def test_the_clip_structure(clips):
    clip = clips / "v1" / clip_name(0)
    names = {p.relative_to(clip).as_posix() for p in clip.rglob("*") if p.is_file()}
    for t in range(12):
        n = f"{t:05d}"
        assert {f"anno/{n}.json.gz", f"lidar/{n}.laz", f"radar/{n}.h5",
                f"expert_assessment/{t - 1:05d}.npz"} <= names
        for cam in CAMS:
            assert {f"camera/{k}_{cam}/{n}.{'jpg' if k == 'rgb' else 'png'}"
                    for k in ("rgb", "depth", "semantic", "instance")} <= names
    assert "expert_assessment/-0001.npz" in names
    img = cv2.imread(str(clip / "camera" / "rgb_back" / "00003.jpg"))
    assert img.shape == (180, 320, 3)
    split = json.loads((clips / "bench2drive_base_train_val_split.json").read_text())
    assert split == {"val": [f"v1/{clip_name(1)}"]}


def test_archives_hold_the_same_files_out_of_frame_order(clips):
    clip = clips / "v1" / clip_name(1)
    with tarfile.open(clips / "archives" / f"{clip_name(1)}.tar.gz") as tar:
        members = [m for m in tar.getmembers() if m.isfile()]
        for m in members[:40]:
            assert tar.extractfile(m).read() == (clips / "v1" / m.name).read_bytes()
    names = [m.name for m in members]
    assert sorted(names) == sorted(f"{clip_name(1)}/{p.relative_to(clip).as_posix()}"
                                   for p in clip.rglob("*") if p.is_file())
    frames = [n for n in names if "/anno/" in n]
    assert frames != sorted(frames)


def test_a_car_box_projects_onto_its_pixels(clips):
    clip = clips / "v1" / clip_name(0)
    hits = 0
    for t in range(0, 12, 3):
        anno = json.loads(gzip.decompress((clip / "anno" / f"{t:05d}.json.gz").read_bytes()))
        world2ego = np.array(anno["bounding_boxes"][0]["world2ego"])
        sem = cv2.imread(str(clip / "camera" / "semantic_front" / f"{t:05d}.png"), -1)
        cam = anno["sensors"]["CAM_FRONT"]
        for box in anno["bounding_boxes"][1:]:
            if box.get("state") != "dynamic":
                continue   # only the moving cars are drawn; test_b2d_parity.py has the others
            corners = np.c_[np.array(box["world_cord"]), np.ones(8)]
            ego = (world2ego @ corners.T).T[:, :3]
            uvz = project(ego, np.array(cam["intrinsic"]), np.array(cam["cam2ego"]))
            if (uvz[:, 2] < 1).any():
                continue
            u, v = uvz[:, :2].mean(axis=0)   # inside the convex hull of the corners
            if 0 <= u < 320 and 0 <= v < 180:
                assert sem[int(v), int(u)] == 14   # CARLA 0.9.15 Car
                hits += 1
    assert hits > 0


def test_byte_identical_for_the_same_arguments(clips, tmp_path):
    synth_dataset(tmp_path, "bench2drive", episodes=2, frames=12, seed=1, image_size=(180, 320),
                  progress=False)

    def digest(root: Path) -> dict[str, str]:
        return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
                for p in sorted(root.rglob("*")) if p.is_file()}
    assert digest(tmp_path) == digest(clips)
    with pytest.raises(FileExistsError):
        synth_dataset(tmp_path, "bench2drive", episodes=1, frames=2, seed=1,
                      image_size=(36, 64), progress=False)
