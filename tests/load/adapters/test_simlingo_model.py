"""adapter="simlingo" against SimLingo's own Data_Driving (tests/golden/simlingo.json, made by
tools/golden/simlingo.py at RenzKa/simlingo@eb2b89a): the same synth routes packed by carla-wds
serve, per sample, their DatasetOutput's fields with their types, dtypes and shapes, their
labels, images and prompt/answer strings, with the frame's own camera, with the augmented twin
and with a commentary overlay. Waypoints, waypoints_1d and target points are also written here
from their formulas on the raw measurements. Packs SimLingo's loader would not serve this way
are refused at construction, in one line with the pack command. No network, no project code."""
from __future__ import annotations

import gzip
import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pytest

from carla_wds.load import CARLAWebData
from carla_wds.load.adapters.simlingo import SimLingoSample, simlingo_samples
from carla_wds.load.adapters import simlingo_adapter
from carla_wds.load.adapters.simlingo_prompts import COMMANDS, Templates, command_option, \
    commentary_text, prompt_answer, target_options
from carla_wds.pack import PackOptions, pack
from carla_wds.pack.overlay import pack_overlay
from carla_wds.pack.synth import synth_dataset
from carla_wds.pack.synth.overlays import raw_routes, synth_overlay
from tools.golden.common import tree_sha256

GOLDEN = Path(__file__).parents[2] / "golden" / "simlingo.json"
ATOL = 2e-5   # the pack's labels are float32; theirs float64 from JSON
# DatasetOutput's fields (simlingo_training/utils/custom_types.py l.5-19), in their order
THEIRS = ("conversation", "answer", "image_ff", "image_ff_org_size", "waypoints",
          "waypoints_1d", "path", "target_points", "speed", "placeholder_values",
          "measurement_path", "dataset", "qa_templates", "eval_infos")


@pytest.fixture(scope="module")
def golden() -> dict:
    return json.loads(GOLDEN.read_text())


@pytest.fixture(scope="module")
def built(tmp_path_factory, golden) -> Path:
    """The golden's routes, packed (garage_lb2_simlingo), with its commentary overlay."""
    synth, ovl, root = golden["synth"], golden["overlay"], tmp_path_factory.mktemp("simlingo")
    raw = root / "raw"
    synth_dataset(raw, synth["layout"], episodes=synth["episodes"], frames=synth["frames"],
                  seed=synth["seed"], image_size=tuple(synth["image_size"]), progress=False)
    assert tree_sha256(raw) == golden["raw_sha256"], (
        f"synth no longer writes the routes {GOLDEN} was made from: {golden['regenerate']}")
    pack(raw, root / "shards", PackOptions(layout="garage_lb2_simlingo", progress=False))
    synth_overlay(raw / "commentary", ovl["kind"], raw_routes(raw / "data", ovl["kind"]),
                  raw / "data", coverage=ovl["coverage"], unmatched=ovl["unmatched"],
                  seed=ovl["seed"])
    pack_overlay(raw / "commentary", root / "shards", root / "commentary", ovl["kind"])
    return root


def served(root: Path, **kw) -> dict[str, SimLingoSample]:
    """measurement path -> our sample, every valid row of one pass."""
    kw = {"batch_size": 4, "mode": "eval", "seed": 2, "adapter": "simlingo", **kw}
    out = {}
    for batch in CARLAWebData(str(root / "shards"), **kw):
        for ok, s in zip(batch["valid"].tolist(), simlingo_samples(batch)):
            if ok:
                out[s.measurement_path] = s
    return out


def _kind(value) -> list:
    if isinstance(value, np.ndarray):
        return [type(value).__name__, str(value.dtype), list(value.shape)]
    return [type(value).__name__]


def _texts(s: SimLingoSample) -> list[str]:
    return [s.conversation[0]["content"][0]["text"], s.answer[0]["content"][0]["text"]]


