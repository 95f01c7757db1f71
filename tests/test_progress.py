"""progress.py (issue 28): a bar on a terminal, a few lines in a log file."""
from __future__ import annotations

import logging
import os
import subprocess
import sys

from carla_wds.progress import LogBar, bar, interactive


def test_a_log_gets_a_line_per_tenth_and_one_at_the_end(caplog):
    with caplog.at_level(logging.INFO, logger="carla_wds.progress"):
        with LogBar(total=1000, desc="pack", unit="frame") as b:
            for _ in range(1000):
                b.update()
    lines = [r.getMessage() for r in caplog.records]
    assert 10 <= len(lines) <= 11, lines
    assert lines[-1].startswith("pack: 1000/1000 frame (100%)")
    assert "s left" in lines[0]


def test_iterating_counts_and_postfix_shows(caplog):
    with caplog.at_level(logging.INFO, logger="carla_wds.progress"):
        b = LogBar(range(20), desc="synth", unit="route")
        b.set_postfix(loss=0.5)
        assert list(b) == list(range(20))
    assert caplog.records[-1].getMessage().startswith("synth: 20/20 route (100%)")
    assert "loss=0.5" in caplog.records[-1].getMessage()


def test_a_terminal_gets_tqdm():
    master, slave = os.openpty()
    try:
        with os.fdopen(slave, "w", closefd=False) as tty:
            assert interactive(tty)
            assert type(bar(range(3), file=tty)).__name__ == "tqdm"
    finally:
        os.close(master)
        os.close(slave)
    assert isinstance(bar(range(3), file=open(os.devnull, "w")), LogBar)


def test_pack_and_synth_write_a_few_lines_into_a_log_file(tmp_path):
    cli = [sys.executable, "-m", "carla_wds.cli"]
    log = tmp_path / "run.log"
    with open(log, "w") as out:
        for args in (["synth", str(tmp_path / "raw"), "--layout", "tcp", "--episodes", "30",
                      "--frames", "12", "--image-size", "16x32"],
                     ["pack", str(tmp_path / "raw"), str(tmp_path / "shards"), "--layout", "tcp"]):
            subprocess.run(cli + args, stdout=out, stderr=subprocess.STDOUT, check=True,
                           timeout=300)
    text = log.read_text()
    assert "\r" not in text
    lines = text.splitlines()
    assert len(lines) < 40, text
    assert any(line.endswith("100%)") or "(100%)" in line for line in lines if "pack:" in line)
    assert sum("synth tcp: 30/30 route (100%)" in line for line in lines) == 1
