"""Their side of tools/bench_adapters.py: each codebase's own loader and preprocessing, built
from a checkout at the pinned commit (--repo-dir NAME=PATH), and the raw routes both sides read.

Their code is never copied here: it is imported at run time through tools/golden's machinery
(git blob ids checked against the pinned commit, run-time shims only). The ENTRIES of
tools/bench_adapters.py name these functions as "bench_adapters_theirs:NAME".
"""
from __future__ import annotations

import gzip
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any, Callable

# the file their tools/gen_tcp_data.py gen_sub_folder saves into its working folder
B2D_TCP_NPY = "tcp_bench2drive-train.npy"


def warm(repo_dir: Path, raw: Path) -> None:
    """Read every raw file once, so that both sides start from a warm page cache."""
    for path in sorted(raw.rglob("*")):
        if path.is_file():
            path.read_bytes()


def tcp_prepare(repo_dir: Path, raw: Path) -> None:
    """TCP's tools/gen_data.py on every town folder (writes packed_data.npy, as their README
    says), through tools/golden/tcp.py (pinned blobs checked); its pass over every index also
    reads each PNG once, so both sides start from a warm page cache."""
    from tools.golden import tcp
    tcp.run(repo_dir, raw)


def tcp_loader(repo_dir: Path) -> Callable[[Path, bool], Any]:
    """TCP/data.py CARLA_Data at 73cc1dd, imported from repo_dir (tools/golden/tcp.py)."""
    from tools.golden import common, tcp
    common.check_pinned(repo_dir, tcp.BLOBS, tcp.COMMIT)
    sys.path.insert(0, str(repo_dir))
    from TCP.data import CARLA_Data   # noqa: E402 - theirs, from repo_dir

    def build(raw: Path, augment: bool) -> Any:
        towns = sorted(p for p in raw.iterdir() if p.is_dir())
        return CARLA_Data(root=str(raw), data_folders=[str(t) for t in towns], img_aug=augment)
    return build


def garage_loader(repo_dir: Path) -> Callable[[Path, bool], Any]:
    """carla_garage team_code/data.py CARLA_Data at 1448bed, built as tools/golden/
    garage_batches.py builds it: GlobalConfig().initialize(root, setting='all', augment=0,
    use_color_aug=0, use_wp_gru=True); augment: their camera twin and colour augmentation on."""
    from tools.golden import common, garage, garage_batches
    common.check_pinned(repo_dir, garage.BLOBS, garage.COMMIT)
    common.stub_attr_module("carla")   # the shims _their_loader applies, and their imports
    common.numpy2_aliases()            # (untimed; it repeats them, then at no cost)
    sys.path.insert(0, str(repo_dir / "team_code"))
    import config, data  # noqa: E401, F401 - theirs, from repo_dir
    on = {**garage.SETTINGS, "augment": 1, "use_color_aug": 1}
    return lambda raw, augment: garage_batches._their_loader(
        repo_dir, raw, on if augment else garage.SETTINGS)[0]


def tf2022_loader(repo_dir: Path) -> Callable[[Path, bool], Any]:
    """transfuser team_code_transfuser/data.py CARLA_Data at 22b3ccd, built as tools/golden/
    tf2022.py builds it: GlobalConfig(root, setting='all', augment=False)."""
    from tools.golden import common, tf2022
    common.check_pinned(repo_dir, tf2022.BLOBS, tf2022.COMMIT)
    common.numpy2_aliases()
    sys.path.insert(0, str(repo_dir / "team_code_transfuser"))
    import config, data  # noqa: E401, F401 - theirs, from repo_dir (untimed)

    def build(raw: Path, augment: bool) -> Any:
        if augment:
            raise SystemExit("transfuser2022: --augment is not wired (their rotation draws "
                             "come from the module's random; see tools/golden/tf2022.py)")
        return tf2022._their_data(repo_dir, raw)
    return build


def _null_speed(clip: Path) -> list[str]:
    """The anno files of a clip folder whose `speed` is null (JSON null: Python None)."""
    found = []
    for anno in sorted((clip / "anno").glob("*.json.gz")):
        with gzip.open(anno, "rt", encoding="utf-8") as f:
            if json.load(f).get("speed", 0.0) is None:
                found.append(anno.name)
    return found


def b2d_tcp_routes(raw: Path) -> Path:
    """The clip folders both sides read (raw/v1), returned for `pack`. The synth writes a
    `speed: null` frame into some clips (a quirk of the real files): the port's
    CARLA_Data.__getitem__ returns it as None, which their default collate cannot batch, so
    those clips are removed here, before either side reads anything; both sides then read
    the same unmodified files. The synth's .tar.gz copies of the clips are removed too:
    neither side reads them (pack reads the folders, their loader the folders' paths)."""
    shutil.rmtree(raw / "archives", ignore_errors=True)
    v1 = raw / "v1"
    for clip in sorted(p for p in v1.iterdir() if p.is_dir()):
        nulls = _null_speed(clip)
        if nulls:
            print(f"b2d_tcp: clip {clip.name} removed: `speed: null` in anno/{nulls[0]}, which "
                  "their default collate cannot take", file=sys.stderr)
            shutil.rmtree(clip)
    return v1