def compare(ours: dict[str, SimLingoSample], theirs: list[dict], every: bool = True) -> None:
    """Each of their samples against ours, key by key (every: all of theirs are served)."""
    if every:
        assert sorted(ours) == sorted(t["measurement_path"] for t in theirs)
    assert ours
    for t in theirs:
        s = ours.get(t["measurement_path"])
        if s is None:
            continue
        assert s._fields == THEIRS
        assert {k: _kind(v) for k, v in s._asdict().items()} == t["fields"], t["measurement_path"]
        assert s.conversation[0]["content"][1] == {"type": "image"}
        assert s.conversation[1] == s.answer[0] and s.dataset == t["dataset"]
        for name in ("image_ff", "image_ff_org_size"):
            assert digest(getattr(s, name)) == t[name], (t["measurement_path"], name)
        for name in ("waypoints", "waypoints_1d", "path", "target_points"):
            np.testing.assert_allclose(getattr(s, name), t[name], atol=ATOL,
                                       err_msg=f"{t['measurement_path']} {name}")
        np.testing.assert_allclose(s.placeholder_values["<TARGET_POINT>"],
                                   t["placeholder_values"]["<TARGET_POINT>"], atol=ATOL)
        assert list(s.placeholder_values) == list(t["placeholder_values"])
        assert s.speed == pytest.approx(t["speed"], rel=1e-6)
        variants = [v for b in t["prompts"].values() for v in b]
        assert _texts(s) in variants, (t["measurement_path"], _texts(s), variants)


def digest(a: np.ndarray) -> str:
    """The golden's image digest: sha256 of the array's bytes."""
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def test_own_camera_is_their_data_driving_sample_for_sample(built, golden):
    ours = served(built)
    compare(ours, golden["samples"]["own"])
    drawn = {tuple(_texts(s)) for s in ours.values()}
    assert len({p.split("m/s. ")[1] for p, _ in drawn}) == 2   # both options drawn


def test_twin_camera_is_their_shifted_sample(built, golden):
    # the twin is drawn in train mode only; batch 1 serves every sample in one epoch
    ours = served(built, mode="train", batch_size=1, twin_p=1.0)
    compare(ours, golden["samples"]["twin"])
    own = served(built)
    moved = max(float(np.abs(ours[k].target_points - own[k].target_points).max()) for k in own)
    assert moved > 0.1, moved


def test_commentary_overlay_gives_their_commentary_prompts(built, golden):
    ours = served(built, overlays=[str(built / "commentary")])
    theirs = golden["samples"]["commentary"]
    compare(ours, theirs)   # a sample without an entry: their driving prompts only
    took = [s for s in ours.values() if "Follow the road past" in " ".join(_texts(s))]
    assert took and len(took) < len(ours), "the commentary branch is drawn for some samples"


# --- their formulas, written here from dataset_base.py, on the raw measurements ------------

def _raw(root: Path, path: str) -> dict:
    with gzip.open(root / "raw" / path, "rt") as f:
        return json.load(f)


def _moved(points, y: float, yaw_deg: float) -> np.ndarray:
    """augment_target_point / get_waypoints' augmentation: R(yaw)^T (p - (0, y))."""
    c, s = math.cos(math.radians(yaw_deg)), math.sin(math.radians(yaw_deg))
    p = np.atleast_2d(np.asarray(points, np.float64)) - [0.0, y]
    return np.stack([c * p[:, 0] + s * p[:, 1], -s * p[:, 0] + c * p[:, 1]], axis=1)


def _expected(root: Path, path: str, twin: bool) -> dict[str, np.ndarray]:
    """get_waypoints (l.782-808) from the ego matrices of frames t..t+11, [1:-1]; the 1-D
    waypoints' cumulative distances (l.401-406); both target points (dataset_driving l.75-78)."""
    frame = int(path.rsplit("/", 1)[1].split(".")[0])
    frames = [_raw(root, path.replace(f"{frame:04d}.json", f"{frame + i:04d}.json"))
              for i in range(12)]
    m0 = np.array(frames[0]["ego_matrix"])[:3]
    pts = np.array([(m0[:, :3].T @ (np.array(f["ego_matrix"])[:3, 3] - m0[:, 3]))[:2]
                    for f in frames])
    y, yaw = (frames[0]["augmentation_translation"], frames[0]["augmentation_rotation"]) \
        if twin else (0.0, 0.0)
    one_d = np.cumsum(np.linalg.norm(np.diff(pts, axis=0), axis=1))[:-1]
    return {"waypoints": _moved(pts, y, yaw)[1:-1],
            "waypoints_1d": np.stack([one_d, np.zeros_like(one_d)], axis=1),
            "target_points": _moved([frames[0]["target_point"], frames[0]["target_point_next"]],
                                    y, yaw)}


