"""A changed model trained into an existing run folder: one line with the way out (issue 28)."""
from __future__ import annotations

from ..helpers import make_pack


def test_a_changed_model_in_an_existing_run_dir_is_one_line(cli, tmp_path):
    pack = make_pack(tmp_path / "pack", episodes=2, frames=14)
    run = tmp_path / "run"
    common = ["train", "--config", "tiny", f"data.train={pack}", f"data.val={pack}",
              "epochs=1", f"run_dir={run}", "data.num_workers=0", "data.batch_size=4",
              "data.eval_batch_size=4"]
    assert cli(*common).exit_code == 0
    result = cli(*common, "model.feature_dim=64")
    assert result.exit_code != 0
    lines = [ln for ln in result.output.splitlines() if ln.strip() and "INFO" not in ln]
    assert len(lines) == 1, result.output
    assert "does not fit this run's model" in lines[0]
    assert "another run_dir" in lines[0] and "resume=none" in lines[0]
    assert cli(*common, "model.feature_dim=64", "resume=none").exit_code == 0
