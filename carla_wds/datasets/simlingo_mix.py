"""SimLingo's bucket sampling as named mix presets (issue 41), from RenzKa/simlingo@eb2b89a
(eb2b89aa90d500c35248b3d637d7db15ad9cadca; no code of theirs).

Their data module (simlingo_training/dataloader/datamodule.py l.96-171) builds one dataset per
bucket named in the config's `train_partitions`, normalises the numbers to sum 1 over every
listed bucket (l.101-105), drops the buckets that load 0 samples (l.154-161), and draws
`num_samples = int(min(len_b // w_b))` samples with replacement through a
`WeightedRandomSampler` whose weight is w_b for *every sample* of bucket b (l.163-171). So a
bucket's share of the epoch is w_b x len_b / sum(w x len), not w_b. The presets give each
entry the weight w_b x (its candidates), which gives the same shares, and that epoch_size.

- `simlingo`: `carla_bucket_v12_dreamer.yaml`, the data module of their released experiments
  (config/experiment/simlingo_seed1.yaml l.3), its driving half (`train_partitions`); the
  dreamer half (`train_partitions_dreamer`, their instruction data) is not packed here.
- `simlingo_v12`: `carla_bucket_v12.yaml`, the same with `old_towns` (LB1 towns) at 0.05.

Their buckets come from `dataset_generation/data_buckets/carla_get_buckets.py` (labels of the
expert, and the future); ours from what pack/buckets.py records at pack time. Each Bucket
says where the two differ; five of theirs have no pack-time counterpart and are left out.
"""
from __future__ import annotations

from typing import Any, Sequence

from .mix_base import Bucket, MixPreset, PackBuckets, spec_entry, where

AT = "RenzKa/simlingo@eb2b89a"
CFG = "simlingo_training/config/data_module/"
GET = "dataset_generation/data_buckets/carla_get_buckets.py"
# LB1 towns: their old_towns bucket is the routes under lb1_split (dataset_base.py l.195-197)
OLD_TOWNS = ("Town01", "Town02", "Town03", "Town04", "Town05", "Town06", "Town07", "Town10hd")

_ACCEL = (f"theirs: the mean acceleration over the next 4 frames' speeds ({GET} l.212, "
          "l.323-329); ours: the speed change from the previous sample (pack/buckets.py accel, "
          "bins at -2, -0.5, 0.5, 2 m/s^2)")
_LATERAL = (f"theirs: |mean y| of the future waypoints ({GET} l.302-309); ours: the yaw rate "
            "from the previous sample's pose (yaw_rate, bins at 0.05 and 0.3 rad/s)")