@pytest.mark.parametrize("twin", [False, True])
def test_waypoints_and_target_points_follow_their_formulas(built, twin):
    kw = {"mode": "train", "batch_size": 1, "twin_p": 1.0} if twin else {}
    ours = served(built, **kw)
    for path, s in ours.items():
        want = _expected(built, path, twin)
        for name, value in want.items():
            np.testing.assert_allclose(getattr(s, name), value, atol=1e-4,
                                       err_msg=f"{path} {name}")


def test_command_sentences_are_theirs():
    """get_navigational_conditioning's sentence (dataset_base.py l.498-528), every command."""
    said = {1: "go left at the next intersection", 2: "go right at the next intersection",
            3: "go straight at the next intersection", 4: "follow the road",
            5: "do a lane change to the left", 6: "do a lane change to the right"}
    assert COMMANDS == said
    tp = np.array([12.9, -3.0])   # |tp| = 13.24 -> 13 meter
    for c in range(1, 7):
        for n in range(1, 7):
            then = "" if said[n] == said[c] else f" then {said[n]}"
            want = f"Command: {said[c]}{then}." if c == 4 else \
                f"Command: {said[c]} in 13 meter{then}."
            assert command_option(tp, c, n) == want


# --- packs the adapter cannot serve: one line at construction, with the pack command --------

def _refused(source: Path, *words: str) -> None:
    with pytest.raises(ValueError) as err:
        CARLAWebData(str(source), batch_size=2, adapter="simlingo", num_workers=2)
    text = str(err.value)
    assert "\n" not in text and "adapter 'simlingo'" in text
    assert "Fix: carla-wds pack RAW OUT --layout garage_lb2_simlingo" in text
    for word in words:
        assert word in text, text


def test_a_pack_of_another_layout_is_refused(packed_tcp):
    _refused(packed_tcp, "layout 'tcp'", "needs garage_lb2_simlingo")


@pytest.mark.parametrize("option,words", [({"all_frames": True}, ("--all-frames",)),
                                          ({"pred_len": 8}, ("--pred-len 10",)),
                                          ({"resize": (256, 512)}, ("--resize 256x512",))])
def test_a_pack_with_options_it_cannot_serve_is_refused(built, tmp_path, option, words):
    pack(built / "raw", tmp_path / "shards",
         PackOptions.of(layout="garage_lb2_simlingo", progress=False, **option))
    _refused(tmp_path / "shards", *words)


# --- their processor and collate step on our samples -----------------------------------------

PROCESSOR = GOLDEN.with_name("simlingo_processor.json")
# DrivingExample leaves that differ by design: run_id encodes the measurement path (absolute
# in theirs, under the data root in ours); placeholder_values hold the target points as the
# float64 of our float32 labels
APART = {"run_id", "driving_input.prompt.placeholder_values",
         "driving_input.prompt_inference.placeholder_values"}


def _sha(values: list[np.ndarray], dtype) -> str:
    return hashlib.sha256(np.ascontiguousarray(np.asarray(values), dtype).tobytes()).hexdigest()


def test_their_processor_step_takes_our_samples_unchanged(built, golden):
    """tools/golden/simlingo_processor.py ran their DataModule.dl_collate_fn (datamodule.py
    l.230-343: InternVL2 tiling, chat template, tokenizer) on these very samples, as
    simlingo_samples gives them, and on their own Data_Driving samples of the same frames and
    prompts: every leaf of the two DrivingExamples was equal. Our samples are still those."""
    record = json.loads(PROCESSOR.read_text())
    assert record["raw_sha256"] == golden["raw_sha256"] and record["overlay"] == golden["overlay"]
    data = CARLAWebData(str(built / "shards"), adapter="simlingo", batch_size=4, mode="eval",
                        seed=2, overlays=[str(built / "commentary")])
    batches = list(data)
    assert len(batches) == len(record["batches"])
    for batch, rec in zip(batches, record["batches"]):
        assert all(ok for k, ok in rec["equal"].items() if k not in APART), rec["equal"]
        assert all(d is not None and d < 1e-5 for d in rec["max_abs_diff"].values())
        ours = [s for s, ok in zip(simlingo_samples(batch), batch["valid"].tolist()) if ok]
        assert [s.measurement_path for s in ours] == rec["measurement_paths"]
        assert [_texts(s) for s in ours] == rec["prompts"]
        leaves = rec["ours"]
        for leaf, values, dtype in (
                ("driving_label.image_ff_org", [s.image_ff_org_size for s in ours], np.uint8),
                ("driving_label.waypoints", [s.waypoints for s in ours], np.float32),
                ("driving_label.path", [s.path for s in ours], np.float32),
                ("driving_input.target_point", [s.target_points for s in ours], np.float32),
                ("driving_input.vehicle_speed", [s.speed for s in ours], np.float32)):
            assert leaves[leaf][2] == _sha(values, dtype), leaf


