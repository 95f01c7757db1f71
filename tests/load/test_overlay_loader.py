"""CARLAWebData(source=BASE, overlays=[...]) on real packs (issue 30): entries read in step
with the base under workers, DDP ranks and resume; overlay_required filters with an exact
len(); overlays of another base, missing shards and edited shards refused in one line."""
from __future__ import annotations

import io
import json
import shutil
import tarfile
from pathlib import Path

import pytest

from carla_wds.load import CARLAWebData
from carla_wds.pack import PackOptions, pack
from carla_wds.pack.overlay import pack_overlay
from carla_wds.pack.synth import synth_dataset
from carla_wds.tario import ShardError

from ..helpers import SCRIPTS, all_keys, built_once
from ..overlaykit import garage_with_trees, overlay_entries
from ..ranks import run_script

KINDS = ("simlingo_commentary", "drivelm")
SIZE = (16, 24)


@pytest.fixture(scope="module")
def packs(tmp_path_factory) -> Path:
    """A garage pack with an overlay pack per kind, built once per session and read only by
    the modules that import this fixture (test_overlay_history_required, _adapter, digests)."""
    def build() -> Path:
        root = tmp_path_factory.mktemp("ovl_load")
        garage_with_trees(root, {k: f"{k}_tree" for k in KINDS}, 3, 4, coverage=0.8)
        for kind in KINDS:
            pack_overlay(root / f"{kind}_tree", root / "shards", root / kind, kind)
        return root
    return built_once(("ovl_load", str(tmp_path_factory.getbasetemp())), build,
                      "overlay packs")


def served(data: CARLAWebData, stop: int | None = None) -> list[tuple[str, tuple]]:
    """(key, entries) of every valid sample, in order (the first `stop` batches)."""
    out = []
    for i, batch in enumerate(data, 1):
        for j, (key, ok) in enumerate(zip(batch.keys, batch.valid.tolist())):
            if ok:
                out.append((key, tuple(json.dumps(batch.fields[k][j], sort_keys=True)
                                       for k in KINDS)))
        if i == stop:   # the loader counts a batch consumed once it is given
            break
    return out


def _want(packs: Path, keys) -> list[tuple[str, tuple]]:
    tables = [overlay_entries(packs / k) for k in KINDS]
    return [(k, tuple(json.dumps(t[k], sort_keys=True) for t in tables)) for k in keys]


def test_entries_come_in_step_with_their_samples_under_two_workers(packs):
    kw = dict(batch_size=4, image_size=SIZE, num_workers=2, seed=3)
    plain = [k for b in CARLAWebData(str(packs / "shards"), **kw) for k in b.keys]
    data = CARLAWebData(str(packs / "shards"), overlays=[str(packs / k) for k in KINDS], **kw)
    got = served(data)
    assert [k for k, _ in got] == plain   # the same plan, order and shuffle as without
    assert got == _want(packs, plain)
    assert any(v[0] == "null" for _, v in got) and any(v[0] != "null" for _, v in got)
    ev = CARLAWebData(str(packs / "shards"), overlays=[str(packs / k) for k in KINDS],
                      mode="eval", **kw)
    assert sorted(served(ev)) == sorted(_want(packs, all_keys(packs / "shards")))


