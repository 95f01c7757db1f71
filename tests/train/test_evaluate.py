"""Eval on real shards: the untrained residual model scores exactly the straight-line baseline,
and where the shards carry the expert's controls, TCP's controller is scored against them."""
from __future__ import annotations

import pytest
import torch

from carla_wds.load import CARLAWebData
from carla_wds.train.config import load_config
from carla_wds.train.control import controls_in_frames, expert_controls
from carla_wds.train.evaluate import baseline_verdict, evaluate
from carla_wds.train.frames import straight_ahead
from carla_wds.train.inputs import loader_options, model_for
# fixtures:
from tests.pack.datasets.routes.test_layout_tcp_roach import packed_roach, raw_roach  # noqa: F401

from .test_loop import TINY, data, overrides  # noqa: F401 - data: fixture


def untrained(shards, tmp_path, **extra):
    cfg = load_config(TINY, overrides(shards.parent, tmp_path / "run", **{
        "data.val": str(shards), "data.train": str(shards), **extra}))
    spec = CARLAWebData(str(shards), batch_size=4, mode="eval", rank=0, world_size=1).manifest.spec
    val = CARLAWebData(str(shards), batch_size=4, mode="eval", image_size=(32, 48), rank=0,
                       world_size=1, **loader_options(cfg.model, spec))
    torch.manual_seed(0)
    return model_for(cfg, val), val, cfg


@pytest.mark.parametrize("prior", ["constant_velocity", "none"])
def test_an_untrained_model_scores_the_baseline_only_with_the_prior(data, tmp_path, prior):
    model, val, cfg = untrained(data / "val", tmp_path, **{"model.prior": prior})
    result = evaluate(model, val, cfg)
    assert result["n"] == 20 and result["baseline_ade"] > 0.3
    if prior == "constant_velocity":
        assert result["ade"] == pytest.approx(result["baseline_ade"], rel=1e-6, abs=1e-6)
        assert result["fde"] == pytest.approx(result["baseline_fde"], rel=1e-6, abs=1e-6)
    else:   # TCP's plain deltas start from nothing like it
        assert abs(result["ade"] - result["baseline_ade"]) > 0.1
    assert "steer_mae" not in result   # transfuser4 shards carry no controls


def test_tcp_roach_action_gives_control_errors(packed_roach, tmp_path):  # noqa: F811
    model, val, cfg = untrained(packed_roach, tmp_path)
    result = evaluate(model, val, cfg)
    assert result["n_controls"] == result["n"] > 0
    # the untrained model is the baseline, so TCP's controller drives both the same way
    for name in ("steer", "throttle", "brake"):
        assert result[f"{name}_mae"] == pytest.approx(result[f"baseline_{name}_mae"], abs=1e-6)
    # the same MAE, summed here sample by sample from the roach action
    errs = []
    for batch in val:
        v = batch.valid
        pred = straight_ahead(batch.speed, val.pred_len, 0.5)
        ctl = controls_in_frames(pred, batch.speed, batch.target_point, 0.5, ("tcp", "tcp"))
        errs.append((ctl - expert_controls(batch.measurements))[v].abs())
    mae = torch.cat(errs).mean(dim=0)
    assert [result[f"{n}_mae"] for n in ("steer", "throttle", "brake")] == pytest.approx(
        mae.tolist(), abs=1e-9)


@pytest.mark.parametrize("ade, baseline, said", [
    # 0.869 m against 0.870 m prints nearly alike: level, with the margin in full
    (0.869, 0.870, "is level with the baseline (within 1%: 0.0010 m better)"),
    (0.8614, 0.870, "is level with the baseline (within 1%: 0.0086 m better)"),
    (0.8612, 0.870, "beats the baseline by 0.0088 m (1.0%)"),   # 1.01% of the baseline
    (0.5, 1.0, "beats the baseline by 0.5000 m (50.0%)"),
    (0.878, 0.870, "is level with the baseline (within 1%: 0.0080 m worse)"),
    (0.88, 0.870, "does NOT beat the baseline: 0.0100 m (1.1%) worse"),
    (0.870, 0.870, "is level with the baseline (within 1%: 0.0000 m apart)"),
    (0.1, 0.0, "does NOT beat the baseline: 0.1000 m worse (the baseline's ADE is 0)"),
    (0.0, 0.0, "is level with the baseline (within 1%: 0.0000 m apart)"),
])
def test_the_verdict_says_beats_only_by_a_margin_the_print_shows(ade, baseline, said):
    assert baseline_verdict(ade, baseline) == said
