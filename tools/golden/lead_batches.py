"""Golden for adapter="lead": LEAD's OWN CARLAData (kesai-labs/lead@44891760) with the sensors
loaded, each sample through their mixed_data_collate_fn as a batch of one, under the config
the adapter serves (carla_wds/load/adapters/lead.py CONFIG), on synthetic LEAD routes.

Run as tools/golden/lead.py says (the same export of their files):

    /tmp/golden_venv/bin/python -m tools.golden.lead_batches --repo-dir /tmp/golden_src/lead

Run-time shims (never edits of their files), each because the data path cannot run without it:
- lead.py's stubs of `carla` and the leaderboard's RoadOption, and numpy 2's np.string_;
- none on the box code: get_bbox_labels and get_centernet_labels run as they are
  (detect_boxes is on, their default), on the synth's boxes (which carry the fields their
  expert writes: brake, transfuser_semantics_id, visible_pixels, ...); nor on the BEV
  semantic target (use_bev_semantic on): their hdmap converter, cut and build_bev_occupancy
  run on the synth's hdmap/ maps (ChauffeurNet ids at 2 px/m, as their expert saves them);
- the colour augmenter is the identity (use_color_aug is always on in training; the adapter
  draws it only with augment=True);
- np.random.random is 1.0 in the first pass (own sensors) and 0.0 in the second (the
  perturbated twin for every sample).

Writes tests/golden/lead_batches.json: per sample (route, frame) and pass, every key of their
collated batch with its kind (type, dtype, shape) and value (numbers float32-rounded, rgb and
rasterized_lidar, semantic and bev_semantic as the first 32 hex digits of the sha256 of
their bytes, hdmap as {"same_as": "bev_semantic"} where it is that array, radar1..radar4 as
{"rows_of": ["radar", start, stop]} where they are its rows, radar as a digest; the timing
keys kind only; a key's kind in `kinds` (per pass) where every sample's is the same).
"""
from __future__ import annotations

import argparse
import hashlib
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from carla_wds.load.adapters.lead import CONFIG as ADAPTER_CONFIG

from . import common
from .lead import BLOBS as LABEL_BLOBS
from .lead import COMMIT, _stubs

BLOBS = {**LABEL_BLOBS,
         "lead/training/mixed_training_utils.py": "7ce6492b747e7aaca4ad385b70eb897555e9be0c",
         "lead/common/constants.py": "f756831e9d788bf5c061dbf23db2fe0ebe109749"}
SYNTH = {"layout": "lead", "episodes": 3, "frames": 20, "seed": 3, "image_size": [384, 384]}
CONFIG = {**ADAPTER_CONFIG, "use_persistent_cache": False, "force_rebuild_bucket": True}
DIGESTS = ("rgb", "rasterized_lidar", "semantic", "center_net_heatmap", "bev_semantic",
           "radar")
DIGEST_CHARS = 32   # a sha256's first 128 bits: the file stays under 200 KB
# their hdmap key is the bev_semantic array itself (one array under both keys)
SAME = {"hdmap": "bev_semantic"}
# their radar1..radar4 are the radar array's rows, 75 a sensor
ROWS_OF = {f"radar{k}": ("radar", 75 * (k - 1), 75 * k) for k in range(1, 5)}
# CenterNet target maps, mostly zeros: recorded sparse (nonzero indices and their values)
SPARSE = ("center_net_bounding_boxes", "center_net_wh", "center_net_yaw_class",
          "center_net_yaw_res", "center_net_offset", "center_net_velocity", "center_net_brake",
          "center_net_pixel_weight", "radar_detections")
KIND_ONLY = ("loading_meta_time", "loading_time", "loading_sensor_time", "index",
             "global_index", "bucket_identity")
OUT = Path(__file__).resolve().parents[2] / "tests" / "golden" / "lead_batches.json"


def kind(value: Any) -> list:
    """[type, dtype, shape] of a collated value (their batch of one)."""
    if hasattr(value, "dtype") and hasattr(value, "shape"):
        return [type(value).__name__, str(value.dtype).replace("torch.", ""),
                list(value.shape)]
    return [type(value).__name__]