# --- their template-driven options (use_lmdrive_commands, commentary_augmentation) ----------

class Draws:
    """A generator stand-in that gives scripted draws: random() the floats, integers(n) the
    indices, in call order, as their random.random / random.choice were scripted."""

    def __init__(self, floats: list[float], picks: list[int]) -> None:
        self.floats, self.picks = iter(floats), iter(picks)

    def random(self) -> float:
        return next(self.floats)

    def integers(self, n: int) -> int:
        pick = next(self.picks)
        assert pick < n
        return pick


def _templates(golden, root: Path) -> Path:
    folder = root / "augmented_templates"
    folder.mkdir(exist_ok=True)
    for name, value in golden["templates"].items():
        (folder / name).write_text(json.dumps(value))
    return folder


def test_template_options_give_their_strings_under_the_same_draws(built, golden, tmp_path):
    """Their Data_Driving with use_lmdrive_commands and commentary_augmentation on (the
    golden's template files), under scripted draws; ours under the same draws, with their
    sample's speed and target points, the raw command and the commentary entry."""
    templates = Templates.read(_templates(golden, tmp_path))
    labels = {t["measurement_path"]: t for t in golden["samples"]["commentary"]}
    pad_f, pad_p = golden["pad"]
    entries = 0
    for t in golden["samples"]["templates"]:
        path = t["measurement_path"]
        raw = _raw(built, path)
        entry_file = built / "raw" / path.replace("data/", "commentary/", 1).replace(
            "/measurements/", "/commentary/")
        entry = json.loads(gzip.open(entry_file, "rt").read()) if entry_file.exists() else None
        entries += entry is not None
        theirs = labels[path]
        for (floats, picks), want in zip(golden["scenarios"], t["texts"]):
            rng = Draws([*floats, *pad_f], [*picks, *pad_p])
            commentary = commentary_text(entry, path, templates, rng)
            options = target_options(np.array(theirs["target_points"]), raw["command"],
                                     raw["next_command"], templates, rng)
            assert list(prompt_answer(theirs["speed"], options, commentary, rng)) == want, path
    assert 0 < entries < len(golden["samples"]["templates"])


def test_simlingo_adapter_with_their_templates_serves_their_options(built, golden, tmp_path):
    name = simlingo_adapter(str(_templates(golden, tmp_path)))
    assert name.startswith("simlingo+templates-") and simlingo_adapter(
        str(tmp_path / "augmented_templates")) == name
    texts = [" ".join(_texts(s)) for s in served(
        built, adapter=name, overlays=[str(built / "commentary")], mode="train",
        batch_size=1).values()]
    assert any("step " in t for t in texts)       # an LMDrive option (the golden's words)
    with pytest.raises(ValueError, match="lmdrive.json not found; pass their"):
        simlingo_adapter(str(tmp_path / "missing"))


def test_augment_shifts_the_camera_for_about_half_and_colours_the_images(built):
    """augment=True: the shifted camera at img_shift_augmentation_prob 0.5 (labels moved with
    it, as the twin test checks) and their colour augmentation on the served camera."""
    own = served(built)
    aug = served(built, mode="train", batch_size=1, augment=True)
    moved = [bool(np.abs(aug[k].target_points - own[k].target_points).max() > 1e-3)
             for k in own]
    assert 0 < sum(moved) < len(moved), moved
    still = [k for k, m in zip(own, moved) if not m]
    assert any(not np.array_equal(aug[k].image_ff_org_size, own[k].image_ff_org_size)
               for k in still)
    for k in own:   # the cut image is the augmented image's top rows, as theirs
        assert np.array_equal(aug[k].image_ff[0], aug[k].image_ff_org_size[0][:, :359])
