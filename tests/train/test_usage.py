"""`python -m carla_wds.train --help` is a user's help: how to run it, what a config and a
KEY=VALUE override are, and examples whose shell line continuations survive (they used to be
eaten by the module docstring's backslash-newline)."""
from __future__ import annotations

import pytest

from carla_wds.train.loop import main


def test_help_is_for_users_with_its_continuations(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m carla_wds.train")
    for text in ("--config", "KEY=VALUE", "optim.lr=3e-4", "torchrun --standalone",
                 "python -m carla_wds.train --config tiny epochs=2"):
        assert text in out, f"--help lacks {text!r}"
    lines = out.splitlines()
    rdzv = next(i for i, ln in enumerate(lines) if "--rdzv-backend" in ln)
    assert lines[rdzv - 1].endswith("\\") and lines[rdzv].endswith("\\"), \
        "the multi-node example lost its backslash line continuations"
    assert "-m carla_wds.train --config tcp" in lines[rdzv + 1]
    for internal in ("train_one_epoch", "evaluate.py", "Reads top to bottom"):
        assert internal not in out, f"--help shows developer prose: {internal!r}"