def value(name: str, v: Any) -> Any:
    """The recorded value of one collated key."""
    if name in DIGESTS:
        return hashlib.sha256(v.numpy().tobytes()).hexdigest()[:DIGEST_CHARS]
    if name in SPARSE:
        a = v.numpy()
        where = np.nonzero(a)
        return {"nonzero": [i.tolist() for i in where],
                "values": a[where].tolist() if a.dtype.kind in "biu" else common.f32(a[where])}
    if hasattr(v, "numpy"):
        a = v.numpy()
        return a.tolist() if a.dtype.kind in "biu" else common.f32(a)
    return v


def recorded(name: str, v: Any, batch: dict) -> dict:
    """{"value": ...}, nothing for a timing key, {"same_as": key} for a key whose array is
    another key's, bit for bit."""
    if name in KIND_ONLY:
        return {}
    other = SAME.get(name)
    if other is not None and bool((v == batch[other]).all()):
        return {"same_as": other}
    if name in ROWS_OF:
        whole, start, stop = ROWS_OF[name]
        if bool((v == batch[whole][:, start:stop]).all()):
            return {"rows_of": [whole, start, stop]}
    return {"value": value(name, v)}


def hoist_kinds(samples: list[dict]) -> dict:
    """Each pass's kinds, where every sample's is the same, moved out of the samples:
    {pass: {key: kind}} (the file stays under 200 KB)."""
    kinds: dict = {}
    for which in ("own", "twin"):
        keys = set.intersection(*(set(t[which]) for t in samples))
        common = {k: samples[0][which][k]["kind"] for k in sorted(keys)
                  if all(t[which][k]["kind"] == samples[0][which][k]["kind"] for t in samples)}
        for t in samples:
            for k in common:
                del t[which][k]["kind"]
        kinds[which] = common
    return kinds


def run(repo_dir: Path, data: Path) -> list[dict]:
    """Their loader's samples in its order, each pass's collated keys."""
    sys.path.insert(0, str(repo_dir))
    _stubs()
    import numpy as np
    if not hasattr(np, "string_"):
        np.string_ = np.bytes_
    from lead.data_loader.carla_dataset import CARLAData
    from lead.training.config_training import TrainingConfig
    from lead.training.mixed_training_utils import mixed_data_collate_fn
    config = TrainingConfig({"carla_root": str(data.parent), **CONFIG})
    dataset = CARLAData(root=str(data), config=config, random=False)
    dataset.image_augmenter_func = lambda image: image
    out: list[dict] = []
    draw = np.random.random
    try:
        for name, fixed in (("own", 1.0), ("twin", 0.0)):
            np.random.random = lambda *a, _v=fixed: _v
            for i in range(len(dataset)):
                batch = mixed_data_collate_fn([dataset[i]])
                if name == "own":
                    out.append({"route": batch["route_number"][0],
                                "frame": batch["frame_number"][0]})
                out[i][name] = {k: {"kind": kind(v), **recorded(k, v, batch)}
                                for k, v in sorted(batch.items())}
    finally:
        np.random.random = draw
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo-dir", type=Path, required=True)
    args = parser.parse_args()
    common.check_pinned(args.repo_dir, BLOBS, COMMIT)
    from carla_wds.pack.synth import register_writer
    from carla_wds.pack.synth.lead import synth_dataset
    register_writer(SYNTH["layout"], synth_dataset)
    root = Path(tempfile.mkdtemp(prefix="golden_lead_batches_")) / "carla_leaderboard2"
    raw_sha = common.synth_routes(root / "data", SYNTH)
    samples = run(args.repo_dir, root / "data")
    common.write_golden(OUT, {
        "schema": common.SCHEMA, "project": "kesai-labs/lead", "commit": COMMIT,
        "loader": "lead/data_loader/carla_dataset.py CARLAData(random=False) through "
                  "mixed_data_collate_fn, batches of one", "config": CONFIG, "files": BLOBS,
        "synth": SYNTH, "raw_sha256": raw_sha, "kinds": hoist_kinds(samples),
        "samples": samples,
        "regenerate": "/tmp/golden_venv/bin/python -m tools.golden.lead_batches "
                      "--repo-dir /tmp/golden_src/lead"})
    print(f"wrote {OUT}: {len(samples)} samples")


if __name__ == "__main__":
    main()
