"""Named mix presets (issue 41): LEAD's and SimLingo's bucket sampling as mix specs over
pack-time buckets (carla_wds/datasets/*_mix.py, load/plan/mix_presets.py), each built on a real
bucketed pack and iterated for an epoch; their numbers are read here from a hand copy of
their configs (tests/fixtures/mix_presets/theirs.yaml, citations inside), not from ours."""
from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import yaml

from carla_wds import CARLAWebData
from carla_wds.load.plan.mix import MixError
from carla_wds.load.plan.mix_presets import get_preset, mix_preset, preset_names
from carla_wds.pack import PackOptions, pack
from carla_wds.pack.synth import synth_dataset

from ..helpers import SIZE, all_keys

THEIRS = yaml.safe_load((Path(__file__).parents[1] / "fixtures" / "mix_presets" /
                         "theirs.yaml").read_text())


@pytest.fixture(scope="module")
def simlingo_pack(zoo) -> Path:
    return zoo("garage_lb2_simlingo", episodes=4, frames=30, max_samples=9)


@pytest.fixture(scope="module")
def lead_pack(zoo) -> Path:
    return zoo("lead", episodes=4, frames=30, max_samples=9, allow_pickle_input=True)


@pytest.fixture(scope="module")
def lead_other(tmp_path_factory, lead_pack) -> Path:
    """A second LEAD pack whose routes are not lead_pack's (routes 4 and 5 of six)."""
    root = tmp_path_factory.mktemp("lead_other")
    routes = synth_dataset(root / "raw", "lead", episodes=6, frames=30, seed=5,
                           image_size=(48, 64), progress=False)
    for route in routes[:4]:
        shutil.rmtree(route)
    out = root / "shards"
    pack(root / "raw", out, PackOptions.of(layout="lead", max_samples=9, progress=False,
                                           allow_pickle_input=True))
    assert not set(all_keys(out)) & set(all_keys(lead_pack))
    return out


def bucket_values(pack_dir: Path, name: str) -> list[str]:
    """Each sample's recorded value of bucket `name`, pack order, from the manifest's runs."""
    shards = json.loads((pack_dir / "manifest.json").read_text())["shards"]
    return [v for s in shards for v, n in s["buckets"][name] for _ in range(n)]


def matching(pack_dir: Path, where: dict[str, list[str]]) -> np.ndarray:
    n = len(all_keys(pack_dir))
    keep = np.ones(n, bool)
    for name, wanted in where.items():
        keep &= np.asarray([v in wanted for v in bucket_values(pack_dir, name)])
    return np.flatnonzero(keep)


def largest_remainder(shares: list[float], total: int) -> list[int]:
    raw = [s * total for s in shares]
    out = [int(r) for r in raw]
    for i in sorted(range(len(raw)), key=lambda i: (out[i] - raw[i], i))[:total - sum(out)]:
        out[i] += 1
    return out


def loader(spec, **kw) -> CARLAWebData:
    return CARLAWebData(mix=spec, image_size=SIZE, seed=3, **kw)


def test_unknown_names_sources_and_options_are_refused_in_one_line(lead_pack):
    assert {"lead", "lead_town13_heldout", "lead_sim2real", "lead_mixed", "simlingo",
            "simlingo_v12"} <= set(preset_names())
    with pytest.raises(MixError, match=r"'leed' is unknown \(did you mean 'lead'\?\); "
                                       r"valid presets are \['lead'"):
        mix_preset("leed", lead_pack)
    with pytest.raises(MixError, match=r"takes 2 source\(s\) \(sim, real\), got 1"):
        mix_preset("lead_sim2real", lead_pack)
    with pytest.raises(MixError, match=r"unknown options \['epochs'\]; it takes \['epoch_size'\]"):
        mix_preset("lead", lead_pack, epochs=3)
    with pytest.raises(FileNotFoundError, match="no manifest at") as got:   # as the loader's
        mix_preset("simlingo", lead_pack.parent / "nowhere")
    assert "\n" not in str(got.value)


