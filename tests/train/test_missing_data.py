"""A config pointing at data that is not there names the key to set (issue 28)."""
from __future__ import annotations

from ..helpers import make_pack


def test_missing_train_or_val_data_names_the_config_key(cli, tmp_path):
    real = make_pack(tmp_path / "pack", episodes=1, frames=12)
    for key, other in (("data.train", "data.val"), ("data.val", "data.train")):
        missing = tmp_path / key
        result = cli("train", "--config", "tiny", f"{key}={missing}", f"{other}={real}",
                     "epochs=1", f"run_dir={tmp_path / 'run'}")
        assert result.exit_code != 0
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert len(lines) == 1, result.output
        assert f"{key}={missing}" in lines[0] and f"set {key}=PATH" in lines[0]
