"""sequence.py: what a pack records of its routes (issue 27), on real packs."""
from __future__ import annotations

import json

from carla_wds.sequence import StepCounter, chains, continues, sequence_doc, split_key

from .helpers import all_keys, make_pack


def test_split_key_reads_make_key_and_refuses_other_keys():
    assert split_key("Town01__routes_town01_00__0012") == ("Town01__routes_town01_00", 12)
    assert split_key("clip__12345") == ("clip", 12345)
    for bad in ("nokey", "__0012", "route__12a", "route__"):
        assert split_key(bad) is None


def test_steps_count_across_shards_and_restart_at_a_new_route():
    counter = StepCounter("r1__0003")
    for key in ("r1__0004", "r1__0006", "r2__0000", "r2__0001"):
        counter.add(key)
    assert counter.take() == {"1": 2, "2": 1} and counter.take() == {}
    assert counter.same_route("r2__0009") and not counter.same_route("r3__0000")


def test_frame_step_is_the_most_common_step_and_gaps_the_others():
    shards = [{"samples": 3, "steps": {"5": 10, "10": 1}}, {"samples": 2, "steps": {"5": 4}}]
    assert sequence_doc(shards)["frame_step"] == 5 and sequence_doc(shards)["gaps"] == 1
    assert sequence_doc([{"samples": 1, "steps": {"1": 2, "2": 2}}])["frame_step"] == 1


def test_chains_link_shards_a_route_continues_across():
    shards = [{"samples": 2, "first_key": "a__0000", "last_key": "a__0001"},
              {"samples": 2, "first_key": "a__0002", "last_key": "b__0000"},
              {"samples": 1, "first_key": "c__0000", "last_key": "c__0000"},
              {"samples": 1, "first_key": "c__0001", "last_key": "c__0001"}]
    assert continues(shards) == [False, True, False, True]
    assert chains(shards) == [[0, 1], [2, 3]]


def test_a_pack_records_first_and_last_keys_and_steps(tmp_path):
    shards = make_pack(tmp_path, episodes=3, frames=20, max_samples=7)
    manifest = json.loads((shards / "manifest.json").read_text())
    keys = all_keys(shards)
    pos = 0
    for shard in manifest["shards"]:
        mine = keys[pos:pos + shard["samples"]]
        assert (shard["first_key"], shard["last_key"]) == (mine[0], mine[-1])
        # steps from the sample before (the previous shard's last, same route) to each
        before = keys[pos - 1:pos] + mine
        want = {}
        for a, b in zip(before, before[1:]):
            if split_key(a)[0] == split_key(b)[0]:
                d = str(split_key(b)[1] - split_key(a)[1])
                want[d] = want.get(d, 0) + 1
        assert shard["steps"] == want
        pos += shard["samples"]
    assert manifest["sequence"] == {"frame_step": 1, "gaps": 0,
                                    "continuing_shards": sum(continues(manifest["shards"]))}