@pytest.mark.parametrize("name", ["simlingo", "simlingo_v12"])
def test_simlingo_weights_are_their_config_and_the_epoch_is_their_size(simlingo_pack, name):
    theirs = THEIRS[name]
    preset = get_preset(name)
    assert [(b.theirs, b.weight) for b in preset.buckets] == list(theirs.items())
    spec = mix_preset(name, simlingo_pack)
    total = sum(theirs.values())
    expected, sizes = [], []
    for b in preset.buckets:   # their numbers, with the candidates counted here
        n = 0 if b.where is None else len(matching(simlingo_pack, b.where_doc()))
        if n:   # their datamodule drops a bucket of 0 samples (datamodule.py l.154-161)
            expected.append((b.where_doc(), theirs[b.theirs], n))
            sizes.append(n // (theirs[b.theirs] / total))
    assert len(expected) >= 3   # the synth pack fills several of their buckets
    got = [(e.get("where", {}), e["weight"]) for e in spec["entries"]]
    assert [w for w, _ in got] == [w for w, _, _ in expected]
    # each entry's weight over its candidates is their per-sample weight, exactly
    assert [pytest.approx(weight / n) for (_, weight), (_, _, n) in zip(got, expected)] == \
        [w for _, w, _ in expected]
    assert spec["epoch_size"] == int(min(sizes))


def test_simlingo_preset_serves_its_shares_for_an_epoch(simlingo_pack):
    spec = mix_preset("simlingo", simlingo_pack)
    theirs = THEIRS["simlingo"]
    size = spec["epoch_size"]
    batch = next(b for b in (7, 6, 5, 4, 3, 2, 1) if size % b == 0)
    data = loader(spec, batch_size=batch, num_workers=2)
    planner = data._mixer
    keys = all_keys(simlingo_pack)
    # their shares: w_b x len_b over the sum, of the epoch, rounded by largest remainders
    mass = []
    for e, cand in zip(spec["entries"], planner.candidates):
        where = e.get("where", {})
        assert cand.tolist() == matching(simlingo_pack, where).tolist()
        bucket = next(b for b in get_preset("simlingo").buckets if b.where_doc() == where)
        mass.append(theirs[bucket.theirs] * len(cand))
    assert planner.sizes(0) == largest_remainder([m / sum(mass) for m in mass], size)
    served = Counter(k for b in data for k in b.keys)
    assert sum(served.values()) == size == len(data) * batch
    assert served == Counter(keys[int(p)] for p in planner.epoch_samples(3, 0))


def test_lead_serves_every_sample_once_per_epoch(lead_pack):
    assert get_preset("lead").buckets[0].weight == THEIRS["lead"]["full_rate"]
    data = loader(mix_preset("lead", lead_pack), batch_size=6, num_workers=1)
    for epoch in (0, 1):
        data.set_epoch(epoch)
        assert sorted(k for b in data for k in b.keys) == sorted(all_keys(lead_pack))


def test_lead_town13_heldout_keeps_the_whole_sets_size_from_other_towns(lead_pack):
    town = bucket_values(lead_pack, "town")
    assert {"Town13"} < set(town)
    spec = mix_preset("lead_town13_heldout", lead_pack)
    others = sum(t != "Town13" for t in town)
    assert spec["epoch_size"] == int(others * (len(town) / others)) == len(town)
    data = loader(spec, batch_size=6, num_workers=2)
    served = Counter(k for b in data for k in b.keys)
    keys = all_keys(lead_pack)
    other_keys = {k for k, t in zip(keys, town) if t != "Town13"}
    assert set(served) == other_keys and sum(served.values()) == len(town)
    extra = len(town) - others   # whole copies, then a draw without replacement for the rest
    assert Counter(served.values()) == {2: extra, 1: others - extra}


def test_lead_sim2real_batches_hold_their_counts_per_epoch(lead_pack, lead_other):
    spec = mix_preset("lead_sim2real", lead_pack, lead_other)
    anchors = {int(e): ws for e, ws in THEIRS["lead"]["sim2real"].items()}
    steps = {0: [w for w in (e["weight"] for e in spec["entries"])]}
    steps |= {s["from_epoch"]: s["weights"] for s in spec["schedule"]}
    # every anchor but the last (0 sim samples: a mix weight must be > 0; docs say so)
    assert steps == {e: [float(w) for w in ws] for e, ws in anchors.items() if e != 31}
    sim = set(all_keys(lead_pack))
    assert spec["epoch_size"] == len(sim) and spec["stratify"] is True
    data = loader(spec, batch_size=8, num_workers=0)
    for epoch, (n_sim, n_real) in anchors.items():
        if epoch == 31:
            continue
        data.set_epoch(epoch)
        batches = list(data)
        assert len(batches) == len(sim) // 8
        # a batch of 8 holds 1/8 of their batch of 64 from each
        assert {sum(k in sim for k in b.keys) for b in batches} == {n_sim // 8}, epoch
        assert {len(b.keys) - sum(k in sim for k in b.keys) for b in batches} == {n_real // 8}


def test_lead_mixed_is_half_each(lead_pack, lead_other):
    spec = mix_preset("lead_mixed", lead_pack, lead_other)
    sim = set(all_keys(lead_pack))
    data = loader(spec, batch_size=6, num_workers=1)
    assert {sum(k in sim for k in b.keys) for b in data} == {3}
