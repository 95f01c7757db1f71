"""carla-wds against golden outputs of each project's OWN loader (tests/golden/*.json).

The golden files were made by tools/golden/make_golden.py: carla-wds's synth writes small raw
routes, the project's loader at a pinned commit (recorded in the file, with the git blob id of
every file it ran) serves samples from them, and the file keeps each sample's (route, frame) and
labels rounded to float32. Here the same routes are synthesised again (their hash must equal the
recorded one, else the golden file is stale: regenerate it, tools/golden/README.md), packed by
carla-wds, loaded, and compared: the sample set and each label. A known difference would be a
strict xfail naming it, so that it flips to a failure the day its fix lands; the issue-24 ones
(garage's and TransFuser 2022's sample sets, garage's smoothed route and semantic classes) are
fixed and asserted.
No network, no project code: only the committed JSON and carla-wds's synth.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from carla_wds.load import CARLAWebData
from carla_wds.pack import PackOptions, pack
from carla_wds.pack.synth import synth_dataset
from tools.golden.common import tree_sha256

GOLDEN = Path(__file__).parent / "golden"
ATOL = 2e-5    # labels computed in float64 by them and in float32 by us (metres, m/s)


def _golden(project: str) -> dict:
    return json.loads((GOLDEN / f"{project}.json").read_text())


def _identity(key: str) -> tuple[str, int]:
    """carla-wds key 'A__B__0003' -> ('A/B', 3)."""
    route, frame = key.rsplit("__", 1)
    return route.replace("__", "/"), int(frame)


def _served(batch, i: int) -> dict:
    """What carla-wds serves for one sample, named as in the golden files."""
    out = {"waypoints": batch.waypoints[i].numpy(), "target_point": batch.target_point[i].numpy(),
           "command": int(np.argmax(batch.command[i].numpy())),
           "speed": float(batch.speed[i])}
    for name, value in (batch.measurements or {}).items():
        out.setdefault(name, value[i].numpy())     # the core labels above win
    if batch.route is not None:
        rows = batch.measurements.get("route_len")   # padded routes say how many rows are real
        real = int(rows[i]) if rows is not None else batch.route.shape[1]
        out["route_points"] = batch.route[i][:real].numpy()
    if batch.semantics is not None:
        out["semantics_hist"] = _hist(batch.semantics[i][0].numpy())
    if batch.bev is not None:
        out["bev_semantics_hist"] = _hist(batch.bev[i][0].numpy())
    return out


def _hist(ids: np.ndarray) -> dict[str, int]:
    values, counts = np.unique(ids, return_counts=True)
    return {str(int(v)): int(c) for v, c in zip(values, counts)}


# the extra fields each layout's comparison reads (None: the core labels only)
FIELDS = {"tcp_roach": ["measurements"],
          "garage": ["measurements", "route", "semantics", "bev"],
          "transfuser2022": ["measurements"]}
_PACKS: dict[tuple[str, str], dict] = {}


def _packed(project: str, layout: str, tmp_root: Path) -> dict:
    """(route, frame) -> served labels, for the golden routes packed with `layout` (cached)."""
    if (project, layout) in _PACKS:
        return _PACKS[(project, layout)]
    doc = _golden(project)
    synth = doc["synth"]
    raw = tmp_root / f"{project}_raw"
    if not raw.exists():
        synth_dataset(raw, synth["layout"], episodes=synth["episodes"], frames=synth["frames"],
                      seed=synth["seed"], image_size=tuple(synth["image_size"]), progress=False)
    assert tree_sha256(raw) == doc["raw_sha256"], (
        f"carla-wds's synth no longer writes the routes {GOLDEN / project}.json was made from; "
        f"regenerate it: {doc['regenerate']}")
    out = tmp_root / f"{project}_{layout}_shards"
    pack(raw, out, PackOptions(layout=layout, progress=False, allow_pickle_input=True))
    data = CARLAWebData(str(out), batch_size=4, mode="eval", image_size=tuple(synth["image_size"]),
                        fields=FIELDS.get(layout))
    served = {}
    for batch in data:
        assert not batch.errors, batch.errors    # nothing skipped
        for i, key in enumerate(batch.keys):
            if not batch.valid[i]:      # eval mode pads the last batch with invalid rows
                continue
            served[_identity(key)] = _served(batch, i)
    _PACKS[(project, layout)] = served
    return served


@pytest.fixture(scope="module")
def tmp_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("golden")


def _theirs(project: str) -> dict:
    return {(s["route"], s["frame"]): s for s in _golden(project)["samples"]}


def _close(ours, theirs, label: str, where) -> None:
    ours, theirs = np.asarray(ours, np.float64), np.asarray(theirs, np.float64)
    assert ours.shape == theirs.shape, f"{label} at {where}: shape {ours.shape} != {theirs.shape}"
    np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=ATOL, err_msg=f"{label} at {where}")


def _compare(project: str, layout: str, label: str, tmp_root: Path) -> None:
    ours, theirs = _packed(project, layout, tmp_root), _theirs(project)
    common = sorted(set(ours) & set(theirs))
    assert common, f"{project}/{layout}: no sample in common with the golden file"
    for where in common:
        want, got = theirs[where], ours[where]
        if label.endswith("_sha256"):
            from tools.golden.common import f32_digest
            assert f32_digest(got[label[:-len("_sha256")]]) == want[label], f"{label} at {where}"
        elif label == "command" or label.endswith("_hist") or isinstance(want[label], bool):
            assert got[label] == want[label], f"{label} at {where}: {got[label]} != {want[label]}"
        else:
            _close(got[label], want[label], label, where)


# (project, layout) -> labels compared
TCP_CORE = ["waypoints", "target_point", "command", "speed"]
TCP_ROACH = ["action", "action_mu", "action_sigma", "future_action_mu", "future_action_sigma",
             "value", "feature_sha256", "future_feature_sha256"]
GARAGE = ["waypoints", "target_point", "aim_wp", "command", "speed", "theta", "steer",
          "throttle", "brake", "junction", "bev_semantics_hist", "route_points",
          "semantics_hist"]
SETS = [("tcp", "tcp"), ("tcp", "tcp_roach"), ("garage", "garage"),
        ("transfuser2022", "transfuser2022")]
TF2022 = ["waypoints", "target_point", "speed", "theta", "steer", "throttle", "brake",
          "light_hazard"]
LABELS = ([("tcp", "tcp", lab) for lab in TCP_CORE]
          + [("tcp", "tcp_roach", lab) for lab in TCP_CORE + TCP_ROACH]
          + [("garage", "garage", lab) for lab in GARAGE]
          + [("transfuser2022", "transfuser2022", lab) for lab in TF2022])


@pytest.mark.parametrize("project,layout", SETS)
def test_sample_set_equals_their_loader(project, layout, tmp_root):
    ours, theirs = set(_packed(project, layout, tmp_root)), set(_theirs(project))
    assert ours == theirs, (f"only carla-wds: {sorted(ours - theirs)}; "
                            f"only {project}'s loader: {sorted(theirs - ours)}")


@pytest.mark.parametrize("project,layout,label", LABELS)
def test_label_equals_their_loader(project, layout, label, tmp_root):
    _compare(project, layout, label, tmp_root)


@pytest.mark.parametrize("project", ["tcp", "garage", "transfuser2022"])
def test_golden_file_records_its_provenance(project):
    doc = _golden(project)
    assert len(doc["commit"]) == 40 and doc["files"] and doc["samples"]
    assert (GOLDEN / f"{project}.json").stat().st_size < 200_000