def _table(cfg: str) -> tuple[Bucket, ...]:
    """Their train_partitions (l.7-40 of both v12 files), in their order, and ours for each."""
    c = f"{CFG}{cfg}"
    return (
        Bucket("all", 0.082, (), f"{c}:7"),
        Bucket("acceleration_negative_5", 0.03, where(accel="brake_hard"), f"{c}:9",
               f"theirs [-20, -5) m/s^2 (dataset_base.py l.152-153); ours < -2. {_ACCEL}"),
        Bucket("acceleration_negative_1", 0.03, where(accel="brake"), f"{c}:11",
               f"theirs [-5, -1) m/s^2 (dataset_base.py l.154-155); ours [-2, -0.5). {_ACCEL}"),
        Bucket("acceleration_positive_1", 0.03, where(accel="accelerate"), f"{c}:13",
               f"theirs [1, 5) m/s^2 (dataset_base.py l.156-157); ours [0.5, 2). {_ACCEL}"),
        Bucket("acceleration_positive_5", 0.03, where(accel="accelerate_hard"), f"{c}:15",
               f"theirs [5, 20) m/s^2 (dataset_base.py l.158-159); ours >= 2. {_ACCEL}"),
        Bucket("lateral_control_1_2", 0.12, where(yaw_rate=("left", "right")), f"{c}:24",
               f"theirs [0.1, 2) m (dataset_base.py l.162-163). {_LATERAL}"),
        Bucket("lateral_control_higher_5", 0.12, where(yaw_rate=("left_sharp", "right_sharp")),
               f"{c}:27", "theirs >= 2 m: lateral_control_5 + lateral_control_1000000 "
               f"(dataset_base.py l.166-167; the config's comment says > 5). {_LATERAL}"),
        Bucket("start_from_stop", 0.07, where(start="from_stop"), f"{c}:29",
               f"theirs: stopped (< 0.5 m/s) with a target speed > 0.8 m/s ({GET} l.318-321), "
               "about to start; ours: moving (>= 0.5 m/s) after a stop in the last 2 s"),
        Bucket("vehicle_front", 0.04, None, f"{c}:33",
               f"the expert's vehicle hazard from an oncoming vehicle ({GET} l.369-374): "
               "not recorded at pack time"),
        Bucket("vehicle_side", 0.08, where(crossing="car"), f"{c}:34",
               f"theirs: the expert's vehicle hazard, that vehicle's yaw > 0.5 rad ({GET} "
               "l.375-380); ours: a moving car ahead crossing the ego's path within 3 s"),
        Bucket("leading_object_vehicle", 0.09, where(leading="car"), f"{c}:35",
               f"theirs: the expert's speed reduced by a vehicle within 30 m ({GET} l.332-341);"
               " ours: the nearest car or walker in the ego's corridor (|y| < 2 m) within "
               "30 m is a car"),
        Bucket("leading_object_traffic.stop", 0.07, None, f"{c}:36",
               "the expert's speed reduced by a stop sign: not recorded at pack time"),
        Bucket("leading_object_traffic.traffic_light", 0.07, None, f"{c}:37",
               "the expert's speed reduced by a traffic light: not recorded at pack time"),
        Bucket("leading_object_walker", 0.05, where(leading="walker"), f"{c}:38",
               f"theirs: the expert's speed reduced by a walker within 30 m ({GET} l.332-341); "
               "ours: the nearest car or walker in the corridor within 30 m is a walker"),
        Bucket("changed_route", 0.08, None, f"{c}:39",
               f"the expert's changed_route flag ({GET} l.355-357): not recorded at pack time"),
        Bucket("parkinglane", 0.008, None, f"{c}:40",
               f"parking-lane routes with lateral motion ({GET} l.393-394): not recorded"),
    )


OLD = Bucket("old_towns", 0.05, where(town=OLD_TOWNS), f"{CFG}carla_bucket_v12.yaml:5",
             "theirs: the routes under lb1_split (dataset_base.py l.195-197); ours: the "
             "route's town bucket is an LB1 town")
DREAMER = _table("carla_bucket_v12_dreamer.yaml")
V12 = (OLD, *_table("carla_bucket_v12.yaml"))


def per_sample_weights(buckets: Sequence[Bucket], packs: Sequence[PackBuckets],
                       epoch_size: int | None = None) -> dict[str, Any]:
    """Their WeightedRandomSampler as a mix: entry weight w_b x len_b, epoch size
    int(min(len_b // (w_b / sum w))) over the buckets with samples (datamodule.py l.101-171)."""
    (pack,) = packs
    total = sum(b.weight for b in buckets)   # over every listed bucket, as theirs (l.103-105)
    entries, sizes = [], []
    for b in buckets:
        n = 0 if b.where is None else pack.count(b.where)
        if n == 0:   # a bucket with no samples is dropped (l.154-161)
            continue
        entries.append(spec_entry(pack.source, b.where, weight=b.weight * n))
        sizes.append(n // (b.weight / total))
    return {"entries": entries, "epoch_size": epoch_size or int(min(sizes))}


MIX_PRESETS = (
    MixPreset("simlingo", "SimLingo's carla_bucket_v12_dreamer train_partitions (its released "
              "experiments), the driving half", ("source",),
              lambda packs, **kw: per_sample_weights(DREAMER, packs, **kw),
              f"{AT} {CFG}carla_bucket_v12_dreamer.yaml:4-40, datamodule.py:96-171",
              ("epoch_size",), DREAMER),
    MixPreset("simlingo_v12", "SimLingo's carla_bucket_v12 train_partitions (with old_towns)",
              ("source",), lambda packs, **kw: per_sample_weights(V12, packs, **kw),
              f"{AT} {CFG}carla_bucket_v12.yaml:4-40, datamodule.py:96-171",
              ("epoch_size",), V12),
)
