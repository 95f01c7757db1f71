"""LEAD's bucket collections and per-epoch schedule as named mix presets (issue 41), from
kesai-labs/lead@44891760 (44891760e45e10980033008547bfdc7975c24b54; no code of theirs).

LEAD samples CARLA data by a *bucket collection* (lead/data_buckets/, chosen by
config_training.py l.395-439): each bucket's `buckets_mixture_per_epoch` rate r takes
int(len x r) of its samples per epoch, with replacement when that is more than it holds
(data_loader/carla_dataset.py l.1041-1057), and `carla_num_samples` > 0 then cuts or repeats
the shuffled list (l.1117-1125). In mixed training, `MixedSampler` puts a fixed number of each
dataset's samples in every batch, per epoch from its scheduler (training/
mixed_training_utils.py l.138-215; training_utils.py l.316-322 picks the scheduler).

- `lead`: FullPosttrainBucketCollection (the default, config_training.py l.439) and
  FullPretrainBucketCollection: one bucket, rate 1.0: every sample once per epoch.
- `lead_town13_heldout`: Town13Heldout{Pre,Post}trainBucketCollection: Town13 at rate 0, the
  other towns at total / len(others), so the epoch keeps the size of the whole set.
- `lead_sim2real`: MixedSampler with Sim2RealSampleScheduler (schedule_carla_num_samples):
  per batch of 64, 40/24 sim/real samples from epoch 0, 32/32 from 1, 24/40 from 3, 16/48
  from 7, 8/56 from 15 (mixed_training_utils.py l.77-90), as a stratified mix with a schedule.
- `lead_mixed`: MixedSampler with UniformSampleScheduler (the default scheduler): half each.

Not offered: NavSimBucketCollection and WaymoBucketCollection mine ~60 scenario and situation
buckets from labels carla-wds does not record at pack time (the active scenario, junctions,
traffic lights, hazards); FailedBucketCollection selects routes by their results.json status.
"""
from __future__ import annotations

from typing import Any, Sequence

from .mix_base import Bucket, MixPreset, PackBuckets, spec_entry, where

AT = "kesai-labs/lead@44891760"
DB = "lead/data_buckets/"
MIXED = "lead/training/mixed_training_utils.py"
HELD_OUT = "Town13"   # town13_heldout_*_bucket_collection.py l.31/l.35: "Town13" in route_path
# Sim2RealSampleScheduler's anchors: from epoch -> samples (sim, real) of a batch of 64
SIM2REAL = ((0, (40, 24)), (1, (32, 32)), (3, (24, 40)), (7, (16, 48)), (15, (8, 56)))
# their last anchor, 31: (0, 64), is left out: a mix weight must be > 0 (docs/mixing_presets.md)
SIM2REAL_LEFT_OUT = (31, (0, 64))

ALL = (Bucket("0 (every trainable frame)", 1.0, (), f"{DB}full_posttrain_bucket_collection.py:36",
              "theirs: int(len x 1.0) drawn without replacement, then shuffled; ours: every "
              "sample once, in shard order through the shuffle buffer"),)
HELDOUT = (
    Bucket("TOWN13", 0.0, None, f"{DB}town13_heldout_posttrain_bucket_collection.py:49",
           "rate 0: left out (ours: the where lists every other town)"),
    Bucket("OTHER_TOWNS", 1.0, (), f"{DB}town13_heldout_posttrain_bucket_collection.py:50-51",
           "theirs: rate total / len(others), drawn with replacement; ours: weight 1 over the "
           "other towns' samples with epoch_size int(len(others) x total / len(others)): whole "
           "copies, then a draw without replacement. Theirs tests 'Town13' in the route path; "
           "ours the route's town bucket"),
)


def every_sample(packs: Sequence[PackBuckets], epoch_size: int | None = None) -> dict[str, Any]:
    """One bucket at rate 1.0; epoch_size: their carla_num_samples."""
    (pack,) = packs
    return {"entries": [spec_entry(pack.source, (), weight=1.0)],
            **({"epoch_size": epoch_size} if epoch_size else {})}


def town13_heldout(packs: Sequence[PackBuckets], epoch_size: int | None = None
                   ) -> dict[str, Any]:
    """The other towns' samples at rate total / len(others) (l.44-52 of the posttrain file)."""
    (pack,) = packs
    others = [t for t in pack.values("town") if t != HELD_OUT]
    if not others:
        raise ValueError(f"{pack.source} holds no town but {HELD_OUT}; LEAD's held-out "
                         "collection would train on nothing. Fix: give a pack with other towns")
    n_other = pack.count(where(town=tuple(others)))
    rate = pack.samples / max(1, n_other)
    return {"entries": [spec_entry(pack.source, where(town=tuple(others)), weight=1.0)],
            "epoch_size": epoch_size or int(n_other * rate)}


def per_batch(packs: Sequence[PackBuckets], steps: Sequence[tuple[int, tuple[int, int]]],
              epoch_size: int | None = None) -> dict[str, Any]:
    """MixedSampler: each batch holds each dataset's count (stratified), per epoch from the
    schedule's steps; an epoch of len(first dataset) samples (l.211-215)."""
    sim, real = packs
    (_, first), later = steps[0], steps[1:]
    return {"entries": [spec_entry(sim.source, (), weight=float(first[0])),
                        spec_entry(real.source, (), weight=float(first[1]))],
            "stratify": True, "epoch_size": epoch_size or sim.samples,
            **({"schedule": [{"from_epoch": e, "weights": [float(w) for w in ws]}
                             for e, ws in later]} if later else {})}


MIX_PRESETS = (
    MixPreset("lead", "LEAD's FullPosttrain/FullPretrain bucket collection: every sample once "
              "per epoch", ("source",), every_sample,
              f"{AT} {DB}full_posttrain_bucket_collection.py:35-36, "
              "lead/training/config_training.py:439", ("epoch_size",), ALL),
    MixPreset("lead_town13_heldout", "LEAD's Town13Heldout bucket collections: Town13 left "
              "out, the epoch kept at the whole set's size", ("source",), town13_heldout,
              f"{AT} {DB}town13_heldout_posttrain_bucket_collection.py:44-52", ("epoch_size",),
              HELDOUT),
    MixPreset("lead_sim2real", "LEAD's MixedSampler with Sim2RealSampleScheduler: per-batch "
              "sim/real counts moving from 40/24 to 8/56", ("sim", "real"),
              lambda packs, **kw: per_batch(packs, SIM2REAL, **kw),
              f"{AT} {MIXED}:56-90, :138-215", ("epoch_size",)),
    MixPreset("lead_mixed", "LEAD's MixedSampler with UniformSampleScheduler: half of every "
              "batch from each", ("sim", "real"),
              lambda packs, **kw: per_batch(packs, ((0, (1, 1)),), **kw),
              f"{AT} {MIXED}:33-53, :138-215", ("epoch_size",)),
)
