"""A mix's own sizes and a manifest's bucket runs are bounded before anything is expanded
(issue 38: N6, Low 3, Low 11): each refusal is one line naming the entry or manifest, the
field, the value and what is valid."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from carla_wds import CARLAWebData
from carla_wds.load.plan.mix import MAX_EPOCH_SAMPLES, MixError, MixPlanner, mix_spec
from carla_wds.manifest import read_manifest
from carla_wds.manifest_schema import ManifestError
from carla_wds.pack.audit import verify

from ..helpers import SIZE


def one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text
    return text


def with_runs(packed: Path, tmp_path: Path, runs_of) -> Path:
    """A copy of a pack whose first shard's `speed` runs are runs_of(its samples)."""
    copy = tmp_path / "pack"
    shutil.copytree(packed, copy)
    doc = json.loads((copy / "manifest.json").read_text())
    first = doc["shards"][0]
    first["buckets"]["speed"] = runs_of(first["samples"])
    (copy / "manifest.json").write_text(json.dumps(doc))
    return copy


@pytest.mark.parametrize("claim", [10 ** 10, "short"])
def test_bucket_runs_that_are_not_the_shards_samples_are_refused_when_read(
        packed_tcp, tmp_path, claim):
    """Runs claiming 10^10 samples took a `where:` mix past 3 GB and passed verify; runs too
    short gave a numpy broadcast error. Both are refused where the manifest is read."""
    def runs_of(n: int) -> list:
        return [["slow", claim]] if claim != "short" else [["slow", n - 1]]
    copy = with_runs(packed_tcp, tmp_path, runs_of)
    first = json.loads((copy / "manifest.json").read_text())["shards"][0]
    told = str(10 ** 10) if claim != "short" else str(first["samples"] - 1)
    pattern = (rf"manifest .*{copy.name}.*shards\[0\]\.buckets\.speed runs give {told} "
               rf"samples .* holds {first['samples']} samples")
    with pytest.raises(ManifestError, match=pattern) as info:
        read_manifest(copy)
    one_line(info)
    with pytest.raises(ManifestError, match=pattern):
        verify(copy, progress=False)
    with pytest.raises(ManifestError, match=pattern):
        CARLAWebData(mix={"entries": [{"source": str(copy), "where": {"speed": ["slow"]},
                                       "weight": 1}]}, batch_size=2, image_size=SIZE)


def test_a_run_of_zero_samples_is_refused(packed_tcp, tmp_path):
    """A pack never writes one; allowed, 256 MiB of them would be ~30M runs for 0 samples."""
    copy = with_runs(packed_tcp, tmp_path, lambda n: [["slow", n], ["fast", 0]])
    with pytest.raises(ManifestError, match=r"buckets.*count >= 1"):
        read_manifest(copy)


@pytest.mark.parametrize("entry, field, shown", [
    ({"weight": float("inf")}, "weight", "inf"),
    ({"weight": float("nan")}, "weight", "nan"),
    ({"weight": 1e308}, "weight", "1e+308"),        # two of them overflowed the sum to inf
    ({"repeat": 1e9}, "repeat", "1000000000.0"),      # a raw MemoryError
    ({"repeat": 10 ** 7}, "repeat", "10000000"),
    ({"count": 10 ** 8}, "count", "100000000"),
])
def test_a_mix_entry_beyond_its_bounds_is_one_line(entry, field, shown):
    spec = {"entries": [{"source": "a", "weight": 1}, {"source": "a", **entry}]}
    if field == "weight":
        spec["entries"][0]["weight"] = entry["weight"]
    pattern = rf"mix entries\[\d\]: {field}={re.escape(shown)}; expected a (whole )?number"
    with pytest.raises(MixError, match=pattern + " > 0 and at most") as info:
        mix_spec(spec)
    one_line(info)


def test_epoch_size_and_schedule_weights_are_bounded():
    entries = [{"source": "a", "weight": 1}, {"source": "a", "count": 3}]
    with pytest.raises(MixError, match=r"epoch_size=100000000; expected a whole number > 0 "
                                       r"and at most 10,000,000.*more epochs"):
        mix_spec({"entries": entries, "epoch_size": 10 ** 8})
    for bad in (float("inf"), "inf", 1e308):
        with pytest.raises(MixError, match=r"schedule\[0\]\.weights\[0\] \(entries\[0\], a\): "
                                           r".*needs a number > 0 and at most") as info:
            mix_spec({"entries": entries, "schedule": [{"from_epoch": 1,
                                                        "weights": [bad, None]}]})
        one_line(info)
    assert mix_spec({"entries": entries, "epoch_size": MAX_EPOCH_SAMPLES}).epoch_size \
        == MAX_EPOCH_SAMPLES


def test_an_epoch_over_the_bound_is_refused_before_it_is_drawn(packed_tcp):
    """Each field within its bound, the entries together still plan one epoch: its total is
    counted (repeat x candidates, counts, epoch_size) and refused naming every entry."""
    src = str(packed_tcp)
    spec = {"entries": [{"source": src, "count": MAX_EPOCH_SAMPLES},
                        {"source": src, "repeat": 2}]}
    with pytest.raises(MixError, match=r"mix: an epoch of 10,000,\d+ samples \(entries\[0\] "
                                       rf"\({src}\) 10,000,000, entries\[1\] .*expected at most "
                                       r"10,000,000.*Fix: lower repeat, count") as info:
        CARLAWebData(mix=spec, batch_size=2, image_size=SIZE)
    one_line(info)


def test_a_planner_given_short_runs_names_the_entry_and_shard():
    """Shard records that skipped manifest reading (MixPlanner.of's own callers): runs of 3
    samples in a shard of 5 gave a numpy broadcast error."""
    docs = {"a": [{"name": "s0.tar", "samples": 5, "buckets": {"speed": [["slow", 3]]}}]}
    spec = mix_spec({"entries": [{"source": "a", "where": {"speed": ["slow"]}, "weight": 1}]})
    with pytest.raises(MixError, match=r"mix entries\[0\] \(a\): its shard 's0.tar' has 'speed' "
                                       r"runs of 3 samples but holds 5") as info:
        MixPlanner.of(spec, docs)
    one_line(info)
