"""A mix's where= typo against a current pack (issue 43): the bucket names, or the values, the
pack records, with a "did you mean", not "packs made before ... record none; re-pack"."""
from __future__ import annotations

import json

import pytest

from carla_wds.load.plan.mix import MixError, MixPlanner, mix_spec


def _plan(pack, where: dict) -> MixPlanner:
    shards = json.loads((pack / "manifest.json").read_text())["shards"]
    spec = mix_spec({"entries": [{"source": str(pack), "where": where, "weight": 1}]})
    return MixPlanner.of(spec, {str(pack): shards})


def test_a_misspelt_bucket_lists_the_buckets_the_pack_records(zoo):
    pack = zoo()
    recorded = sorted(json.loads((pack / "manifest.json").read_text())["buckets"]["sizes"])
    assert "town" in recorded
    with pytest.raises(MixError) as caught:
        _plan(pack, {"twon": ["Town01"]})
    text = str(caught.value)
    assert "where names bucket 'twon' (did you mean 'town'?)" in text
    assert f"the pack records buckets {recorded}" in text
    assert "re-pack" not in text and "made before" not in text


def test_a_misspelt_value_lists_the_values_the_pack_records(zoo):
    pack = zoo()
    with pytest.raises(MixError) as caught:
        _plan(pack, {"town": ["Town1"]})
    text = str(caught.value)
    assert "town 'Town1' (did you mean 'Town01'?) is not recorded (the pack records " \
           "['Town01', 'Town02'" in text


def test_a_pack_without_buckets_still_says_re_pack(zoo, tmp_path):
    pack = zoo()
    shards = json.loads((pack / "manifest.json").read_text())["shards"]
    for s in shards:
        s.pop("buckets", None)
    spec = mix_spec({"entries": [{"source": "old", "where": {"town": ["Town01"]}, "weight": 1}]})
    with pytest.raises(MixError, match="made before buckets were recorded.*re-pack it"):
        MixPlanner.of(spec, {"old": shards})
