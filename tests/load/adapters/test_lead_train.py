"""LEAD's own TFv6 training step (Trainer.train at kesai-labs/lead@44891760, unchanged) runs
3 steps on CPU with random init, its planning, semantic, CenterNet box, BEV semantic and
radar detection heads on (the radar input feeding the planner), on
CARLAWebData(adapter="lead") batches of the golden's routes
(tools/golden/lead_train.py, in the golden venv with their files exported as
tools/golden/README.md says). Skipped without that checkout or venv."""
from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import pytest

from carla_wds.pack import PackOptions, pack
from carla_wds.pack.synth import synth_dataset

ROOT = Path(__file__).resolve().parents[3]
CHECKOUT = Path(os.environ.get("CARLA_WDS_LEAD_CHECKOUT", "/tmp/golden_src/lead"))
PYTHON = Path(os.environ.get("CARLA_WDS_GOLDEN_PYTHON", "/tmp/golden_venv/bin/python"))
GOLDEN = ROOT / "tests" / "golden" / "lead_batches.json"
# their losses with the planning, semantic, CenterNet box and BEV semantic heads on
# (tfv6/tfv6.py compute_loss: planning_decoder.py, the semantic cross entropy over LEAD's 10
# grouped classes, center_net_decoder.py on the adapter's center_net_* targets,
# bev_decoder.py's cross entropy over the 13 BEV classes of bev_semantic, radar_detector.py's
# matched radar_loss on radar_detections, its radar tokens from radar feeding the planner)
LOSSES = {"loss_spatio_temporal_waypoints", "loss_target_speed", "loss_spatial_route",
          "loss_semantic", "loss_center_net_heatmap", "loss_center_net_wh",
          "loss_center_net_offset", "loss_center_net_yaw_class", "loss_center_net_yaw_res",
          "loss_center_net_velocity", "loss_bev_semantic", "radar_loss"}


def _ready() -> bool:
    if not ((CHECKOUT / "lead" / "tfv6" / "tfv6.py").is_file() and PYTHON.is_file()):
        return False
    probe = subprocess.run([str(PYTHON), "-c", "import timm, beartype, jaxtyping"],
                           capture_output=True)
    return probe.returncode == 0


@pytest.mark.skipif(not _ready(), reason=f"no LEAD checkout at {CHECKOUT} "
                    f"(CARLA_WDS_LEAD_CHECKOUT) or no timm in {PYTHON} (CARLA_WDS_GOLDEN_PYTHON)")
def test_their_tfv6_training_step_runs_on_our_batches(tmp_path):
    synth = json.loads(GOLDEN.read_text())["synth"]
    raw = tmp_path / "raw"
    synth_dataset(raw, synth["layout"], episodes=synth["episodes"], frames=synth["frames"],
                  seed=synth["seed"], image_size=tuple(synth["image_size"]), progress=False)
    pack(raw, tmp_path / "shards", PackOptions(layout="lead", allow_pickle_input=True,
                                               image_format="png", progress=False))
    out = tmp_path / "train.json"
    proc = subprocess.run(
        [str(PYTHON), "-m", "tools.golden.lead_train", "--repo-dir", str(CHECKOUT),
         "--shards", str(tmp_path / "shards"), "--steps", "3", "--batch-size", "2",
         "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["steps"] == 3
    for step in result["losses"]:
        assert set(step) == LOSSES and all(math.isfinite(v) for v in step.values()), step
    assert result["moved"] > 0.9 * result["parameters"], result
    assert {"rgb", "rasterized_lidar", "semantic", "future_waypoints", "route",
            "center_net_heatmap", "center_net_avg_factor", "bev_semantic", "radar",
            "radar_detections"} \
        <= set(result["batch_keys"])