def b2d_tcp_prepare(repo_dir: Path, raw: Path) -> None:
    """Their tools/gen_tcp_data.py, as tools/golden/b2d_tcp.py runs it (pinned blobs checked),
    on every run:
    gen_single_route on each clip folder under raw/v1, then gen_sub_folder, which saves
    tcp_bench2drive-train.npy into the working folder (raw here); their CARLA_Data loads that
    file (timed, as TCP's packed_data.npy). Then every raw file is read once (warm)."""
    from tools.golden import b2d_tcp
    gen, routes = b2d_tcp.clip_routes(repo_dir, raw)
    cwd = os.getcwd()
    os.chdir(raw)
    try:
        gen.gen_sub_folder(routes)
    finally:
        os.chdir(cwd)
    warm(repo_dir, raw)


def b2d_tcp_loader(repo_dir: Path) -> Callable[[Path, bool], Any]:
    """Bench2DriveZoo's TCP port (tcp/admlp, 31278ff) TCP/data.py CARLA_Data(root, data_path,
    img_aug), imported from repo_dir, over the .npy b2d_tcp_prepare saved in raw."""
    from tools.golden import b2d_tcp, common
    common.check_pinned(repo_dir, b2d_tcp.BLOBS, b2d_tcp.COMMIT)
    sys.path.insert(0, str(repo_dir))
    from TCP.data import CARLA_Data   # noqa: E402 - theirs, from repo_dir (untimed)
    return lambda raw, augment: CARLA_Data(root=str(raw), data_path=str(raw / B2D_TCP_NPY),
                                           img_aug=augment)


def simlingo_loader(repo_dir: Path) -> Callable[[Path, bool], Any]:
    """SimLingo simlingo_training/dataloader/dataset_driving.py Data_Driving at eb2b89a, built
    as tools/golden/simlingo.py builds it (its SETTINGS: the frame's own camera, no commentary,
    no colour augmentation; carla, shapely, imgaug and hydra's get_original_cwd shimmed, a work
    folder holding the routes as `database/`); augment: the camera twin at
    img_shift_augmentation_prob 0.5, as adapter="simlingo" with augment=True. Torch's default
    collate batches its DatasetOutput records (their own dl_collate_fn needs a tokenizer)."""
    import tempfile
    from tools.golden import common, simlingo
    from tools.golden.garage_lb2 import _stubs
    common.check_pinned(repo_dir, simlingo.BLOBS, simlingo.COMMIT)
    common.numpy2_aliases()
    work = Path(tempfile.mkdtemp(prefix="bench_simlingo_"))
    (work / "data").mkdir()
    (work / "data" / "augmented_templates").symlink_to(repo_dir / "data" /
                                                         "augmented_templates")
    _stubs(work)
    sys.path.insert(0, str(repo_dir))
    from simlingo_training.dataloader.dataset_driving import Data_Driving  # noqa: E402 (untimed)

    def build(raw: Path, augment: bool) -> Any:
        (work / "database").symlink_to(raw)
        twin = {"img_shift_augmentation": True} if augment else {}
        return Data_Driving(**{**simlingo.SETTINGS, **twin})
    return build


def lead_loader(repo_dir: Path) -> Callable[[Path, bool], Any]:
    """LEAD lead/data_loader/carla_dataset.py CARLAData at 44891760, built as tools/golden/
    lead_batches.py builds it: TrainingConfig over a carla_leaderboard2 root (their target
    dataset is read from that name) with adapter="lead"'s CONFIG, its run-time shims (carla and
    RoadOption stubbed, np.string_); their box code runs as it is (detect_boxes on: both
    halves build the box and CenterNet targets). random=True (their training order). Without augment
    their sensor perturbation is off (use_sensor_perburtation) and their colour augmenter the
    identity; with it, both on at their probabilities."""
    import tempfile
    from tools.golden import common, lead, lead_batches
    common.check_pinned(repo_dir, lead_batches.BLOBS, lead.COMMIT)
    sys.path.insert(0, str(repo_dir))
    lead._stubs()
    import numpy as np
    if not hasattr(np, "string_"):
        np.string_ = np.bytes_
    from lead.data_loader.carla_dataset import CARLAData  # noqa: E402 - theirs (untimed)
    from lead.training.config_training import TrainingConfig  # noqa: E402

    def build(raw: Path, augment: bool) -> Any:
        root = Path(tempfile.mkdtemp(prefix="bench_lead_")) / "carla_leaderboard2"
        root.mkdir()
        (root / "data").symlink_to(raw)
        config = TrainingConfig({"carla_root": str(root), **lead_batches.CONFIG,
                                 "use_sensor_perburtation": augment})
        dataset = CARLAData(root=str(root / "data"), config=config, random=True)
        if not augment:
            dataset.image_augmenter_func = lambda image: image
        return dataset
    return build


def lead_collate(repo_dir: Path) -> Callable[[list], Any]:
    """Their collate: lead/training/mixed_training_utils.py mixed_data_collate_fn (their
    training DataLoader's, training_utils.py l.335-345)."""
    sys.path.insert(0, str(repo_dir))
    from lead.training.mixed_training_utils import mixed_data_collate_fn  # noqa: E402
    return mixed_data_collate_fn