def test_overlay_required_keeps_samples_with_every_entry_and_len_is_exact(packs):
    tables = [overlay_entries(packs / k) for k in KINDS]
    kept = [k for k in all_keys(packs / "shards") if all(t[k] is not None for t in tables)]
    assert 0 < len(kept) < len(all_keys(packs / "shards"))
    kw = dict(overlays=[str(packs / k) for k in KINDS], overlay_required=True,
              image_size=SIZE, num_workers=2)
    train = CARLAWebData(str(packs / "shards"), batch_size=3, **kw)
    assert len(train) == len(kept) // 3
    got = served(train)
    assert len(got) == len(train) * 3 and set(got) <= set(_want(packs, kept))
    ev = CARLAWebData(str(packs / "shards"), batch_size=3, mode="eval", **kw)
    assert len(ev) == -(-len(kept) // 3) and sorted(served(ev)) == sorted(_want(packs, kept))


@pytest.mark.parametrize("required", [False, True])
def test_resume_mid_epoch_equals_the_uninterrupted_epoch(packs, required):
    kw = dict(batch_size=3, image_size=SIZE, num_workers=2, seed=1,
              overlays=[str(packs / k) for k in KINDS], overlay_required=required)
    whole = served(CARLAWebData(str(packs / "shards"), **kw))
    first = CARLAWebData(str(packs / "shards"), **kw)
    assert len(first) >= 2
    head = served(first, stop=len(first) // 2)
    state = first.state_dict()
    rest = CARLAWebData(str(packs / "shards"), **kw)
    rest.load_state_dict(state)
    assert head + served(rest) == whole
    other = CARLAWebData(str(packs / "shards"), **{**kw, "overlay_required": not required})
    with pytest.raises(ValueError, match="cannot resume: manifest"):
        other.load_state_dict(state)


@pytest.mark.ddp
def test_torchrun_two_ranks_read_overlays_in_step(packs, tmp_path):
    run_script(str(SCRIPTS / "overlay_ddp_check.py"), str(packs / "shards"),
               str(packs / KINDS[0]), str(tmp_path))
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    table = overlay_entries(packs / KINDS[0])
    assert len(ranks[0]["train"]) == len(ranks[1]["train"]) > 0
    keys = [k for r in ranks for k, _ in r["train"]]
    assert len(keys) == len(set(keys))
    assert all(v == table[k] for r in ranks for k, v in r["train"])
    kept = sorted(k for k, v in table.items() if v is not None)
    assert sorted(k for r in ranks for k in r["eval"]) == kept


def test_an_overlay_of_another_base_is_refused_in_one_line(packs, tmp_path):
    other = tmp_path / "other"
    synth_dataset(tmp_path / "data", "garage", episodes=1, frames=14, seed=9,
                  image_size=(24, 32), progress=False)
    pack(tmp_path / "data", other, PackOptions.of(layout="garage", all_frames=True,
                                                  progress=False))
    for base, bad, match in [(other, packs / KINDS[0], "built for another base pack"),
                             (packs / "shards", packs / "shards", "not an overlay pack")]:
        with pytest.raises(ValueError, match=match) as info:
            CARLAWebData(str(base), batch_size=2, image_size=SIZE, overlays=[str(bad)])
        assert "\n" not in str(info.value) and "Fix" in str(info.value)


def test_missing_edited_or_escaping_overlay_shards_are_refused(packs, tmp_path):
    copy = tmp_path / "ovl"
    shutil.copytree(packs / KINDS[0], copy)
    first = sorted(copy.glob("overlay-*.tar"))[0]
    first.rename(tmp_path / "away.tar")
    with pytest.raises(ValueError, match=rf"overlay shard .*{first.name} is missing.*Fix"):
        CARLAWebData(str(packs / "shards"), batch_size=2, image_size=SIZE, overlays=[str(copy)])
    (tmp_path / "away.tar").rename(first)
    doc = json.loads((copy / "manifest.json").read_text())
    doc["shards"][0]["name"] = "../../etc/x.tar"
    (copy / "manifest.json").write_text(json.dumps(doc))
    with pytest.raises(Exception, match=r"shard name '../../etc/x.tar'.*refused"):
        CARLAWebData(str(packs / "shards"), batch_size=2, image_size=SIZE, overlays=[str(copy)])
    shutil.rmtree(copy)
    shutil.copytree(packs / KINDS[0], copy)
    with tarfile.open(first) as tar:   # the same count of samples, other keys
        members = [(m, tar.extractfile(m).read()) for m in tar]
    with tarfile.open(first, "w", format=tarfile.PAX_FORMAT) as tar:
        for m, data in members:
            m.name, m.pax_headers = "x" + m.name, {}   # (a long name's own is in pax)
            tar.addfile(m, io.BytesIO(data))
    data = CARLAWebData(str(packs / "shards"), batch_size=2, image_size=SIZE, mode="eval",
                        overlays=[str(copy)])
    with pytest.raises(ShardError, match=r"holds sample 'x.*not built for this base"):
        list(data)


def _edited(packs: Path, tmp_path: Path, edit) -> Path:
    """A copy of the first kind's overlay pack whose manifest `edit` changed."""
    copy = tmp_path / "ovl"
    shutil.copytree(packs / KINDS[0], copy)
    doc = json.loads((copy / "manifest.json").read_text())
    edit(doc)
    (copy / "manifest.json").write_text(json.dumps(doc))
    return copy


@pytest.mark.parametrize("field", ["boxes", "boxes_raw", "boxes_len", "route"])
def test_an_overlay_naming_a_field_the_base_serves_is_refused(packs, tmp_path, field):
    """`field: boxes_raw` silently replaced the base's own boxes_raw (issue 38, Low 5)."""
    copy = _edited(packs, tmp_path, lambda doc: doc.update(field=field))
    with pytest.raises(ValueError, match=rf"overlay .*ovl/manifest.json serves the field '{field}', which "
                                         r"the base pack .* serves itself \(its fields: "
                                         r"\[.*'boxes_raw'.*\] and their <name>_len counts\); "
                                         r"an overlay adds a field.*Fix") as info:
        CARLAWebData(str(packs / "shards"), batch_size=2, image_size=SIZE, overlays=[str(copy)],
                     fields=["boxes"])
    assert "\n" not in str(info.value)


def test_overlay_required_refuses_a_kept_sample_without_its_entry(packs, tmp_path):
    """Runs claiming every sample has an entry served None for those without, not a word
    (issue 38, Low 6): each kept sample's entry is checked as it is joined."""
    def every(doc):
        for shard in doc["shards"]:
            shard["entries"] = [[1, shard["samples"]]]
    copy = _edited(packs, tmp_path, every)
    table = overlay_entries(packs / KINDS[0])
    assert None in table.values()
    data = CARLAWebData(str(packs / "shards"), batch_size=2, image_size=SIZE, mode="eval",
                        overlays=[str(copy)], overlay_required=True)
    assert len(data) == -(-len(table) // 2)   # the plan trusts the runs' counts
    with pytest.raises(Exception, match=rf"overlay .*ovl/manifest.json: sample '.+' has no entry .*entries "
                                        r"runs say it has one.*Fix") as info:
        list(data)
    assert "\n" not in str(info.value)
    skip = CARLAWebData(str(packs / "shards"), batch_size=2, image_size=SIZE, mode="eval",
                        overlays=[str(copy)], overlay_required=True, on_error="skip")
    served = [k for b in skip for k, ok in zip(b.keys, b.valid.tolist()) if ok]
    assert sorted(served) == sorted(k for k, v in table.items() if v is not None)
